//! Verifying whole logs (`dsh session verify`): one streaming pass per file through the structure
//! rules and every checker plugin (the bundled `llm-retry-invariant`). Memory grows with the
//! checkers' state (the number of retry chains), never with the size of the log.

use std::path::{Path, PathBuf};

use abi_stable::std_types::{RResult, RStr};
use dsh_abi::{CheckerObject, EventRef, Verdict};

use super::read_ahead::ReadAhead;
use super::reader::{Damage, LogReader, Position, ReadError};
use super::structure::StructureRules;
use crate::plugin::RowInstance;

/// Event types of the session vocabulary; ignorable events of other types only count for seq
/// and time.
pub const KNOWN_EVENT_TYPES: [&str; 14] = [
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "request/header",
    "request/context",
    "assistant/chunk",
    "assistant/attempt",
    "assistant/message",
    "tool/call",
    "tool/result",
    "llm/retry",
    "llm/retry-started",
];

/// One broken rule: at an event (`seq`) or at a damaged line (`at`).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub seq: Option<u64>,
    pub at: Option<Position>,
    pub message: String,
}

/// What verifying one file found.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub path: PathBuf,
    pub events: u64,
    pub violations: Vec<Finding>,
    /// Crash artefacts that are not violations (a torn last line).
    pub notes: Vec<String>,
}

struct Check {
    row_id: String,
    checker: Option<CheckerObject>,
}

/// Verifies one log with the structure rules and the checkers `plugins` open for it.
pub fn verify_log(path: &Path, plugins: &[&RowInstance]) -> Result<Report, ReadError> {
    let reader = LogReader::open(path)?;
    let mut report = Report { path: path.to_owned(), events: 0, violations: Vec::new(), notes: Vec::new() };
    let mut checks = Vec::new();
    for plugin in plugins {
        use crate::waterfall::Listener;
        match plugin.open_checker(reader.header()) {
            Ok(checker) => checks.push(Check { row_id: plugin.row_id().to_owned(), checker }),
            Err(err) => report.violations.push(Finding {
                seq: None,
                at: None,
                message: format!("row \"{}\": cannot open its checker: {}", plugin.row_id(), err.message),
            }),
        }
    }
    let mut reader = ReadAhead::start(reader)?;
    let mut rules = StructureRules::default();
    let mut messages = Vec::new();
    while let Some(next) = reader.next_event() {
        let event = match next? {
            Ok(event) => event,
            Err(damage @ Damage::Torn { .. }) => {
                report.notes.push(damage.to_string());
                continue;
            }
            Err(damage @ Damage::Corrupt { at, .. }) => {
                let message = match damage {
                    Damage::Corrupt { reason, .. } => reason,
                    Damage::Torn { .. } => unreachable!("matched above"),
                };
                report.violations.push(Finding { seq: None, at: Some(at), message });
                continue;
            }
        };
        report.events += 1;
        let seq = event.seq.filter(|seq| dsh_abi::js::is_safe_integer(*seq) && *seq >= 0.0).map(|seq| seq as u64);
        let interpret = !event.ignorable || KNOWN_EVENT_TYPES.contains(&event.event_type);
        rules.check(event.seq, event.time, event.event_type, event.data, interpret, &mut messages);
        if interpret {
            let view = EventRef {
                event_type: RStr::from_str(event.event_type),
                seq: seq.unwrap_or(u64::MAX),
                time: event.time.unwrap_or(f64::NAN),
                data: RStr::from_str(event.data),
            };
            for check in &mut checks {
                let Some(checker) = check.checker.as_mut() else { continue };
                match checker.check_event(view) {
                    RResult::ROk(Verdict::Accept) => {}
                    RResult::ROk(Verdict::Refuse(message) | Verdict::Warn(message)) => {
                        messages.push(message.into_string())
                    }
                    RResult::RErr(err) => {
                        messages.push(format!(
                            "row \"{}\": checker failed and is skipped from here on: {}",
                            check.row_id, err.message
                        ));
                        check.checker = None;
                    }
                }
            }
        }
        let at = Some(event.at);
        report.violations.extend(messages.drain(..).map(|message| Finding { seq, at, message }));
    }
    Ok(report)
}
