//! The model-visible surface of a v4 log: `sourceEventSeqs` in its storage form, the surface
//! metadata each event type admits, and the fold of surface events — appended, or in place of a
//! run of the current surface — with the protected system head only a system prompt replaces.

use std::collections::HashSet;

use dsh_abi::events;
use serde_json::{Map, Value};

use super::fields::count;
use crate::format::Format;
use crate::vocabulary;

/// The seqs `sourceEventSeqs` names, in its storage form (a run of three or more may be written
/// as a `[start, end]` pair), each earlier than the event's `seq`.
pub fn decode_sources(value: &Value, seq: u64) -> Result<Vec<u64>, &'static str> {
    let entries = value.as_array().ok_or("sourceEventSeqs must be an array")?;
    let mut output: Vec<u64> = Vec::new();
    let mut has_range = false;
    for entry in entries {
        let room = seq.saturating_sub(output.len() as u64);
        if entry.is_number() {
            if room == 0 {
                return Err("sourceEventSeqs exceeds its event seq");
            }
            output.push(count(Some(entry)).ok_or("sourceEventSeqs member must be a non-negative safe integer")?);
            continue;
        }
        let pair = entry
            .as_array()
            .filter(|pair| pair.len() == 2)
            .ok_or("sourceEventSeqs range must be a [start, end] pair")?;
        let start = count(pair.first()).ok_or("sourceEventSeqs range start must be a non-negative safe integer")?;
        let end = count(pair.get(1)).ok_or("sourceEventSeqs range end must be a non-negative safe integer")?;
        if end < start || end - start + 1 > room {
            return Err("sourceEventSeqs range exceeds its event seq");
        }
        output.extend(start..=end);
        has_range = true;
    }
    let unique: HashSet<&u64> = output.iter().collect();
    if unique.len() != output.len() || output.iter().any(|source| *source >= seq) {
        return Err("sourceEventSeqs ranges must contain unique earlier seqs");
    }
    if has_range && output.windows(2).any(|pair| pair[1] <= pair[0]) {
        return Err("sourceEventSeqs ranges must be strictly increasing");
    }
    Ok(output)
}

/// The decoded `sourceEventSeqs` of any event that has them (unknown ignorable events too).
pub fn sources(envelope: &Map<String, Value>, seq: u64, violations: &mut dyn FnMut(String)) -> Option<Vec<u64>> {
    let value = envelope.get("sourceEventSeqs")?;
    decode_sources(value, seq).map_err(|message| violations(message.to_owned())).ok()
}

/// The surface metadata a known event's type admits (adoption's rules that the fold leaves).
pub fn metadata(
    event_type: &str,
    envelope: &Map<String, Value>,
    sources: &Option<Vec<u64>>,
    violations: &mut dyn FnMut(String),
) {
    let quoted = dsh_abi::js::to_string(event_type);
    if !vocabulary::is_surface(Format::V4, event_type) {
        for key in ["surfaceOp", "sourceEventSeqs"] {
            if envelope.contains_key(key) {
                violations(format!("session event {quoted} is not surface-eligible and cannot carry {key}"));
            }
        }
        return;
    }
    if let Some(Value::Object(op)) = envelope.get("surfaceOp") {
        let exact = op.len() == 3 && op.get("op") == Some(&Value::from("replace"));
        if !exact || count(op.get("startSeq")).is_none() || count(op.get("endSeq")).is_none() {
            violations(format!("session event {quoted} carries an invalid replace surfaceOp"));
        }
    }
    if envelope.contains_key("sourceEventSeqs") && event_type == events::ASSISTANT_MESSAGE {
        violations("assistant/message embeds its source stream and cannot carry sourceEventSeqs".to_owned());
    } else if sources.as_ref().is_some_and(Vec::is_empty) {
        violations("sourceEventSeqs must not be empty".to_owned());
    }
}

/// The current surface: the seqs of its nodes in order, and the protected system head.
#[derive(Debug, Clone, Default)]
pub struct Surface {
    nodes: Vec<u64>,
    head: Option<u64>,
    head_text: String,
}

impl Surface {
    pub fn head(&self) -> Option<(u64, &str)> {
        self.head.map(|seq| (seq, self.head_text.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Folds a surface event in; whether it took a place on the surface.
    pub fn fold(
        &mut self,
        event_type: &str,
        seq: u64,
        envelope: &Map<String, Value>,
        sources: &Option<Vec<u64>>,
        violations: &mut dyn FnMut(String),
    ) -> bool {
        if !vocabulary::is_surface(Format::V4, event_type) {
            return false;
        }
        let system = event_type == events::SYSTEM_MESSAGE;
        if system && !self.nodes.is_empty() && self.head.is_none() {
            violations("system/message requires a protected first surface head".to_owned());
            return false;
        }
        match envelope.get("surfaceOp") {
            Some(Value::String(op)) if op == "append" => {
                if system && self.nodes.is_empty() {
                    self.head = Some(seq);
                }
                self.nodes.push(seq);
                true
            }
            Some(Value::Object(op)) => self.replace(event_type, seq, op, envelope, sources, violations),
            _ => {
                violations(format!("{event_type} surfaceOp requires an object"));
                false
            }
        }
    }

    fn replace(
        &mut self,
        event_type: &str,
        seq: u64,
        op: &Map<String, Value>,
        envelope: &Map<String, Value>,
        sources: &Option<Vec<u64>>,
        violations: &mut dyn FnMut(String),
    ) -> bool {
        let bound = |key: &str, what: &str| match count(op.get(key)) {
            None => Err(format!("replacement {what} must be a non-negative safe integer")),
            Some(at) if at >= seq => Err(format!("replacement {what} must name an earlier event")),
            Some(at) => Ok(at),
        };
        let range = bound("startSeq", "start").and_then(|start| Ok((start, bound("endSeq", "end")?)));
        let (start, end) = match range {
            Ok(range) => range,
            Err(message) => {
                violations(message);
                return false;
            }
        };
        let position = |at: u64| self.nodes.iter().position(|node| *node == at);
        let (from, to) = match (position(start), position(end)) {
            (Some(from), Some(to)) if from <= to => (from, to),
            _ => {
                violations(format!("{event_type} replacement range is not on the current surface"));
                return false;
            }
        };
        if !matches!(envelope.get("sourceEventSeqs"), Some(Value::Array(_))) {
            violations("replacement sourceEventSeqs requires an array".to_owned());
            return false;
        }
        let cited: HashSet<u64> = sources.iter().flatten().copied().collect();
        if self.nodes[from..=to].iter().any(|shadowed| !cited.contains(shadowed)) {
            violations("replacement sourceEventSeqs omit a shadowed surface node".to_owned());
            return false;
        }
        if self.head.is_some_and(|head| self.nodes[from..=to].contains(&head)) {
            if event_type != events::SYSTEM_MESSAGE || from != to {
                violations("surface replacement cannot shadow the protected system head".to_owned());
                return false;
            }
            self.head = Some(seq);
        }
        self.nodes.splice(from..=to, [seq]);
        true
    }

    /// Takes in the text of an event that took its place, when it became the system head.
    pub fn placed(&mut self, seq: u64, data: &Value) {
        if self.head == Some(seq) {
            self.head_text = vocabulary::message_text(data.get("message").unwrap_or(&Value::Null));
        }
    }
}
