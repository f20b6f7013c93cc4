//! The retry-record rules as a streaming state machine.
//!
//! The reference validates each record by scanning every earlier event (quadratic). This checker
//! is fed every event in order and keeps only running state: the open turn and step, the provider
//! of the latest `request/header`, the last record of every chain, the retry ids in use and the
//! scheduled attempts. Ids, providers and policy keys are interned to `u32`, attempts are small
//! fixed-size entries, so memory grows with the number of retries, never with the log. Most
//! events cost a type comparison; only the few structural and retry events are parsed.
//!
//! A refused record does not enter the state, so one bad record gives one message.

use std::collections::{HashMap, HashSet};

use dsh_abi::js::{self, MAX_SAFE_INTEGER};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The longest wait a JavaScript timer accepts.
const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;

/// A JSON scalar as a hashable key, compared the way `===` compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scalar {
    Undefined,
    Null,
    Bool(bool),
    /// The bits of a number (`-0` folded into `0`).
    Number(u64),
    /// An interned string.
    Text(u32),
    /// An object or array: equal to nothing, not even itself.
    Unique,
}

#[derive(Default)]
struct Interner {
    ids: HashMap<Box<str>, u32>,
}

impl Interner {
    fn intern(&mut self, text: &str) -> u32 {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(text.into(), id);
        id
    }

    fn find(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ChainKey {
    turn: Scalar,
    step: Scalar,
    provider: u32,
    policy_key: u32,
}

#[derive(Debug, Clone, Copy)]
struct ChainState {
    retry: u64,
    retry_id: u32,
}

#[derive(Debug, Clone, Copy)]
struct Attempt {
    turn: Scalar,
    step: Scalar,
}

/// The running state of one session.
#[derive(Default)]
pub struct RetryChecker {
    strings: Interner,
    /// `data.turn` of the last `turn/start`, or `None` after a `turn/end` (or before any turn).
    open_turn: Option<Value>,
    /// `(turn, step)` of the last `step/start`, or `None` after a `step/end`.
    open_step: Option<(Value, Value)>,
    /// A `turn/end` came after the last `step/start`.
    turn_ended_since_step_start: bool,
    /// `header.config.provider` of the last `request/header` (in force across turns).
    header_provider: Option<Value>,
    chains: HashMap<ChainKey, ChainState>,
    used_ids: HashSet<u32>,
    /// The last scheduled attempt of each (retry id, retry).
    attempts: HashMap<(u32, u64), Attempt>,
    started: HashSet<(u32, u64)>,
}

#[derive(Deserialize)]
struct Boundary {
    #[serde(default)]
    turn: Option<Value>,
    #[serde(default)]
    step: Option<Value>,
}

#[derive(Deserialize)]
struct HeaderData<'a> {
    #[serde(borrow)]
    header: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct HeaderConfig<'a> {
    #[serde(borrow)]
    config: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ConfigProvider {
    provider: Option<Value>,
}

fn header_provider(data: &str) -> Option<Value> {
    let header = serde_json::from_str::<HeaderData<'_>>(data).ok()?.header?;
    let config = serde_json::from_str::<HeaderConfig<'_>>(header.get()).ok()?.config?;
    serde_json::from_str::<ConfigProvider>(config.get()).ok()?.provider
}

fn is_safe_integer(value: Option<&Value>) -> Option<f64> {
    value.and_then(Value::as_f64).filter(|n| js::is_safe_integer(*n))
}

fn non_empty_string(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|text| !text.is_empty())
}

impl RetryChecker {
    fn scalar(&mut self, value: Option<&Value>) -> Scalar {
        match value {
            None => Scalar::Undefined,
            Some(Value::Null) => Scalar::Null,
            Some(Value::Bool(flag)) => Scalar::Bool(*flag),
            Some(Value::Number(number)) => {
                let n = number.as_f64().unwrap_or(f64::NAN);
                Scalar::Number(if n == 0.0 { 0 } else { n.to_bits() })
            }
            Some(Value::String(text)) => Scalar::Text(self.strings.intern(text)),
            Some(_) => Scalar::Unique,
        }
    }

