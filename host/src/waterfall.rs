//! The `agent/request-error` waterfall: offers a request failure to the listeners in composed row
//! order (the first is outermost) and works out the final decision.
//!
//! Each listener answers `Pass` (ask the next one and use its answer), `Decide` (final), or
//! `DelegateFirst` (ask the rest first, then decide in `after_downstream`). After the last listener
//! the answer is "no retry". A listener that fails or panics answers "no retry" for its branch; an
//! outer delegate-first listener is told the branch failed, with the message. So does a listener
//! whose retry decision the host cannot carry out ([`check_row_decision`]: a delay that is not a
//! finite number within the timer range, or unlike its record's `delayMs`; a record that is not
//! one JSON object with the chain fields). Cancellation beats any decision: a delegate-first
//! listener whose turn was cancelled while the rest of the chain ran is told `Cancelled`. Like a
//! Cordis waterfall where `next()` is a one-shot continuation.

use abi_stable::std_types::RString;
use dsh_abi::retry::{check_row_decision, CheckedRetry};
use dsh_abi::{Answer, Decision, DownstreamOutcome, RequestErrorPayload, RetryDecision, RouteSwitch};

use crate::context::{CallContext, Session};

/// A listener call that produced no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerError {
    pub panicked: bool,
    pub message: String,
}

/// One `agent/request-error` listener.
pub trait Listener {
    fn row_id(&self) -> &str;

    fn on_request_error(&self, payload: &RequestErrorPayload, ctx: &CallContext<'_>) -> Result<Answer, ListenerError>;

    fn after_downstream(
        &self,
        payload: &RequestErrorPayload,
        ctx: &CallContext<'_>,
        outcome: &mut DownstreamOutcome,
    ) -> Result<Decision, ListenerError>;
}

/// The waterfall's final answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Retry after `retry.delay_ms`, appending `retry.record`; `row_id` produced it.
    Retry { retry: Box<CheckedRetry>, row_id: String },
    /// Send the step to `switch.route` now; `row_id` decided it.
    Switch { switch: RouteSwitch, row_id: String },
    /// Nobody retried. `failures` lists the listeners that failed on the way (row id, message);
    /// `refused` is the row that refused a retry and its reason, when one did.
    NoRetry { failures: Vec<(String, String)>, refused: Option<(String, String)> },
    /// The turn was cancelled; whatever was decided is dropped.
    Cancelled,
}

/// What one branch of the chain (a listener and everything after it) answered.
enum Branch {
    Retried {
        decision: RetryDecision,
        checked: Box<CheckedRetry>,
        row_id: String,
    },
    Switched {
        switch: RouteSwitch,
        row_id: String,
    },
    Declined,
    /// Declined with a reason the host must record.
    Refused {
        row_id: String,
        reason: String,
    },
    Failed {
        row_id: String,
        message: String,
    },
}

/// Runs the waterfall over `listeners` (outermost first).
pub fn run<L: Listener + ?Sized>(listeners: &[&L], payload: &RequestErrorPayload, ctx: &CallContext<'_>) -> Outcome {
    let mut failures = Vec::new();
    let branch = run_from(listeners, payload, ctx, &mut failures);
    if ctx.session.is_cancelled() {
        return Outcome::Cancelled;
    }
    match branch {
        Branch::Retried { checked, row_id, .. } => Outcome::Retry { retry: checked, row_id },
        Branch::Switched { switch, row_id } => Outcome::Switch { switch, row_id },
        Branch::Refused { row_id, reason } => Outcome::NoRetry { failures, refused: Some((row_id, reason)) },
        Branch::Declined | Branch::Failed { .. } => Outcome::NoRetry { failures, refused: None },
    }
}

fn run_from<L: Listener + ?Sized>(
    listeners: &[&L],
    payload: &RequestErrorPayload,
    ctx: &CallContext<'_>,
    failures: &mut Vec<(String, String)>,
) -> Branch {
    let Some((listener, rest)) = listeners.split_first() else {
        return Branch::Declined;
    };
    let row_id = listener.row_id();
    let answer = match listener.on_request_error(payload, ctx) {
        Ok(answer) => answer,
        Err(err) => return failed(row_id, err, failures),
    };
    match answer {
        Answer::Pass => run_from(rest, payload, ctx, failures),
        Answer::Decide(Decision::NoRetry) => Branch::Declined,
        Answer::Decide(Decision::Refuse(reason)) => {
            Branch::Refused { row_id: row_id.to_owned(), reason: reason.into_string() }
        }
        Answer::Decide(Decision::Retry(decision)) => retried(row_id, decision, failures),
        Answer::Decide(Decision::Switch(switch)) => Branch::Switched { switch, row_id: row_id.to_owned() },
        Answer::DelegateFirst => after_delegating(*listener, rest, payload, ctx, failures),
    }
}

