//! Every vector recorded from the TypeScript reference (`tests/fixtures/conformance/llm-retry`),
//! run through the real `llm-retry` cdylib and the real waterfall: same decision, same delay (exact
//! `f64` equality), same record JSON byte for byte, same random samples consumed, same warnings.

use std::cell::Cell;
use std::sync::atomic::AtomicBool;

use abi_stable::std_types::{ROption, RString};
use dsh_abi::{
    js, Answer, Decision, DownstreamOutcome, Failure, PolicyMode, RequestErrorPayload, RetryDecision, RetryPolicy,
};
use dsh_e2e::{artifacts, workspace_root};
use dsh_host::context::{call_context, CallContext, ScriptedServices};
use dsh_host::plugin::{PluginLibrary, RowInstance};
use dsh_host::waterfall::{self, Listener, ListenerError, Outcome};
use dsh_session::index::HistoryIndex;
use serde_json::Value;

/// What the rest of the waterfall answers in a vector: `none`, `retry`, or `throw`.
struct Downstream {
    behaviour: String,
    called: Cell<bool>,
}

const DOWNSTREAM_RECORD: &str = r#"{"retryId":"downstream-chain","retry":1,"delayMs":1,"by":"downstream"}"#;
const DOWNSTREAM_FAILURE: &str = "downstream listener threw";

impl Listener for Downstream {
    fn row_id(&self) -> &str {
        "downstream"
    }

    fn on_request_error(&self, _: &RequestErrorPayload, _: &CallContext<'_>) -> Result<Answer, ListenerError> {
        self.called.set(true);
        match self.behaviour.as_str() {
            "retry" => {
                Ok(Answer::Decide(Decision::Retry(RetryDecision { delay_ms: 1.0, record: DOWNSTREAM_RECORD.into() })))
            }
            "throw" => Err(ListenerError { panicked: false, message: DOWNSTREAM_FAILURE.to_owned() }),
            _ => Ok(Answer::Pass),
        }
    }

    fn after_downstream(
        &self,
        _: &RequestErrorPayload,
        _: &CallContext<'_>,
        _: &mut DownstreamOutcome,
    ) -> Result<Decision, ListenerError> {
        unreachable!("the downstream stand-in never delegates")
    }
}

fn failure(value: &Value) -> Failure {
    let mut failure = Failure::new(value["code"].as_str().unwrap(), value["message"].as_str().unwrap());
    failure.status = value.get("status").and_then(Value::as_u64).map(|status| status as u32).into();
    failure.provider_retry_after_ms = value.get("providerRetryAfterMs").and_then(Value::as_f64).into();
    failure.request_id = value.get("requestId").and_then(Value::as_str).map(RString::from).into();
    failure
}

fn policy(value: &Value) -> RetryPolicy {
    let mode = if value["mode"] == "always" { PolicyMode::Always } else { PolicyMode::Normal };
    RetryPolicy {
        mode,
        max_retries: value.get("maxRetries").and_then(Value::as_u64).unwrap_or(0),
        retryable_codes: value
            .get("retryableCodes")
            .and_then(Value::as_array)
            .map(|codes| codes.iter().map(|code| RString::from(code.as_str().unwrap())).collect())
            .unwrap_or_default(),
        initial_delay_ms: value["initialDelayMs"].as_f64().unwrap(),
        max_delay_ms: value["maxDelayMs"].as_f64().unwrap(),
        jitter_ratio: value["jitterRatio"].as_f64().unwrap(),
    }
}

