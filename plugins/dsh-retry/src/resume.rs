//! Resume after a restart: whether the log proves that work was interrupted, and the one
//! continuation message to enqueue. Looks only at the last `turn/end` and its turn:
//!
//! 1. **pending retry** — ended `interrupted` (or `aborted/disposed` with `resumeDisposed`): the
//!    latest `llm/retry` of the turn written by this plugin (mode `normal`, policy key starting
//!    with `dsh-retry/v1`) has no `llm/retry-started` after it;
//! 2. **incomplete request** — ended `interrupted`, the turn holds a `user/message`, and its
//!    latest step has no `assistant/message`;
//! 3. **interrupted tool step** — ended `interrupted`, and the latest step's assistant message
//!    has tool calls that all have durable results.
//!
//! A pending retry wins. Everything else fails closed, and so does a proof older than
//! `resumeMaxAgeMs`.

use dsh_abi::events::{open_calls, tool_call_ids};
use dsh_abi::{js, Continuation};
use serde_json::Value;

use crate::config::FallbackConfig;

/// What the log proves.
#[derive(Debug, Clone, PartialEq)]
pub enum Proof {
    PendingRetry { retry_id: String, retry: u64, time: f64 },
    IncompleteRequest { turn: u64, step: u64, time: f64 },
    InterruptedToolStep { turn: u64, step: u64, time: f64 },
}

impl Proof {
    fn time(&self) -> f64 {
        match self {
            Proof::PendingRetry { time, .. }
            | Proof::IncompleteRequest { time, .. }
            | Proof::InterruptedToolStep { time, .. } => *time,
        }
    }

    /// The message to enqueue, with its deterministic id.
    pub fn continuation(&self, session: &str, turn: u64, prompt: &str) -> Continuation {
        let (id, summary) = match self {
            Proof::PendingRetry { retry_id, retry, .. } => (
                format!("dsh-retry:resume:{session}:retry:{retry_id}:{retry}"),
                format!("Continuing pending retry {retry} after a restart."),
            ),
            Proof::IncompleteRequest { turn, step, .. } => (
                format!("dsh-retry:resume:{session}:request:{turn}:{step}"),
                format!("Continuing incomplete request from turn {turn} after a restart."),
            ),
            Proof::InterruptedToolStep { turn: proof_turn, step, .. } => (
                format!("dsh-retry:resume:{session}:request:{proof_turn}:{step}"),
                format!("Continuing interrupted tool step from turn {turn} after a restart."),
            ),
        };
        Continuation { id: id.into(), text: prompt.into(), form: "notice".into(), summary: summary.into() }
    }
}

fn event_type(event: &Value) -> &str {
    event.get("type").and_then(Value::as_str).unwrap_or("")
}

fn number(value: Option<&Value>) -> Option<u64> {
    value.and_then(js::as_safe_u64)
}

fn data<'a>(event: &'a Value, key: &str) -> Option<&'a Value> {
    event.get("data")?.get(key)
}

fn is_own_policy_key(key: Option<&Value>) -> bool {
    key.and_then(Value::as_str)
        .and_then(|key| serde_json::from_str::<Value>(key).ok())
        .and_then(|key| key.get(0).cloned())
        .is_some_and(|first| first == "dsh-retry/v1")
}

/// Finds the proof in the events of the last turn (whole envelopes, oldest first).
pub fn find_proof(config: &FallbackConfig, events: &[Value]) -> Option<(u64, Proof)> {
    let end = events.iter().rev().find(|event| event_type(event) == dsh_abi::events::TURN_END)?;
    let turn = number(data(end, "turn"))?;
    let end_time = end.get("time").and_then(Value::as_f64)?;
    let reason = data(end, "reason")?;
    let kind = reason.get("kind").and_then(Value::as_str);
    let interrupted = kind == Some("interrupted");
    let disposed = kind == Some("aborted")
        && reason.get("reason").and_then(|r| r.get("kind")).and_then(Value::as_str) == Some("disposed");
    if !(interrupted || (disposed && config.resume_disposed)) {
        return None;
    }
    let in_turn: Vec<&Value> =
        events.iter().filter(|event| number(data(event, "turn")).is_none_or(|t| t == turn)).collect();
    match pending_work(&in_turn) {
        Pending::Others => None,
        Pending::Own(proof) => Some((turn, proof)),
        Pending::Nothing if interrupted => interrupted_step(&in_turn, turn, end_time).map(|proof| (turn, proof)),
        Pending::Nothing => None,
    }
}

