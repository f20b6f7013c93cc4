//! The gate every event passes: the session structure rules, then every checker plugin, in one
//! loop shared by the three places that check events — opening a log, appending to it, and
//! `dsh session verify`.
//!
//! One rule for malformed envelopes, wherever the event is checked: the structure rules report a
//! missing or non-integral `seq` or `time`; checkers are given the seq the event should have (its
//! position in the log) and a time of NaN.

use abi_stable::std_types::{RResult, RStr};
use dsh_abi::{js, CheckerObject, EventRef, Verdict};

use super::format::Format;
pub use super::structure::GateEvent;
use super::structure::{Rule, StructureRules};
use super::vocabulary;

/// A checker plugin's per-session state, with the row that owns it.
pub struct RowChecker {
    pub row_id: String,
    pub checker: CheckerObject,
}

/// Who found something wrong with an event, and how much it matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finder {
    /// The session rules; [`Rule::Integrity`] makes a log unwritable.
    Rules(Rule),
    /// A checker that refuses the event (`enforce` mode).
    Refused { row: String },
    /// A checker that only reports it (`report` mode).
    Reported { row: String },
    /// A checker that failed on the event; it leaves the session.
    CheckerFailed { row: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub finder: Finder,
    pub message: String,
}

impl Finding {
    /// Whether the event must not be appended.
    pub fn blocks(&self) -> bool {
        matches!(self.finder, Finder::Rules(_) | Finder::Refused { .. })
    }

    /// The finding with the row that made it, for logs and messages.
    pub fn describe(&self) -> String {
        match &self.finder {
            Finder::Rules(_) => self.message.clone(),
            Finder::Refused { row } | Finder::Reported { row } => format!("{} (row \"{row}\")", self.message),
            Finder::CheckerFailed { row } => {
                format!("row \"{row}\": its checker failed and leaves the session: {}", self.message)
            }
        }
    }
}

/// How an event meets the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Already in a log (opening it, verifying it): every finding is collected and the event is
    /// taken in whatever is found.
    Observe,
    /// About to be appended: the first blocking finding stops the check, and a rule violation
    /// leaves the rules as they were.
    Append,
}

pub struct Gate {
    rules: StructureRules,
    checkers: Vec<RowChecker>,
}

impl Gate {
    /// A gate for a log of `format`.
    pub fn new(format: Format, checkers: Vec<RowChecker>) -> Self {
        Gate { rules: StructureRules::new(format), checkers }
    }

    /// A gate for the log whose header line is `header`.
    pub fn for_header(header: &str, checkers: Vec<RowChecker>) -> Self {
        Gate { rules: StructureRules::for_header(header), checkers }
    }

    /// What only the whole log shows, once every event passed (the structure rules' own; the
    /// checkers judge events one at a time).
    pub fn finish(&self, found: &mut Vec<Finding>) {
        self.rules.finish(&mut |rule, message| found.push(Finding { finder: Finder::Rules(rule), message }));
    }

    pub fn rules(&self) -> &StructureRules {
        &self.rules
    }

    /// Checks an event that is already in the log and takes it in; what is wrong with it is
    /// pushed to `found`.
    pub fn observe(&mut self, event: &GateEvent<'_>, found: &mut Vec<Finding>) {
        let Gate { rules, checkers } = self;
        check(rules, checkers, event, Admission::Observe, found);
    }

    /// Checks an event about to be appended. `Err` is the first blocking finding: the event must
    /// not be written, and the structure state is unchanged. Non-blocking findings are logged.
    pub fn admit(&mut self, event: &GateEvent<'_>) -> Result<(), Finding> {
        let mut probe = self.rules.clone();
        let mut found = Vec::new();
        check(&mut probe, &mut self.checkers, event, Admission::Append, &mut found);
        if let Some(blocking) = found.iter().position(Finding::blocks) {
            return Err(found.swap_remove(blocking));
        }
        for finding in &found {
            tracing::warn!("{}", finding.describe());
        }
        self.rules = probe;
        Ok(())
    }
}

