//! Request recovery, after the rest of the waterfall has declined: is the failure ours to retry,
//! and with what delay and record. Pure: the chain lookup and randomness come in as functions.

use std::sync::LazyLock;

use dsh_abi::retry::{Backoff, ChainPosition};
use dsh_abi::{ChainRecord, Failure, PolicyKey, PolicyMode, RequestErrorPayload, RetryDecision, RetryRecord};
use regex::Regex;

use crate::config::FallbackConfig;

static OVERLOAD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)\boverload(ed|ing)?\b").expect("valid regex"));

/// An overload: `PI_AI_ERROR` whose message says overload, overloaded or overloading (whole word).
pub fn is_overload(failure: &Failure) -> bool {
    normalised_code(failure) == "PI_AI_ERROR" && OVERLOAD.is_match(&failure.message)
}

fn normalised_code(failure: &Failure) -> String {
    failure.code.trim().to_uppercase()
}

/// Whether the serving route's policy owns the failure: always mode owns every failure; normal
/// mode owns its codes even with its budget spent. An owned failure is never widened.
pub fn owned_by_policy(payload: &RequestErrorPayload) -> bool {
    match payload.retry_policy.as_ref().into_option() {
        None => false,
        Some(policy) if policy.mode == PolicyMode::Always => true,
        Some(policy) => {
            let code = normalised_code(&payload.failure);
            policy.retryable_codes.iter().any(|owned| owned.as_str() == code)
        }
    }
}

/// A scheduled retry and the warning line to log with it.
pub struct Scheduled {
    pub decision: RetryDecision,
    pub warning: String,
}

