//! An event on its way into a log, before the log gives it its seq and time.

use dsh_abi::events::EventData;
use dsh_abi::js;
use serde_json::Value;

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub event_type: &'a str,
    /// The `data` JSON, one line, written byte for byte (plugin records keep their key order).
    pub data: String,
    /// Written with `"ignorable":true`, so readers that do not know the type skip it.
    pub ignorable: bool,
    /// The events a surface event was made from (`sourceEventSeqs`: a tool result's call).
    pub source_seqs: Vec<u64>,
    /// The surface event a v4 surface event takes the place of (the system head, which a new
    /// system prompt replaces).
    pub replaces: Option<u64>,
}

impl NewEvent<'static> {
    /// A typed event: its type, data and ignorability from [`EventData`].
    pub fn typed<T: EventData>(data: &T) -> Self {
        NewEvent {
            event_type: T::TYPE,
            data: js::to_string(data),
            ignorable: T::IGNORABLE,
            source_seqs: Vec::new(),
            replaces: None,
        }
    }
}

impl<'a> NewEvent<'a> {
    pub fn new(event_type: &'a str, data: &Value) -> Self {
        NewEvent::raw(event_type, js::to_string(data))
    }

    /// An event whose `data` is already one line of JSON.
    pub fn raw(event_type: &'a str, data: String) -> Self {
        NewEvent { event_type, data, ignorable: false, source_seqs: Vec::new(), replaces: None }
    }
}