fn check_vector(executor: &RowInstance, vector: &Value) -> Result<(), String> {
    let mut history = HistoryIndex::default();
    for event in vector["history"].as_array().unwrap() {
        let line = js::to_string(event);
        history.observe(event["type"].as_str().unwrap(), &line, &js::to_string(&event["data"]));
    }
    let randoms: Vec<f64> = vector["random"].as_array().unwrap().iter().map(|r| r.as_f64().unwrap()).collect();
    let services = ScriptedServices::with_randoms(randoms);
    let cancelled = AtomicBool::new(vector["cancelled"] == true);
    let context = call_context(&history, &cancelled, false, &services);
    let payload = RequestErrorPayload {
        model: Default::default(),
        endpoint_host: Default::default(),
        turn: vector["turn"].as_u64().unwrap(),
        step: vector["step"].as_u64().unwrap(),
        provider: vector["provider"].as_str().unwrap().into(),
        failure: failure(&vector["failure"]),
        retry_policy: vector.get("policy").map(policy).into(),
        request_tokens: 0,
    };
    let downstream =
        Downstream { behaviour: vector["downstream"].as_str().unwrap().to_owned(), called: Cell::new(false) };
    let listeners: [&dyn Listener; 2] = [executor, &downstream];
    let outcome = waterfall::run(&listeners, &payload, &context);
    let expect = &vector["expect"];

    let decided_retry = matches!(outcome, Outcome::Retry { .. });
    if decided_retry != (expect["decision"] == "retry") {
        return Err(format!("decision: got {outcome:?}"));
    }
    if downstream.called.get() != (expect["nextCalled"] == true) {
        return Err(format!("nextCalled: got {}", downstream.called.get()));
    }
    let used = services.randoms_used();
    let expected_used: Vec<f64> =
        vector["randomUsed"].as_array().unwrap().iter().map(|r| r.as_f64().unwrap()).collect();
    if used != expected_used {
        return Err(format!("randomUsed: got {used:?}"));
    }
    let expected_warnings: Vec<String> = expect
        .get("warnings")
        .and_then(Value::as_array)
        .map(|lines| {
            lines.iter().map(|line| line.as_str().unwrap().replace("%o", DOWNSTREAM_FAILURE_IN_CHAIN)).collect()
        })
        .unwrap_or_default();
    let warnings: Vec<String> = services.logs().into_iter().map(|(_, line)| line).collect();
    if warnings != expected_warnings {
        return Err(format!("warnings: got {warnings:?}, expected {expected_warnings:?}"));
    }
    match (&outcome, expect.get("record")) {
        (Outcome::Retry { retry: decision, row_id }, Some(record)) => {
            if row_id != "llm-retry" {
                return Err(format!("the record came from {row_id}"));
            }
            let mut expected = record.clone();
            if expected["retryId"] == "<new>" {
                expected["retryId"] = Value::from("id-1");
            }
            let expected_text = js::to_string(&expected);
            if decision.record.as_str() != expected_text {
                return Err(format!("record:\n  got      {}\n  expected {expected_text}", decision.record));
            }
            let keys: Vec<Value> = serde_json::from_str::<serde_json::Map<String, Value>>(&decision.record)
                .unwrap()
                .keys()
                .map(|key| Value::from(key.as_str()))
                .collect();
            if Value::Array(keys) != expect["recordKeyOrder"] {
                return Err("record key order differs".to_owned());
            }
            if decision.delay_ms != record["delayMs"].as_f64().unwrap() {
                return Err(format!("delay: got {}, expected {}", decision.delay_ms, record["delayMs"]));
            }
        }
        (Outcome::Retry { retry: decision, row_id }, None) => {
            if row_id != "downstream" || decision.record.as_str() != DOWNSTREAM_RECORD {
                return Err(format!("expected the downstream decision unchanged, got {decision:?} from {row_id}"));
            }
        }
        (_, Some(_)) => return Err("expected a record, none was scheduled".to_owned()),
        (_, None) => {}
    }
    Ok(())
}

/// How the waterfall tells an outer listener that a later one failed.
const DOWNSTREAM_FAILURE_IN_CHAIN: &str = "row \"downstream\": downstream listener threw";

#[test]
fn every_reference_vector_gives_the_same_decision_delay_and_record() {
    let path = workspace_root().join("tests/fixtures/conformance/llm-retry/vectors.json");
    let vectors: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let library = PluginLibrary::load(&artifacts().library("llm-retry")).unwrap();
    let executor = library.instantiate("llm-retry", &Value::Null).unwrap();
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|vector| check_vector(&executor, vector).err().map(|err| format!("{}: {err}", vector["name"])))
        .collect();
    assert!(failures.is_empty(), "{} of {} vectors differ:\n{}", failures.len(), vectors.len(), failures.join("\n"));
    assert_eq!(vectors.len(), 247);
}

#[test]
fn the_reference_examples_hold_through_the_cdylib() {
    let library = PluginLibrary::load(&artifacts().library("llm-retry")).unwrap();
    let executor = library.instantiate("llm-retry", &Value::Null).unwrap();
    let delays = |policy: RetryPolicy, randoms: Vec<f64>, hint: Option<f64>, retries: u64| -> Vec<f64> {
        let mut history = HistoryIndex::default();
        let services = ScriptedServices::with_randoms(randoms);
        let cancelled = AtomicBool::new(false);
        let mut failure = Failure::new("SERVER", "busy");
        failure.provider_retry_after_ms = hint.into();
        let payload = RequestErrorPayload {
            model: Default::default(),
            endpoint_host: Default::default(),
            turn: 1,
            step: 1,
            provider: "p".into(),
            failure,
            retry_policy: ROption::RSome(policy),
            request_tokens: 0,
        };
        let mut delays = Vec::new();
        for _ in 0..retries {
            let context = call_context(&history, &cancelled, false, &services);
            let Outcome::Retry { retry: decision, .. } = waterfall::run(&[&executor], &payload, &context) else {
                panic!("no retry")
            };
            delays.push(decision.delay_ms);
            history.observe("llm/retry", "", &decision.record);
        }
        delays
    };
    let normal = |max, jitter| RetryPolicy {
        mode: PolicyMode::Normal,
        max_retries: 2,
        retryable_codes: ["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"]
            .iter()
            .map(|c| RString::from(*c))
            .collect(),
        initial_delay_ms: 500.0,
        max_delay_ms: max,
        jitter_ratio: jitter,
    };
    let always = |initial, max, jitter| RetryPolicy {
        mode: PolicyMode::Always,
        max_retries: 0,
        retryable_codes: Default::default(),
        initial_delay_ms: initial,
        max_delay_ms: max,
        jitter_ratio: jitter,
    };
    assert_eq!(delays(normal(10000.0, 0.1), vec![0.0, 1.0], None, 2), [450.0, 1100.0]);
    assert_eq!(delays(always(1.0, 4.0, 0.1), vec![1.0], None, 4), [1.1, 2.2, 4.0, 4.0]);
    assert_eq!(delays(always(2.0, 4.0, 0.5), vec![1.0], Some(10.0), 1), [3.0]);
}