/// What the retries of the ended turn left undone.
enum Pending {
    /// Another executor's retry was pending: its work is its own to resume (fail closed).
    Others,
    /// One of ours was scheduled and never started.
    Own(Proof),
    Nothing,
}

fn pending_work(in_turn: &[&Value]) -> Pending {
    let started = |position: usize, retry: &Value| {
        let same = |key: &str, other: &Value| js::strict_equals(data(other, key), data(retry, key));
        in_turn[position + 1..].iter().any(|later| {
            event_type(later) == dsh_abi::events::LLM_RETRY_STARTED
                && ["retryId", "turn", "step", "retry"].iter().all(|key| same(key, later))
        })
    };
    let latest_retry =
        in_turn.iter().enumerate().rev().find(|(_, event)| event_type(event) == dsh_abi::events::LLM_RETRY);
    if let Some((position, retry)) = latest_retry {
        if !is_own_policy_key(data(retry, "policyKey")) && !started(position, retry) {
            return Pending::Others;
        }
    }
    let own_retry = in_turn.iter().enumerate().rev().find(|(_, event)| {
        event_type(event) == dsh_abi::events::LLM_RETRY
            && data(event, "mode") == Some(&Value::from("normal"))
            && is_own_policy_key(data(event, "policyKey"))
    });
    let Some((_, retry)) = own_retry.filter(|(position, retry)| !started(*position, retry)) else {
        return Pending::Nothing;
    };
    let pending = || {
        let retry_id = data(retry, "retryId").and_then(Value::as_str)?.to_owned();
        let number = number(data(retry, "retry"))?;
        let time = retry.get("time").and_then(Value::as_f64)?;
        Some(Proof::PendingRetry { retry_id, retry: number, time })
    };
    // A record of ours without its chain fields proves nothing: fail closed as well.
    pending().map_or(Pending::Others, Pending::Own)
}

/// The proof that the turn's last step was cut off: a request never answered, or an answer whose
/// tool calls all have results (so the step can go on).
fn interrupted_step(in_turn: &[&Value], turn: u64, end_time: f64) -> Option<Proof> {
    let step = in_turn
        .iter()
        .filter(|event| event_type(event) == dsh_abi::events::STEP_START)
        .filter_map(|event| number(data(event, "step")))
        .max()?;
    let in_step: Vec<&&Value> = in_turn.iter().filter(|event| number(data(event, "step")) == Some(step)).collect();
    let answer = in_step.iter().rev().find(|event| event_type(event) == dsh_abi::events::ASSISTANT_MESSAGE);
    match answer {
        None if in_turn.iter().any(|event| event_type(event) == dsh_abi::events::USER_MESSAGE) => {
            Some(Proof::IncompleteRequest { turn, step, time: end_time })
        }
        None => None,
        Some(answer) => {
            let calls: Vec<&str> = data(answer, "message").into_iter().flat_map(tool_call_ids).collect();
            let results: Vec<&Value> = in_step
                .iter()
                .filter(|event| event_type(event) == dsh_abi::events::TOOL_RESULT)
                .filter_map(|event| event.get("data"))
                .collect();
            (!calls.is_empty() && open_calls(calls, &results).is_empty()).then_some(Proof::InterruptedToolStep {
                turn,
                step,
                time: end_time,
            })
        }
    }
}