/// A listener that delegated first: the rest of the chain runs, then the listener decides on
/// what it did. The downstream decision is lent to the listener, not copied; a decision passed
/// through unchanged still belongs to the row that made it.
fn after_delegating<L: Listener + ?Sized>(
    listener: &L,
    rest: &[&L],
    payload: &RequestErrorPayload,
    ctx: &CallContext<'_>,
    failures: &mut Vec<(String, String)>,
) -> Branch {
    let row_id = listener.row_id();
    let (mut outcome, downstream_retry) = match run_from(rest, payload, ctx, failures) {
        _ if ctx.session.is_cancelled() => (DownstreamOutcome::Cancelled, None),
        Branch::Retried { decision, checked, row_id } => {
            (DownstreamOutcome::Retried(decision), Some((Some(checked), row_id)))
        }
        Branch::Switched { switch, row_id } => (DownstreamOutcome::Switched(switch), Some((None, row_id))),
        Branch::Declined | Branch::Refused { .. } => (DownstreamOutcome::Declined, None),
        Branch::Failed { row_id, message } => {
            (DownstreamOutcome::Failed(RString::from(format!("row \"{row_id}\": {message}"))), None)
        }
    };
    match listener.after_downstream(payload, ctx, &mut outcome) {
        Err(err) => failed(row_id, err, failures),
        Ok(Decision::NoRetry) => Branch::Declined,
        Ok(Decision::Refuse(reason)) => Branch::Refused { row_id: row_id.to_owned(), reason: reason.into_string() },
        Ok(Decision::Retry(decision)) => match (outcome, downstream_retry) {
            // Passed through unchanged: the downstream row still owns the decision.
            (DownstreamOutcome::Retried(passed), Some((Some(checked), row_id))) if passed == decision => {
                Branch::Retried { decision: passed, checked, row_id }
            }
            _ => retried(row_id, decision, failures),
        },
        Ok(Decision::Switch(switch)) => match (outcome, downstream_retry) {
            (DownstreamOutcome::Switched(passed), Some((_, row_id))) if passed == switch => {
                Branch::Switched { switch: passed, row_id }
            }
            _ => Branch::Switched { switch, row_id: row_id.to_owned() },
        },
    }
}

/// A listener's retry decision, once the host has checked it can carry it out.
fn retried(row_id: &str, decision: RetryDecision, failures: &mut Vec<(String, String)>) -> Branch {
    match check_row_decision(&decision) {
        Ok(checked) => Branch::Retried { decision, checked: Box::new(checked), row_id: row_id.to_owned() },
        Err(message) => failed(row_id, ListenerError { panicked: false, message }, failures),
    }
}

