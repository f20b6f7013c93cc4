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
    /// The run of the surface a v4 surface event takes the place of (the system head, which a
    /// new system prompt replaces; a compaction's summary, in a migrated log).
    pub replaces: Option<Replacement>,
}

/// A v4 `surfaceOp` replacing the surface from `start` to `end`; it cites every event it
/// shadows in `sourceEventSeqs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replacement {
    pub start: u64,
    pub end: u64,
    /// `surfaceOp` is written before `sourceEventSeqs`, as 0.2 writes a new system prompt; a
    /// migrated row keeps the order its source had.
    pub op_first: bool,
}

impl Replacement {
    /// The system head at `seq`, replaced by a new system prompt.
    pub fn head(seq: u64) -> Replacement {
        Replacement { start: seq, end: seq, op_first: true }
    }
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

/// `sourceEventSeqs` as 0.2 stores them: a run of three or more consecutive seqs as a
/// `[start, end]` pair (a list that is not increasing is written as it is).
pub fn source_seqs_json(seqs: &[u64]) -> String {
    if seqs.windows(2).any(|pair| pair[1] <= pair[0]) {
        return js::to_string(&seqs);
    }
    let mut parts = Vec::new();
    let mut index = 0;
    while index < seqs.len() {
        let start = seqs[index];
        let mut end = start;
        while seqs.get(index + 1) == Some(&(end + 1)) {
            index += 1;
            end += 1;
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => parts.extend([start.to_string(), end.to_string()]),
            _ => parts.push(format!("[{start},{end}]")),
        }
        index += 1;
    }
    format!("[{}]", parts.join(","))
}

/// The envelope line of `event` (its `data` as `data`) at `seq` and `time`: `type, seq, time,
/// data, [ignorable]`, then `sourceEventSeqs` and `surfaceOp` in the order 0.2 writes them; a
/// `surface` event of a v4 log that replaces nothing is appended (`"surfaceOp":"append"`).
pub fn envelope_line(event: &NewEvent<'_>, data: &str, seq: u64, time: u64, surface: bool) -> String {
    let sources = match (event.replaces, event.source_seqs.is_empty()) {
        (Some(replacement), true) => format!(",\"sourceEventSeqs\":{}", source_seqs_json(&[replacement.start])),
        (_, false) => format!(",\"sourceEventSeqs\":{}", source_seqs_json(&event.source_seqs)),
        (None, true) => String::new(),
    };
    let surface_op = match event.replaces {
        Some(Replacement { start, end, .. }) => {
            format!(",\"surfaceOp\":{{\"op\":\"replace\",\"startSeq\":{start},\"endSeq\":{end}}}")
        }
        None if surface => ",\"surfaceOp\":\"append\"".to_owned(),
        None => String::new(),
    };
    let envelope_tail = match event.replaces {
        Some(Replacement { op_first: true, .. }) => format!("{surface_op}{sources}"),
        _ => format!("{sources}{surface_op}"),
    };
    format!(
        "{{\"type\":{},\"seq\":{seq},\"time\":{time},\"data\":{data}{}{envelope_tail}}}",
        js::to_string(event.event_type),
        if event.ignorable { ",\"ignorable\":true" } else { "" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_three_or_more_sources_are_stored_as_pairs_as_0_2_stores_them() {
        assert_eq!(source_seqs_json(&[3, 5, 6, 7, 8, 9, 12]), "[3,[5,9],12]");
        assert_eq!(source_seqs_json(&[4, 5]), "[4,5]");
        assert_eq!(source_seqs_json(&[7]), "[7]");
        assert_eq!(source_seqs_json(&[5, 3]), "[5,3]");
    }
}