    /// Checks one event; `Err` is the violation message. Refused events leave the state unchanged.
    pub fn check(&mut self, event_type: &str, data: &str) -> Result<(), String> {
        match event_type {
            "llm/retry" => self.retry(&parse(data)),
            "llm/retry-started" => self.started(&parse(data)),
            "turn/start" | "turn/end" | "step/start" | "step/end" => {
                let boundary = serde_json::from_str::<Boundary>(data).unwrap_or(Boundary { turn: None, step: None });
                match event_type {
                    "turn/start" => self.open_turn = Some(boundary.turn.unwrap_or(Value::Null)),
                    "turn/end" => {
                        self.open_turn = None;
                        self.turn_ended_since_step_start = true;
                    }
                    "step/start" => {
                        self.open_step =
                            Some((boundary.turn.unwrap_or(Value::Null), boundary.step.unwrap_or(Value::Null)));
                        self.turn_ended_since_step_start = false;
                    }
                    _ => self.open_step = None,
                }
                Ok(())
            }
            "request/header" => {
                self.header_provider = header_provider(data);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn retry(&mut self, data: &Value) -> Result<(), String> {
        let field = |key: &str| data.get(key);
        let Some(retry_id) = non_empty_string(field("retryId")) else {
            return Err("llm/retry retryId must be a non-empty string".to_owned());
        };
        check_failure(field("failure"))?;
        let retry = match is_safe_integer(field("retry")) {
            Some(retry) if retry >= 1.0 => retry,
            _ => return Err("llm/retry retry must be a positive safe integer".to_owned()),
        };
        let Some(provider) = non_empty_string(field("provider")) else {
            return Err("llm/retry provider must be a non-empty string".to_owned());
        };
        let Some(policy_key) = non_empty_string(field("policyKey")) else {
            return Err("llm/retry policyKey must be a non-empty string".to_owned());
        };
        match field("mode").and_then(Value::as_str) {
            Some("normal") => {
                let max_retries = is_safe_integer(field("maxRetries")).filter(|max| *max >= 1.0);
                if max_retries.is_none_or(|max| retry > max) {
                    return Err(format!(
                        "llm/retry retry {} must not exceed a positive safe maxRetries {}",
                        js::number(retry),
                        js::display(field("maxRetries"))
                    ));
                }
            }
            Some("always") => {
                if data.as_object().is_some_and(|object| object.contains_key("maxRetries")) {
                    return Err("llm/retry always mode must omit maxRetries".to_owned());
                }
            }
            _ => return Err(format!("llm/retry mode must be normal or always, got {}", js::display(field("mode")))),
        }
        let delay = field("delayMs").and_then(Value::as_f64);
        if !delay.is_some_and(|delay| delay.is_finite() && (0.0..=MAX_TIMER_DELAY_MS).contains(&delay)) {
            return Err("llm/retry delayMs must be a finite number within 0..2147483647".to_owned());
        }
        let (turn, step) = (field("turn"), field("step"));
        let Some(open_turn) = &self.open_turn else {
            return Err("llm/retry must be appended inside an open turn".to_owned());
        };
        if !js::strict_equals(turn, Some(open_turn)) {
            return Err(format!(
                "llm/retry names turn {}, but the open turn is {}",
                js::display(turn),
                js::display(Some(open_turn))
            ));
        }
        let Some((step_turn, open_step)) = &self.open_step else {
            return Err("llm/retry must be appended inside an open step".to_owned());
        };
        if !js::strict_equals(step, Some(open_step)) || !js::strict_equals(turn, Some(step_turn)) {
            return Err(format!(
                "llm/retry names turn {}/step {}, but the open step is {}/{}",
                js::display(turn),
                js::display(step),
                js::display(Some(step_turn)),
                js::display(Some(open_step))
            ));
        }
        let routed = if self.turn_ended_since_step_start { None } else { self.header_provider.as_ref() };
        if !js::strict_equals(Some(&Value::from(provider)), routed) {
            return Err(format!(
                "llm/retry provider {provider} does not match the failed request provider {}",
                js::display(routed)
            ));
        }
        let key = ChainKey {
            turn: self.scalar(turn),
            step: self.scalar(step),
            provider: self.strings.intern(provider),
            policy_key: self.strings.intern(policy_key),
        };
        let prior = self.chains.get(&key).copied();
        let expected = prior.map_or(1, |chain| chain.retry + 1);
        if retry != expected as f64 {
            return Err(format!("llm/retry retry {} must equal provider policy retry {expected}", js::number(retry)));
        }
        let known_id = self.strings.find(retry_id);
        match prior {
            Some(chain) if Some(chain.retry_id) != known_id => {
                return Err("llm/retry must preserve retryId across one provider-policy chain".to_owned())
            }
            None if known_id.is_some_and(|id| self.used_ids.contains(&id)) => {
                return Err(format!("llm/retry retryId {} is already owned by another chain", js::to_string(retry_id)))
            }
            _ => {}
        }
        let retry = retry as u64;
        let retry_id = self.strings.intern(retry_id);
        self.chains.insert(key, ChainState { retry, retry_id });
        self.used_ids.insert(retry_id);
        self.attempts.insert((retry_id, retry), Attempt { turn: key.turn, step: key.step });
        Ok(())
    }

    fn started(&mut self, data: &Value) -> Result<(), String> {
        let Some(retry_id) = non_empty_string(data.get("retryId")) else {
            return Err("llm/retry-started retryId must be a non-empty string".to_owned());
        };
        let retry = data
            .get("retry")
            .and_then(Value::as_f64)
            .filter(|r| js::is_safe_integer(*r) && *r >= 0.0 && *r <= MAX_SAFE_INTEGER);
        let attempt_key = self.strings.find(retry_id).zip(retry.map(|r| r as u64));
        let Some((attempt_key, attempt)) =
            attempt_key.and_then(|key| self.attempts.get(&key).map(|attempt| (key, *attempt)))
        else {
            return Err("llm/retry-started pairs no prior scheduled attempt".to_owned());
        };
        let (turn, step) = (self.scalar(data.get("turn")), self.scalar(data.get("step")));
        let unique = |scalar: Scalar| scalar == Scalar::Unique;
        if turn != attempt.turn || step != attempt.step || unique(turn) || unique(step) {
            return Err("llm/retry-started turn/step must match its scheduled attempt".to_owned());
        }
        if !self.started.insert(attempt_key) {
            return Err("llm/retry-started repeats one scheduled attempt".to_owned());
        }
        Ok(())
    }
}

fn parse(data: &str) -> Value {
    serde_json::from_str(data).unwrap_or(Value::Null)
}

fn check_failure(failure: Option<&Value>) -> Result<(), String> {
    let failure = match failure {
        Some(value @ (Value::Object(_) | Value::Array(_))) => value,
        _ => return Err("llm/retry failure must be an object".to_owned()),
    };
    let field = |key: &str| failure.get(key);
    if non_empty_string(field("message")).is_none() {
        return Err("llm/retry failure.message must be a non-empty string".to_owned());
    }
    if non_empty_string(field("code")).is_none() {
        return Err("llm/retry failure.code must be a non-empty string".to_owned());
    }
    if let Some(status) = field("status") {
        let integral = status.as_f64().filter(|s| s.fract() == 0.0 && (100.0..=599.0).contains(s));
        if integral.is_none() {
            return Err("llm/retry failure.status must be an integer from 100 through 599 when present".to_owned());
        }
    }
    if let Some(hint) = field("providerRetryAfterMs") {
        if !hint.as_f64().is_some_and(|hint| hint.is_finite() && hint > 0.0) {
            return Err(
                "llm/retry failure.providerRetryAfterMs must be a positive finite number when present".to_owned()
            );
        }
    }
    if let Some(request_id) = field("requestId") {
        if non_empty_string(Some(request_id)).is_none() {
            return Err("llm/retry failure.requestId must be a non-empty string when present".to_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[(&str, &str)]) -> Vec<(usize, String)> {
        let mut checker = RetryChecker::default();
        events
            .iter()
            .enumerate()
            .filter_map(|(seq, (event_type, data))| checker.check(event_type, data).err().map(|message| (seq, message)))
            .collect()
    }

    const RETRY_1: &str = r#"{"retryId":"c","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"k","retry":1,"maxRetries":2,"delayMs":1,"failure":{"message":"m","code":"SERVER"}}"#;

    #[test]
    fn a_valid_record_after_a_header_is_accepted_and_its_start_pairs() {
        let found = run(&[
            ("turn/start", r#"{"turn":1}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            (
                "request/header",
                r#"{"header":{"config":{"provider":"mock","model":"m"},"system":"long"},"reason":"initial"}"#,
            ),
            ("llm/retry", RETRY_1),
            ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#),
            ("llm/retry-started", r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#),
        ]);
        assert_eq!(found, [(5, "llm/retry-started repeats one scheduled attempt".to_owned())]);
    }

    #[test]
    fn a_refused_record_does_not_enter_the_chain_state() {
        let found = run(&[
            ("turn/start", r#"{"turn":1}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            ("request/header", r#"{"header":{"config":{"provider":"mock"}}}"#),
            ("llm/retry", &RETRY_1.replace("\"delayMs\":1", "\"delayMs\":-1")),
            ("llm/retry", RETRY_1),
        ]);
        assert_eq!(found, [(3, "llm/retry delayMs must be a finite number within 0..2147483647".to_owned())]);
    }

    #[test]
    fn unrelated_events_are_not_parsed() {
        assert!(run(&[("assistant/chunk", "not json at all"), ("agent/inbox/spliced", "{")]).is_empty());
    }

    /// A log generated from a model of correct executors, and single-field mutations of it,
    /// checked against a naive transcription of the rules that rescans the whole history for
    /// every record (the reference's quadratic algorithm, with refused records left out).
    mod model {
        use super::*;
        use proptest::prelude::*;
        use serde_json::json;

        struct Event {
            event_type: &'static str,
            data: Value,
        }

        #[derive(Debug, Clone)]
        struct Chain {
            provider_index: usize,
            policy: usize,
            always: bool,
            max_retries: u64,
            failures: u64,
        }

        const PROVIDERS: [&str; 2] = ["alpha", "beta"];
        const POLICIES: [&str; 3] = ["k1", "k2", "k3"];

        /// Turns of steps; each step has one provider and some chains of failures.
        fn sessions() -> impl Strategy<Value = Vec<Vec<(usize, Vec<Chain>)>>> {
            let chain = (0..2usize, 0..3usize, any::<bool>(), 1..4u64, 1..5u64).prop_map(
                |(provider_index, policy, always, max_retries, failures)| Chain {
                    provider_index,
                    policy,
                    always,
                    max_retries,
                    failures,
                },
            );
            let step = (0..2usize, prop::collection::vec(chain, 0..3));
            prop::collection::vec(prop::collection::vec(step, 1..3), 1..3)
        }

        fn generate(turns: &[Vec<(usize, Vec<Chain>)>]) -> Vec<Event> {
            let mut events = Vec::new();
            let mut next_id = 0;
            let push = |events: &mut Vec<Event>, event_type, data| events.push(Event { event_type, data });
            for (turn_index, steps) in turns.iter().enumerate() {
                let turn = turn_index + 1;
                push(&mut events, "turn/start", json!({"turn": turn}));
                for (step_index, (provider_index, chains)) in steps.iter().enumerate() {
                    let step = step_index + 1;
                    let provider = PROVIDERS[*provider_index];
                    push(&mut events, "step/start", json!({"turn": turn, "step": step}));
                    push(
                        &mut events,
                        "request/header",
                        json!({"header": {"config": {"provider": provider}}, "reason": "initial"}),
                    );
                    let mut keys_in_step = HashSet::new();
                    for chain in chains.iter().filter(|chain| chain.provider_index == *provider_index) {
                        let policy_key =
                            format!("{}-{}", POLICIES[chain.policy], if chain.always { "always" } else { "normal" });
                        if !keys_in_step.insert(policy_key.clone()) {
                            continue;
                        }
                        next_id += 1;
                        let count = if chain.always { chain.failures } else { chain.failures.min(chain.max_retries) };
                        for retry in 1..=count {
                            let mut record = json!({
                                "retryId": format!("r{next_id}"), "turn": turn, "step": step, "provider": provider,
                                "mode": if chain.always { "always" } else { "normal" }, "policyKey": policy_key, "retry": retry,
                            });
                            if !chain.always {
                                record["maxRetries"] = json!(chain.max_retries);
                            }
                            record["delayMs"] = json!(500);
                            record["failure"] = json!({"message": "busy", "code": "SERVER", "status": 503});
                            push(&mut events, "llm/retry", record);
                            push(
                                &mut events,
                                "llm/retry-started",
                                json!({"retryId": format!("r{next_id}"), "turn": turn, "step": step, "retry": retry}),
                            );
                        }
                    }
                    push(&mut events, "step/end", json!({"turn": turn, "step": step}));
                }
                push(&mut events, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
            }
            events
        }

        fn streaming(events: &[Event]) -> Vec<(usize, String)> {
            let mut checker = RetryChecker::default();
            events
                .iter()
                .enumerate()
                .filter_map(|(seq, event)| {
                    checker.check(event.event_type, &event.data.to_string()).err().map(|message| (seq, message))
                })
                .collect()
        }

        fn naive(events: &[Event]) -> Vec<(usize, String)> {
            let mut history: Vec<&Event> = Vec::new();
            let mut found = Vec::new();
            for (seq, event) in events.iter().enumerate() {
                let verdict = match event.event_type {
                    "llm/retry" => naive_retry(&history, &event.data),
                    "llm/retry-started" => naive_started(&history, &event.data),
                    _ => Ok(()),
                };
                match verdict {
                    Ok(()) => history.push(event),
                    Err(message) => found.push((seq, message)),
                }
            }
            found
        }

        fn last<'a>(history: &[&'a Event], types: &[&str]) -> Option<&'a Event> {
            history.iter().rev().find(|event| types.contains(&event.event_type)).copied()
        }

        fn eq(a: Option<&Value>, b: Option<&Value>) -> bool {
            js::strict_equals(a, b)
        }

        fn naive_retry(history: &[&Event], data: &Value) -> Result<(), String> {
            let get = |key: &str| data.get(key);
            if non_empty_string(get("retryId")).is_none() {
                return Err("llm/retry retryId must be a non-empty string".into());
            }
            check_failure(get("failure"))?;
            let retry = get("retry").and_then(Value::as_f64).filter(|r| js::is_safe_integer(*r) && *r >= 1.0);
            let Some(retry) = retry else { return Err("llm/retry retry must be a positive safe integer".into()) };
            if non_empty_string(get("provider")).is_none() {
                return Err("llm/retry provider must be a non-empty string".into());
            }
            if non_empty_string(get("policyKey")).is_none() {
                return Err("llm/retry policyKey must be a non-empty string".into());
            }
            match get("mode").and_then(Value::as_str) {
                Some("normal") => {
                    let max =
                        get("maxRetries").and_then(Value::as_f64).filter(|m| js::is_safe_integer(*m) && *m >= 1.0);
                    if max.is_none_or(|max| retry > max) {
                        return Err(format!(
                            "llm/retry retry {} must not exceed a positive safe maxRetries {}",
                            js::number(retry),
                            js::display(get("maxRetries"))
                        ));
                    }
                }
                Some("always") if get("maxRetries").is_some() => {
                    return Err("llm/retry always mode must omit maxRetries".into())
                }
                Some("always") => {}
                _ => return Err(format!("llm/retry mode must be normal or always, got {}", js::display(get("mode")))),
            }
            if !get("delayMs").and_then(Value::as_f64).is_some_and(|d| (0.0..=MAX_TIMER_DELAY_MS).contains(&d)) {
                return Err("llm/retry delayMs must be a finite number within 0..2147483647".into());
            }
            let turn_boundary =
                last(history, &["turn/start", "turn/end"]).filter(|event| event.event_type == "turn/start");
            let Some(turn_boundary) = turn_boundary else {
                return Err("llm/retry must be appended inside an open turn".into());
            };
            if !eq(get("turn"), turn_boundary.data.get("turn")) {
                return Err(format!(
                    "llm/retry names turn {}, but the open turn is {}",
                    js::display(get("turn")),
                    js::display(turn_boundary.data.get("turn"))
                ));
            }
            let step_boundary =
                last(history, &["step/start", "step/end"]).filter(|event| event.event_type == "step/start");
            let Some(step_boundary) = step_boundary else {
                return Err("llm/retry must be appended inside an open step".into());
            };
            if !eq(get("step"), step_boundary.data.get("step")) || !eq(get("turn"), step_boundary.data.get("turn")) {
                return Err(format!(
                    "llm/retry names turn {}/step {}, but the open step is {}/{}",
                    js::display(get("turn")),
                    js::display(get("step")),
                    js::display(step_boundary.data.get("turn")),
                    js::display(step_boundary.data.get("step"))
                ));
            }
            let start = history.iter().rposition(|event| {
                event.event_type == "step/start"
                    && eq(event.data.get("turn"), get("turn"))
                    && eq(event.data.get("step"), get("step"))
            });
            let routed = start
                .filter(|start| {
                    !history[start + 1..].iter().any(|event| matches!(event.event_type, "step/end" | "turn/end"))
                })
                .and_then(|_| last(history, &["request/header"]))
                .and_then(|header| header.data.get("header")?.get("config")?.get("provider"));
            if !eq(get("provider"), routed) {
                return Err(format!(
                    "llm/retry provider {} does not match the failed request provider {}",
                    js::display(get("provider")),
                    js::display(routed)
                ));
            }
            let prior = history.iter().rev().find(|event| {
                event.event_type == "llm/retry"
                    && ["turn", "step", "provider", "policyKey"].iter().all(|key| eq(event.data.get(*key), get(key)))
            });
            let expected = prior.map_or(1.0, |prior| prior.data["retry"].as_f64().unwrap() + 1.0);
            if retry != expected {
                return Err(format!(
                    "llm/retry retry {} must equal provider policy retry {}",
                    js::number(retry),
                    js::number(expected)
                ));
            }
            match prior {
                Some(prior) if !eq(prior.data.get("retryId"), get("retryId")) => {
                    Err("llm/retry must preserve retryId across one provider-policy chain".into())
                }
                None if history.iter().any(|event| {
                    matches!(event.event_type, "llm/retry" | "llm/retry-started")
                        && eq(event.data.get("retryId"), get("retryId"))
                }) =>
                {
                    Err(format!("llm/retry retryId {} is already owned by another chain", get("retryId").unwrap()))
                }
                _ => Ok(()),
            }
        }

        fn naive_started(history: &[&Event], data: &Value) -> Result<(), String> {
            if non_empty_string(data.get("retryId")).is_none() {
                return Err("llm/retry-started retryId must be a non-empty string".into());
            }
            let same_attempt = |event: &&&Event| {
                eq(event.data.get("retryId"), data.get("retryId")) && eq(event.data.get("retry"), data.get("retry"))
            };
            let Some(scheduled) =
                history.iter().rev().filter(|event| event.event_type == "llm/retry").find(same_attempt)
            else {
                return Err("llm/retry-started pairs no prior scheduled attempt".into());
            };
            if !eq(scheduled.data.get("turn"), data.get("turn")) || !eq(scheduled.data.get("step"), data.get("step")) {
                return Err("llm/retry-started turn/step must match its scheduled attempt".into());
            }
            if history.iter().filter(|event| event.event_type == "llm/retry-started").any(|event| same_attempt(&event))
            {
                return Err("llm/retry-started repeats one scheduled attempt".into());
            }
            Ok(())
        }

        fn mutation_value() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                Just(json!("")),
                Just(json!("r1")),
                Just(json!("alpha")),
                Just(json!("beta")),
                Just(json!("k1-normal")),
                Just(json!("always")),
                Just(json!("sometimes")),
                Just(json!("1")),
                Just(json!(1.5)),
                Just(json!({})),
                (0..5i64).prop_map(|n| json!(n)),
                Just(json!(-1)),
                Just(json!(2147483648u64)),
            ]
        }

        const FIELDS: [&str; 12] = [
            "retryId",
            "turn",
            "step",
            "provider",
            "mode",
            "policyKey",
            "retry",
            "maxRetries",
            "delayMs",
            "failure",
            "status",
            "<remove maxRetries>",
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn a_log_of_correct_executors_passes(turns in sessions()) {
                let events = generate(&turns);
                prop_assert_eq!(streaming(&events), vec![]);
            }

            #[test]
            fn a_mutated_retry_field_is_still_valid_or_reported_exactly_as_the_naive_rules_say(
                turns in sessions(), pick in any::<prop::sample::Index>(), field in prop::sample::select(FIELDS.to_vec()), value in mutation_value(),
            ) {
                let mut events = generate(&turns);
                let retries: Vec<usize> = events.iter().enumerate().filter(|(_, e)| e.event_type.starts_with("llm/retry")).map(|(i, _)| i).collect();
                prop_assume!(!retries.is_empty());
                let target = &mut events[retries[pick.index(retries.len())]].data;
                match field {
                    "<remove maxRetries>" => { target.as_object_mut().unwrap().remove("maxRetries"); }
                    "status" => { if let Some(failure) = target.get_mut("failure").and_then(Value::as_object_mut) { failure.insert("status".into(), value); } }
                    key => { target[key] = value; }
                }
                prop_assert_eq!(streaming(&events), naive(&events));
            }
        }
    }
}
