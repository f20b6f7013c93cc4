//! Verifying whole logs (`dsh session verify`): one streaming pass per file through the
//! [`gate`](super::gate) — the structure rules and every checker given for it. Memory grows with
//! the checkers' state (the number of retry chains), never with the size of the log.

use super::gate::{Finder, Gate, GateEvent, RowChecker};
use super::read_ahead::ReadAhead;
use super::reader::{Damage, Position, ReadError};
use super::store::LogRef;
use super::structure::header_violations;

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
    /// The log's path, or its session id in a database.
    pub path: String,
    pub events: u64,
    pub violations: Vec<Finding>,
    /// Crash artefacts that are not violations (a torn last line).
    pub notes: Vec<String>,
}

/// Verifies one log with the structure rules and the checkers `open_checkers` opens for its
/// header.
pub fn verify_log(log: &LogRef, open_checkers: impl FnOnce(&str) -> Vec<RowChecker>) -> Result<Report, ReadError> {
    let reader = log.reader()?;
    let mut report = Report { path: log.name(), events: 0, violations: Vec::new(), notes: Vec::new() };
    let header = Some(Position { line: 1, offset: 0 });
    report.violations.extend(header_violations(reader.header()).into_iter().map(|message| Finding {
        seq: None,
        at: header,
        message,
    }));
    let mut gate = Gate::for_header(reader.header(), open_checkers(reader.header()));
    let mut reader = ReadAhead::start(reader)?;
    let mut found = Vec::new();
    while let Some(next) = reader.next_event() {
        let event = match next? {
            Ok(event) => event,
            Err(damage @ Damage::Torn { .. }) => {
                report.notes.push(log.torn_note(&damage));
                continue;
            }
            Err(Damage::Corrupt { at, reason }) => {
                report.violations.push(Finding { seq: None, at: Some(at), message: reason });
                continue;
            }
        };
        report.events += 1;
        gate.observe(&GateEvent::from(&event), &mut found);
        let seq = event.seq.filter(|seq| dsh_abi::js::is_safe_integer(*seq) && *seq >= 0.0).map(|seq| seq as u64);
        let at = Some(event.at);
        report.violations.extend(found.drain(..).map(|finding| {
            let message = match finding.finder {
                Finder::CheckerFailed { .. } => finding.describe(),
                _ => finding.message,
            };
            Finding { seq, at, message }
        }));
    }
    gate.finish(&mut found);
    report.violations.extend(found.drain(..).map(|finding| Finding {
        seq: None,
        at: header,
        message: finding.message,
    }));
    Ok(report)
}