/// Steps 4–8 for a failure nobody else retried and no policy owns.
pub fn schedule(
    config: &FallbackConfig,
    policy_key: &PolicyKey,
    payload: &RequestErrorPayload,
    last_retry: impl FnOnce() -> Option<ChainRecord>,
    random: impl FnOnce() -> f64,
    new_id: impl FnOnce() -> String,
) -> Option<Scheduled> {
    let provider = payload.provider.as_str();
    let code = normalised_code(&payload.failure);
    let overload = is_overload(&payload.failure);
    let limit = if config.max_retries == 0 {
        0
    } else if overload {
        config.overload_max_retries
    } else {
        config.max_retries
    };
    let listed = config.retryable_codes.iter().any(|listed| *listed == code || listed == "*");
    if limit == 0
        || config.exclude_providers.iter().any(|excluded| excluded == provider)
        || (!config.providers.is_empty() && !config.providers.iter().any(|allowed| allowed == provider))
        || !listed
    {
        return None;
    }
    let chain = ChainPosition::new(last_retry());
    let attempt = chain.next_retry();
    if attempt > limit {
        return None;
    }
    let delay_ms = match payload.failure.retry_after_hint() {
        Some(hint) if config.respect_retry_after => {
            if hint > config.max_delay_ms {
                return None;
            }
            hint
        }
        _ => {
            let initial_delay_ms = if overload { config.overload_initial_delay_ms } else { config.initial_delay_ms };
            Backoff { initial_delay_ms, max_delay_ms: config.max_delay_ms, jitter_ratio: config.jitter_ratio }
                .delay(attempt, random())
        }
    };
    let retry_id = chain.retry_id(new_id);
    let mut record = RetryRecord::new(payload, &retry_id, "normal", policy_key, attempt, delay_ms);
    record.max_retries = Some(limit);
    let warning = format!(
        "dsh-retry: retrying provider \"{provider}\" after {}ms ({attempt}/{limit}, {}: {})",
        delay_ms.round(),
        payload.failure.code,
        payload.failure.message
    );
    Some(Scheduled { decision: record.decision(), warning })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_abi::RetryPolicy;
    use dsh_abi::{ROption, RString};
    use serde_json::{json, Value};

    fn config(value: Value) -> FallbackConfig {
        FallbackConfig::parse(&value).unwrap()
    }

    fn payload(code: &str, message: &str, hint: Option<f64>, policy: Option<RetryPolicy>) -> RequestErrorPayload {
        let mut failure = Failure::new(code, message);
        failure.provider_retry_after_ms = hint.into();
        RequestErrorPayload::new(1, 1, "pi", failure, policy)
    }

    /// The delays of a whole chain, each attempt seeing the previous one.
    fn chain(config: &FallbackConfig, payload: &RequestErrorPayload, random: f64) -> Vec<f64> {
        let key = PolicyKey::new(config.policy_key());
        let mut prior: Option<ChainRecord> = None;
        let mut delays = Vec::new();
        while let Some(scheduled) = schedule(config, &key, payload, || prior.clone(), || random, || "c".into()) {
            delays.push(scheduled.decision.delay_ms);
            prior = Some(ChainRecord { retry_id: "c".into(), retry: delays.len() as u64 });
            assert!(delays.len() < 100, "a chain must end");
        }
        delays
    }

    #[test]
    fn an_overload_has_its_own_budget_and_first_wait() {
        let overload = payload("PI_AI_ERROR", "The model is overloaded, try later", None, None);
        assert!(is_overload(&overload.failure));
        assert_eq!(chain(&config(Value::Null), &overload, 0.5), [2000.0, 4000.0, 8000.0, 10000.0, 10000.0]);
        assert!(!is_overload(&Failure::new("PI_AI_ERROR", "overloadedness")), "whole words only");
    }

    #[test]
    fn the_documented_vectors() {
        let tight = config(
            json!({"initialDelayMs": 100, "overloadInitialDelayMs": 100, "maxDelayMs": 250, "jitterRatio": 0.2, "maxRetries": 3, "retryableCodes": ["SERVER", "RATE_LIMIT"]}),
        );
        assert_eq!(chain(&tight, &payload("SERVER", "down", None, None), 0.5), [100.0, 200.0, 250.0]);
        assert_eq!(chain(&tight, &payload("RATE_LIMIT", "slow", Some(200.0), None), 0.5)[0], 200.0);
        assert_eq!(chain(&tight, &payload("RATE_LIMIT", "slow", Some(999.0), None), 0.5), Vec::<f64>::new());
        let zero = config(
            json!({"initialDelayMs": 0, "overloadInitialDelayMs": 0, "maxDelayMs": 0, "jitterRatio": 1, "maxRetries": 20000, "retryableCodes": ["*"]}),
        );
        let prior = ChainRecord { retry_id: "c".into(), retry: 9999 };
        let scheduled = schedule(
            &zero,
            &PolicyKey::new("k"),
            &payload("ANY", "x", None, None),
            || Some(prior),
            || 1.0,
            || unreachable!(),
        )
        .unwrap();
        assert_eq!(scheduled.decision.delay_ms, 0.0);
        assert!(scheduled.decision.record.contains("\"retry\":10000,\"maxRetries\":20000,\"delayMs\":0,"));
    }

    #[test]
    fn the_default_chain_is_two_retries_of_an_unowned_code() {
        assert_eq!(chain(&config(Value::Null), &payload("STREAM_CLOSED", "cut", None, None), 0.5), [500.0, 1000.0]);
        assert_eq!(
            chain(&config(Value::Null), &payload(" stream_closed ", "cut", None, None), 0.5).len(),
            2,
            "codes are normalised"
        );
    }

    #[test]
    fn provider_lists_and_the_zero_limit_decline() {
        let failure = payload("UNKNOWN", "?", None, None);
        assert!(chain(&config(json!({"excludeProviders": ["pi"]})), &failure, 0.5).is_empty());
        assert!(chain(&config(json!({"providers": ["other"]})), &failure, 0.5).is_empty());
        assert!(
            chain(&config(json!({"providers": ["pi"], "excludeProviders": ["pi"]})), &failure, 0.5).is_empty(),
            "deny wins"
        );
        assert!(
            chain(&config(json!({"maxRetries": 0})), &payload("PI_AI_ERROR", "overloaded", None, None), 0.5).is_empty()
        );
    }

    #[test]
    fn policy_owned_failures_are_never_widened() {
        let normal = RetryPolicy {
            mode: PolicyMode::Normal,
            max_retries: 0,
            retryable_codes: vec![RString::from("SERVER"), RString::from("STREAM_CLOSED")].into(),
            initial_delay_ms: 1.0,
            max_delay_ms: 1.0,
            jitter_ratio: 0.0,
        };
        assert!(
            owned_by_policy(&payload("stream_closed", "cut", None, Some(normal.clone()))),
            "even with the budget spent"
        );
        assert!(!owned_by_policy(&payload("UNKNOWN", "?", None, Some(normal.clone()))));
        assert!(owned_by_policy(&payload(
            "UNKNOWN",
            "?",
            None,
            Some(RetryPolicy { mode: PolicyMode::Always, ..normal })
        )));
        assert!(!owned_by_policy(&RequestErrorPayload {
            retry_policy: ROption::RNone,
            ..payload("SERVER", "x", None, None)
        }));
    }
}