fn failed(row_id: &str, err: ListenerError, failures: &mut Vec<(String, String)>) -> Branch {
    tracing::warn!("row \"{row_id}\": {}; answering no retry for its branch", err.message);
    failures.push((row_id.to_owned(), err.message.clone()));
    Branch::Failed { row_id: row_id.to_owned(), message: err.message }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::context::SessionlessHost;
    use dsh_abi::Failure;

    fn payload() -> RequestErrorPayload {
        RequestErrorPayload::new(1, 1, "mock", Failure::new("SERVER", "HTTP 503"), None)
    }

    /// An in-process listener with a scripted answer that records what it was told.
    struct Scripted {
        id: &'static str,
        answer: Result<Answer, &'static str>,
        after: Option<Result<Decision, &'static str>>,
        seen: RefCell<Vec<DownstreamOutcome>>,
        calls: RefCell<u32>,
    }

    /// A decision with a well-formed record named `name`.
    fn retry(name: &str, delay_ms: f64) -> RetryDecision {
        RetryDecision {
            delay_ms,
            record: format!(r#"{{"retryId":"{name}","retry":1,"delayMs":{}}}"#, dsh_abi::js::number(delay_ms)).into(),
        }
    }

    impl Scripted {
        fn new(id: &'static str, answer: Result<Answer, &'static str>) -> Self {
            Scripted { id, answer, after: None, seen: RefCell::default(), calls: RefCell::default() }
        }

        fn pass(id: &'static str) -> Self {
            Self::new(id, Ok(Answer::Pass))
        }

        fn retries(id: &'static str, record: &str) -> Self {
            Self::new(id, Ok(Answer::Decide(Decision::Retry(retry(record, 10.0)))))
        }

        fn vetoes(id: &'static str) -> Self {
            Self::new(id, Ok(Answer::Decide(Decision::NoRetry)))
        }

        fn fails(id: &'static str) -> Self {
            Self::new(id, Err("boom"))
        }

        /// Delegates first, then answers `after`, or passes the downstream retry through.
        fn delegates(id: &'static str, after: Option<Result<Decision, &'static str>>) -> Self {
            Scripted { after, ..Self::new(id, Ok(Answer::DelegateFirst)) }
        }
    }

    impl Listener for Scripted {
        fn row_id(&self) -> &str {
            self.id
        }

        fn on_request_error(&self, _: &RequestErrorPayload, _: &CallContext<'_>) -> Result<Answer, ListenerError> {
            *self.calls.borrow_mut() += 1;
            self.answer.clone().map_err(|message| ListenerError { panicked: false, message: message.to_owned() })
        }

        fn after_downstream(
            &self,
            _: &RequestErrorPayload,
            _: &CallContext<'_>,
            outcome: &mut DownstreamOutcome,
        ) -> Result<Decision, ListenerError> {
            self.seen.borrow_mut().push(outcome.clone());
            match &self.after {
                Some(answer) => {
                    answer.clone().map_err(|message| ListenerError { panicked: true, message: message.to_owned() })
                }
                None => Ok(match outcome {
                    DownstreamOutcome::Retried(decision) => Decision::Retry(decision.clone()),
                    _ => Decision::NoRetry,
                }),
            }
        }
    }

    fn run_chain(listeners: &[&Scripted]) -> Outcome {
        run(listeners, &payload(), &SessionlessHost::default().context())
    }

    fn retry_by(row: &str, name: &str) -> Outcome {
        Outcome::Retry {
            retry: Box::new(dsh_abi::retry::check_decision(&retry(name, 10.0)).unwrap()),
            row_id: row.to_owned(),
        }
    }

    #[test]
    fn no_listeners_means_no_retry() {
        assert_eq!(run_chain(&[]), Outcome::NoRetry { failures: vec![], refused: None });
    }

    #[test]
    fn passing_listeners_fall_through_to_the_default_no_retry() {
        let (a, b) = (Scripted::pass("a"), Scripted::pass("b"));
        assert_eq!(run_chain(&[&a, &b]), Outcome::NoRetry { failures: vec![], refused: None });
        assert_eq!((*a.calls.borrow(), *b.calls.borrow()), (1, 1));
    }

    #[test]
    fn a_decision_stops_the_chain() {
        let (a, b) = (Scripted::retries("a", "a"), Scripted::retries("b", "b"));
        assert_eq!(run_chain(&[&a, &b]), retry_by("a", "a"));
        assert_eq!(*b.calls.borrow(), 0);
    }

    #[test]
    fn a_veto_hides_every_later_listener() {
        let (a, b) = (Scripted::vetoes("a"), Scripted::retries("b", "b"));
        assert_eq!(run_chain(&[&a, &b]), Outcome::NoRetry { failures: vec![], refused: None });
        assert_eq!(*b.calls.borrow(), 0);
    }

    #[test]
    fn pass_uses_the_answer_of_the_next_listener() {
        let (a, b) = (Scripted::pass("a"), Scripted::retries("b", "b"));
        assert_eq!(run_chain(&[&a, &b]), retry_by("b", "b"));
    }

    #[test]
    fn delegate_first_is_told_the_turn_was_cancelled_while_the_rest_ran() {
        let (a, b) = (Scripted::delegates("a", None), Scripted::retries("b", "b"));
        let host = SessionlessHost::default();
        host.cancel();
        let context = host.context();
        assert_eq!(run(&[&a, &b], &payload(), &context), Outcome::Cancelled);
        assert_eq!(*a.seen.borrow(), [DownstreamOutcome::Cancelled]);
    }

    #[test]
    fn delegate_first_sees_a_downstream_retry_and_passes_it_through() {
        let (a, b) = (Scripted::delegates("a", None), Scripted::retries("b", "b"));
        assert_eq!(run_chain(&[&a, &b]), retry_by("b", "b"));
        assert_eq!(*a.seen.borrow(), vec![DownstreamOutcome::Retried(retry("b", 10.0))]);
    }

    #[test]
    fn delegate_first_sees_nobody_retried_and_decides_itself() {
        let a = Scripted::delegates("a", Some(Ok(Decision::Retry(retry("a", 10.0)))));
        let b = Scripted::pass("b");
        assert_eq!(run_chain(&[&a, &b]), retry_by("a", "a"));
        assert_eq!(*a.seen.borrow(), vec![DownstreamOutcome::Declined]);
    }

    #[test]
    fn delegate_first_can_override_a_downstream_retry() {
        let a = Scripted::delegates("a", Some(Ok(Decision::NoRetry)));
        let b = Scripted::retries("b", "b");
        assert_eq!(run_chain(&[&a, &b]), Outcome::NoRetry { failures: vec![], refused: None });
    }

    #[test]
    fn nested_delegate_first_listeners_unwind_innermost_first() {
        let outer = Scripted::delegates("outer", None);
        let inner = Scripted::delegates("inner", Some(Ok(Decision::Retry(retry("inner", 10.0)))));
        let last = Scripted::pass("last");
        assert_eq!(run_chain(&[&outer, &inner, &last]), retry_by("inner", "inner"));
        assert_eq!(*inner.seen.borrow(), vec![DownstreamOutcome::Declined]);
        assert_eq!(*outer.seen.borrow(), vec![DownstreamOutcome::Retried(retry("inner", 10.0))]);
    }

    #[test]
    fn a_failing_listener_answers_no_retry_and_hides_later_listeners() {
        let (a, b) = (Scripted::fails("a"), Scripted::retries("b", "b"));
        assert_eq!(
            run_chain(&[&a, &b]),
            Outcome::NoRetry { failures: vec![("a".into(), "boom".into())], refused: None }
        );
        assert_eq!(*b.calls.borrow(), 0);
    }

    #[test]
    fn delegate_first_is_told_that_a_listener_in_the_middle_failed() {
        let outer = Scripted::delegates("outer", Some(Ok(Decision::Retry(retry("outer", 10.0)))));
        let middle = Scripted::fails("middle");
        let last = Scripted::retries("last", "last");
        assert_eq!(run_chain(&[&outer, &middle, &last]), retry_by("outer", "outer"));
        assert_eq!(*outer.seen.borrow(), vec![DownstreamOutcome::Failed("row \"middle\": boom".into())]);
        assert_eq!(*last.calls.borrow(), 0);
    }

    #[test]
    fn a_panic_in_after_downstream_answers_no_retry_for_that_branch() {
        let outer = Scripted::delegates("outer", None);
        let middle = Scripted::delegates("middle", Some(Err("middle panicked")));
        let last = Scripted::retries("last", "last");
        assert_eq!(
            run_chain(&[&outer, &middle, &last]),
            Outcome::NoRetry { failures: vec![("middle".into(), "middle panicked".into())], refused: None }
        );
        assert_eq!(*outer.seen.borrow(), vec![DownstreamOutcome::Failed("row \"middle\": middle panicked".into())]);
    }

    #[test]
    fn a_decision_the_host_cannot_carry_out_fails_its_branch() {
        for (delay_ms, record) in [
            (1e308, r#"{"retryId":"a","retry":1,"delayMs":1e308}"#),
            (f64::NAN, r#"{"retryId":"a","retry":1,"delayMs":1}"#),
            (-1.0, r#"{"retryId":"a","retry":1,"delayMs":-1}"#),
            (5.0, r#"{"retryId":"a","retry":1,"delayMs":6}"#),
            (5.0, "[5]"),
        ] {
            let bad = Scripted::new(
                "bad",
                Ok(Answer::Decide(Decision::Retry(RetryDecision { delay_ms, record: record.into() }))),
            );
            let outer = Scripted::delegates("outer", None);
            let outcome = run_chain(&[&outer, &bad]);
            assert!(
                matches!(&outcome, Outcome::NoRetry { failures, .. } if failures[0].0 == "bad"),
                "{record}: {outcome:?}"
            );
            assert!(
                matches!(&outer.seen.borrow()[0], DownstreamOutcome::Failed(message) if message.contains("row \"bad\": returned a retry decision the host cannot carry out")),
                "{:?}",
                outer.seen.borrow()
            );
        }
    }

    #[test]
    fn cancellation_beats_a_retry_decision() {
        let host = SessionlessHost::default();
        host.cancel();
        let a = Scripted::retries("a", "a");
        let context = host.context();
        let outcome = run(&[&a], &payload(), &context);
        assert_eq!(outcome, Outcome::Cancelled);
    }
}
