//! What the host knows of a session without rereading its log: the history index plugins query,
//! the model-visible (surface) history, the ids of the user messages, and the last request
//! header. Fed every event as it is read or appended.

use dsh_abi::events;
use std::collections::HashSet;

use serde_json::Value;

use super::index::HistoryIndex;
use super::vocabulary::message_text;
use crate::conversation::SurfaceMessage;

pub struct SessionState {
    index: HistoryIndex,
    surface: Vec<SurfaceMessage>,
    message_ids: HashSet<String>,
    last_request_header: Option<String>,
}

impl SessionState {
    pub fn new(header: String) -> Self {
        SessionState {
            index: HistoryIndex::new(header),
            surface: Vec::new(),
            message_ids: HashSet::new(),
            last_request_header: None,
        }
    }

    pub fn index(&self) -> &HistoryIndex {
        &self.index
    }

    /// The model-visible history, in order.
    pub fn surface(&self) -> &[SurfaceMessage] {
        &self.surface
    }

    /// Whether a `user/message` with this id is in the log.
    pub fn has_message(&self, id: &str) -> bool {
        self.message_ids.contains(id)
    }

    /// The `data` of the last `request/header`.
    pub fn last_request_header(&self) -> Option<&str> {
        self.last_request_header.as_deref()
    }

    /// Takes in one event of the log: its type, its whole line and its raw `data`.
    pub fn take_in(&mut self, event_type: &str, line: &str, data: &str) {
        self.index.observe(event_type, line, data);
        match event_type {
            events::USER_MESSAGE | events::ASSISTANT_MESSAGE => {
                let Ok(value) = serde_json::from_str::<Value>(data) else { return };
                if event_type == events::USER_MESSAGE {
                    if let Some(id) = value.get("id").and_then(Value::as_str) {
                        self.message_ids.insert(id.to_owned());
                    }
                    self.surface.push(SurfaceMessage::text("user", message_text(&value)));
                } else {
                    let message = value.get("message").unwrap_or(&Value::Null);
                    self.surface.push(SurfaceMessage::assistant(message));
                }
            }
            events::TOOL_RESULT => {
                if let Ok(value) = serde_json::from_str::<Value>(data) {
                    self.surface.push(SurfaceMessage::tool_result(&value));
                }
            }
            events::REQUEST_HEADER => self.last_request_header = Some(data.to_owned()),
            _ => {}
        }
    }
}