/// The one loop: structure rules, then each checker in row order.
fn check(
    rules: &mut StructureRules,
    checkers: &mut Vec<RowChecker>,
    event: &GateEvent<'_>,
    admission: Admission,
    found: &mut Vec<Finding>,
) {
    let position = rules.next_seq();
    let before = found.len();
    rules.check(event, &mut |rule, message| found.push(Finding { finder: Finder::Rules(rule), message }));
    // Checkers see the events of the vocabulary, and required events of unknown types (which the
    // rules refuse); ignorable events of unknown types only count for seq and time.
    let for_checkers = !event.ignorable || vocabulary::is_known(rules.format(), event.event_type);
    if !for_checkers || (admission == Admission::Append && found.len() > before) {
        return;
    }
    let view = EventRef {
        event_type: RStr::from_str(event.event_type),
        seq: event.seq.filter(|seq| js::is_safe_integer(*seq) && *seq >= 0.0).map_or(position, |seq| seq as u64),
        time: event.time.unwrap_or(f64::NAN),
        data: RStr::from_str(event.data),
    };
    let mut refused = false;
    checkers.retain_mut(|check| {
        if refused {
            return true;
        }
        let row = || check.row_id.clone();
        let verdict = match check.checker.check_event(view) {
            RResult::ROk(verdict) => Verdict::try_from(verdict),
            RResult::RErr(err) => Err(err.message.into_string()),
        };
        match verdict {
            Ok(Verdict::Accept) => true,
            Ok(Verdict::Refuse(message)) => {
                refused = admission == Admission::Append;
                found.push(Finding { finder: Finder::Refused { row: row() }, message: message.into_string() });
                true
            }
            Ok(Verdict::Warn(message)) => {
                found.push(Finding { finder: Finder::Reported { row: row() }, message: message.into_string() });
                true
            }
            Err(message) => {
                found.push(Finding { finder: Finder::CheckerFailed { row: row() }, message });
                false
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use abi_stable::sabi_trait::TD_Opaque;
    use dsh_abi::ffi::VerdictRepr_NE;
    use dsh_abi::{PluginError, SessionChecker, SessionChecker_TO};

    use super::*;

    /// A checker that answers every event with the same verdict (or fails), counting calls.
    struct Scripted {
        answer: Result<Verdict, &'static str>,
        calls: Arc<AtomicUsize>,
    }

    impl SessionChecker for Scripted {
        fn check_event(&mut self, _event: EventRef<'_>) -> RResult<VerdictRepr_NE, PluginError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match &self.answer {
                Ok(verdict) => RResult::ROk(verdict.clone().into()),
                Err(message) => RResult::RErr(PluginError::failed(*message)),
            }
        }
    }

    fn row(row_id: &str, answer: Result<Verdict, &'static str>) -> (RowChecker, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let checker = SessionChecker_TO::from_value(Scripted { answer, calls: Arc::clone(&calls) }, TD_Opaque);
        (RowChecker { row_id: row_id.to_owned(), checker }, calls)
    }

    fn event(seq: f64) -> GateEvent<'static> {
        GateEvent {
            event_type: "turn/start",
            seq: Some(seq),
            time: Some(1.0),
            data: r#"{"turn":1}"#,
            ignorable: false,
            line: "",
        }
    }

    #[test]
    fn a_checker_that_fails_leaves_the_session_after_one_finding() {
        let (failing, calls) = row("broken", Err("boom"));
        let mut gate = Gate::new(Format::V0, vec![failing]);
        let mut found = Vec::new();
        gate.observe(&event(0.0), &mut found);
        gate.observe(
            &GateEvent { event_type: "turn/end", seq: Some(1.0), data: r#"{"turn":1}"#, ..event(1.0) },
            &mut found,
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(found, [Finding { finder: Finder::CheckerFailed { row: "broken".into() }, message: "boom".into() }]);
    }

    #[test]
    fn an_append_that_breaks_a_rule_is_refused_before_any_checker_and_changes_nothing() {
        let (counting, calls) = row("counting", Ok(Verdict::Accept));
        let mut gate = Gate::new(Format::V0, vec![counting]);
        let refused = gate.admit(&event(5.0)).unwrap_err();
        assert_eq!(refused.finder, Finder::Rules(Rule::Integrity));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert_eq!(gate.rules().next_seq(), 0);
        gate.admit(&event(0.0)).unwrap();
        assert_eq!(gate.rules().next_seq(), 1);
    }

    #[test]
    fn a_refusal_blocks_an_append_and_a_report_does_not() {
        let (refusing, _) = row("strict", Ok(Verdict::Refuse("no".into())));
        assert_eq!(
            Gate::new(Format::V0, vec![refusing]).admit(&event(0.0)).unwrap_err().describe(),
            "no (row \"strict\")"
        );
        let (reporting, _) = row("lenient", Ok(Verdict::Warn("hm".into())));
        assert!(Gate::new(Format::V0, vec![reporting]).admit(&event(0.0)).is_ok());
    }

    #[test]
    fn observing_collects_every_finding_and_takes_the_event_in() {
        let (first, _) = row("a", Ok(Verdict::Refuse("one".into())));
        let (second, _) = row("b", Ok(Verdict::Warn("two".into())));
        let mut gate = Gate::new(Format::V0, vec![first, second]);
        let mut found = Vec::new();
        gate.observe(&event(3.0), &mut found);
        let messages: Vec<&str> = found.iter().map(|finding| finding.message.as_str()).collect();
        assert_eq!(messages, ["seq 3 where 0 was expected", "one", "two"]);
        assert_eq!(gate.rules().next_seq(), 4);
    }
}
