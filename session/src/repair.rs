//! Crash repair: cutting a torn last line (kept aside in `session.jsonl.torn-<time>`), and the
//! closers that balance a turn a crash left open — a synthetic error `tool/result` for each
//! unanswered tool call, `step/end`, then `turn/end {reason: {kind: interrupted}}`.

use dsh_abi::events;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::reader::Position;
use super::rules_v4::{NOT_STARTED_TEXT, TOOL_NOT_STARTED};
use super::structure::StructureRules;
use crate::fsutil;

/// What opening a log repaired.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Repair {
    /// A torn last line: where it was, its length, and the copy kept.
    pub torn: Option<(Position, usize, PathBuf)>,
    /// The closer events appended for an interrupted turn, e.g. `turn/end`.
    pub closers: Vec<String>,
    /// What the existing events break that does not stop writing (checker reports).
    pub warnings: Vec<String>,
}

impl Repair {
    /// What the repair did and found, one sentence each, for the user.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some((at, len, backup)) = &self.torn {
            let (line, offset, backup) = (at.line, at.offset, backup.display());
            notes
                .push(format!("repaired a torn last line (line {line}, byte {offset}, {len} bytes); kept in {backup}"));
        }
        if !self.closers.is_empty() {
            notes.push(format!("closed the interrupted turn ({})", self.closers.join(", ")));
        }
        notes.extend(self.warnings.iter().map(|warning| format!("warning: the log already breaks a rule: {warning}")));
        notes
    }
}

/// Copies everything from `offset` on to `backup`, then cuts it off `file` and syncs.
pub fn cut_torn_tail(file: &mut File, offset: u64, backup: &Path) -> io::Result<()> {
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(offset))?;
    file.read_to_end(&mut tail)?;
    fsutil::write_atomic(backup, &tail)?;
    file.set_len(offset)?;
    file.sync_all()
}

/// One event that closes an interrupted turn: its type, data and the seqs it cites.
pub type Closer = (&'static str, Value, Vec<u64>);

/// The events that close the turn `rules` has open, in order; none when no turn is open. The
/// synthetic tool results have DeepSeek Harness's shape and ids, so either tool can load the
/// repaired log: an unknown outcome for a call that started (citing its `tool/call` in a v4 log),
/// and in a v4 log, `TOOL_NOT_STARTED` for one the model asked for that never started.
pub fn closers(rules: &StructureRules) -> Vec<Closer> {
    let Some(turn) = rules.open_turn() else {
        return Vec::new();
    };
    let mut closers = Vec::new();
    if let Some(step) = rules.open_step() {
        let mut calls: Vec<&str> = rules.pending_calls().collect();
        calls.sort_unstable();
        for call_id in calls {
            let seq = rules.next_seq() + closers.len() as u64;
            let started = rules.v4().map(|v4| v4.started_call(call_id));
            let (text, error) = match started {
                Some(None) => (
                    NOT_STARTED_TEXT,
                    json!({"name": "ToolNotStartedError", "message": "the host stopped before this tool call started", "code": TOOL_NOT_STARTED}),
                ),
                _ => (
                    UNKNOWN_TEXT,
                    json!({"name": "ToolOutcomeUnknownError", "message": "the host stopped before this tool call finished", "code": "TOOL_OUTCOME_UNKNOWN"}),
                ),
            };
            let block = json!({"type": "tool-result", "toolCallId": call_id, "isError": true, "content": [{"type": "text", "text": text}]});
            let data = json!({
                "turn": turn, "step": step, "callId": call_id,
                "message": {
                    "id": format!("interrupted-tool-result-{call_id}-{seq}"), "role": "user",
                    "source": {"kind": "tool", "callId": call_id}, "content": [block],
                },
                "error": error,
            });
            closers.push((events::TOOL_RESULT, data, started.flatten().into_iter().collect()));
        }
        closers.push((events::STEP_END, json!({"turn": turn, "step": step}), Vec::new()));
    }
    closers.push((events::TURN_END, json!({"turn": turn, "reason": {"kind": "interrupted"}}), Vec::new()));
    closers
}

const UNKNOWN_TEXT: &str = "The host stopped before this tool call finished; its outcome is unknown. Retry it only if it is read-only or idempotent; otherwise check its effects first.";