/// The continuation to enqueue on a cold resume, if the log proves interrupted work.
pub fn continuation(
    config: &FallbackConfig,
    header: &Value,
    events: &[Value],
    pending_input: bool,
    now_ms: f64,
) -> Option<Continuation> {
    if !config.resume_interrupted || pending_input || header.get("origin").and_then(Value::as_str) == Some("subagent") {
        return None;
    }
    let (turn, proof) = find_proof(config, events)?;
    if now_ms - proof.time() > config.resume_max_age_ms {
        return None;
    }
    let session = header.get("id").and_then(Value::as_str)?;
    Some(proof.continuation(session, turn, &config.resume_prompt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OWN_KEY: &str = r#"["dsh-retry/v1",2,5,["UNKNOWN"],500,2000,10000,0.1,[],[],true]"#;
    const FOREIGN_KEY: &str = r#"["normal",5,["SERVER"],500,10000,0.1]"#;

    /// A turn's events, built one at a time with increasing seq and time.
    #[derive(Default)]
    struct Log {
        events: Vec<Value>,
    }

    impl Log {
        fn push(mut self, event_type: &str, data: Value) -> Self {
            let seq = self.events.len();
            self.events.push(json!({"type": event_type, "seq": seq, "time": 1000 + seq as u64, "data": data}));
            self
        }

        fn started_turn() -> Self {
            Log::default()
                .push("turn/start", json!({"turn": 1}))
                .push("step/start", json!({"turn": 1, "step": 1}))
                .push("user/message", json!({"id": "u", "role": "user", "content": [{"type": "text", "text": "go"}], "source": {"kind": "user"}}))
        }

        fn retry(self, key: &str, retry: u64) -> Self {
            self.push(
                "llm/retry",
                json!({"retryId": "c1", "turn": 1, "step": 1, "provider": "p", "mode": "normal", "policyKey": key, "retry": retry, "maxRetries": 5, "delayMs": 500, "failure": {"message": "cut", "code": "STREAM_CLOSED"}}),
            )
        }

        fn started(self, retry: u64) -> Self {
            self.push("llm/retry-started", json!({"retryId": "c1", "turn": 1, "step": 1, "retry": retry}))
        }

        fn tool_answer(self, calls: &[&str]) -> Self {
            let blocks: Vec<Value> = calls
                .iter()
                .map(|id| json!({"type": "tool-call", "callId": id, "name": "shell", "arguments": "{}"}))
                .collect();
            self.push(
                "assistant/message",
                json!({"turn": 1, "step": 1, "message": {"role": "assistant", "content": blocks}}),
            )
        }

        fn tool_result(self, call: &str) -> Self {
            self.push("tool/result", json!({"turn": 1, "step": 1, "callId": call, "message": {"role": "tool"}}))
        }

        fn close(self, step_open: bool, reason: Value) -> Self {
            let log = if step_open { self.push("step/end", json!({"turn": 1, "step": 1})) } else { self };
            log.push("turn/end", json!({"turn": 1, "reason": reason}))
        }

        fn interrupted(self) -> Self {
            self.close(true, json!({"kind": "interrupted"}))
        }
    }

    fn header() -> Value {
        json!({"type": "session", "version": 0, "id": "s1", "createdAt": 1, "delegationDepth": 0})
    }

    fn resume_with(config: Value, header: Value, log: &Log, pending: bool, now: f64) -> Option<Continuation> {
        continuation(&FallbackConfig::parse(&config).unwrap(), &header, &log.events, pending, now)
    }

    fn resume(log: &Log) -> Option<Continuation> {
        resume_with(Value::Null, header(), log, false, 2000.0)
    }

    fn summary(log: &Log) -> Option<(String, String)> {
        resume(log).map(|c| (c.id.into_string(), c.summary.into_string()))
    }

    #[test]
    fn a_pending_retry_of_this_plugin_is_continued() {
        let log = Log::started_turn().retry(OWN_KEY, 1).started(1).retry(OWN_KEY, 2).interrupted();
        assert_eq!(
            summary(&log),
            Some((
                "dsh-retry:resume:s1:retry:c1:2".to_owned(),
                "Continuing pending retry 2 after a restart.".to_owned()
            ))
        );
        let continuation = resume(&log).unwrap();
        assert_eq!(
            (continuation.form.as_str(), continuation.text.as_str()),
            ("notice", crate::config::DEFAULT_RESUME_PROMPT)
        );
    }

    #[test]
    fn an_incomplete_request_is_continued() {
        let log = Log::started_turn().push("assistant/chunk", json!({"turn": 1, "step": 1, "chunk": {}})).interrupted();
        assert_eq!(
            summary(&log),
            Some((
                "dsh-retry:resume:s1:request:1:1".to_owned(),
                "Continuing incomplete request from turn 1 after a restart.".to_owned()
            ))
        );
    }

    #[test]
    fn an_interrupted_tool_step_with_every_result_is_continued() {
        let log = Log::started_turn().tool_answer(&["a", "b"]).tool_result("a").tool_result("b").interrupted();
        assert_eq!(
            summary(&log),
            Some((
                "dsh-retry:resume:s1:request:1:1".to_owned(),
                "Continuing interrupted tool step from turn 1 after a restart.".to_owned()
            ))
        );
    }

    #[test]
    fn another_executors_pending_retry_is_never_resumed_but_a_started_one_does_not_hide_the_request() {
        let foreign = r#"["only-503",1]"#;
        let pending = Log::started_turn().retry(foreign, 1).interrupted();
        assert_eq!(summary(&pending), None);
        let started = Log::started_turn().retry(foreign, 1).started(1).interrupted();
        assert!(summary(&started).unwrap().0.ends_with(":request:1:1"));
    }

    #[test]
    fn a_pending_retry_wins_over_the_other_proofs() {
        let log = Log::started_turn().retry(OWN_KEY, 1).interrupted();
        assert!(summary(&log).unwrap().0.contains(":retry:c1:1"));
    }

    #[test]
    fn a_disposed_turn_counts_only_when_asked_for_and_only_as_a_pending_retry() {
        let disposed = Log::started_turn()
            .retry(OWN_KEY, 1)
            .close(true, json!({"kind": "aborted", "reason": {"kind": "disposed"}}));
        assert_eq!(resume(&disposed), None);
        assert!(resume_with(json!({"resumeDisposed": true}), header(), &disposed, false, 2000.0).is_some());
        let foreign = Log::started_turn()
            .retry(FOREIGN_KEY, 1)
            .close(true, json!({"kind": "aborted", "reason": {"kind": "disposed"}}));
        assert_eq!(
            resume_with(json!({"resumeDisposed": true}), header(), &foreign, false, 2000.0),
            None,
            "a foreign policy key"
        );
        let started = Log::started_turn()
            .retry(OWN_KEY, 1)
            .started(1)
            .close(true, json!({"kind": "aborted", "reason": {"kind": "disposed"}}));
        assert_eq!(
            resume_with(json!({"resumeDisposed": true}), header(), &started, false, 2000.0),
            None,
            "a retry that already started"
        );
    }

    #[test]
    fn everything_else_fails_closed() {
        let completed = Log::started_turn()
            .push("assistant/message", json!({"turn": 1, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]}}))
            .close(true, json!({"kind": "completed"}));
        assert_eq!(resume(&completed), None, "a completed text-only answer");
        let interrupted_answer = Log::started_turn()
            .push("assistant/message", json!({"turn": 1, "step": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]}}))
            .interrupted();
        assert_eq!(resume(&interrupted_answer), None, "a text-only answer, even interrupted");
        let user_abort =
            Log::started_turn().retry(OWN_KEY, 1).close(true, json!({"kind": "aborted", "reason": {"kind": "user"}}));
        assert_eq!(resume(&user_abort), None, "a user abort");
        let unanswered = Log::started_turn().tool_answer(&["a", "b"]).tool_result("a").interrupted();
        assert_eq!(resume(&unanswered), None, "a tool call without a result");
        let no_input = Log::default()
            .push("turn/start", json!({"turn": 1}))
            .push("step/start", json!({"turn": 1, "step": 1}))
            .interrupted();
        assert_eq!(resume(&no_input), None, "a turn without user input");
        let incomplete = Log::started_turn().interrupted();
        let mut subagent = header();
        subagent["origin"] = json!("subagent");
        assert_eq!(resume_with(Value::Null, subagent, &incomplete, false, 2000.0), None, "a subagent");
        assert_eq!(resume_with(Value::Null, header(), &incomplete, true, 2000.0), None, "a non-empty inbox");
        assert_eq!(
            resume_with(json!({"resumeInterrupted": false}), header(), &incomplete, false, 2000.0),
            None,
            "resume switched off"
        );
        assert_eq!(resume(&Log::started_turn()), None, "no turn/end at all");
    }

    #[test]
    fn a_proof_older_than_the_limit_fails_and_one_exactly_as_old_passes() {
        let log = Log::started_turn().interrupted();
        let end_time = log.events.last().unwrap()["time"].as_f64().unwrap();
        assert!(resume_with(json!({"resumeMaxAgeMs": 100}), header(), &log, false, end_time + 100.0).is_some());
        assert_eq!(resume_with(json!({"resumeMaxAgeMs": 100}), header(), &log, false, end_time + 101.0), None);
        let pending = Log::started_turn().retry(OWN_KEY, 1).interrupted();
        let retry_time = pending.events[3]["time"].as_f64().unwrap();
        assert_eq!(
            resume_with(json!({"resumeMaxAgeMs": 0}), header(), &pending, false, retry_time + 1.0),
            None,
            "a pending retry dates from its record"
        );
    }
}
