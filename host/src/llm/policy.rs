//! Provider-owned retry policies: the `retryPolicy` key of a provider row, validated with the
//! reference's messages and resolved to the flat form carried in every request-error payload.
//!
//! ```yaml
//! retryPolicy:                 # omitted: the default normal policy
//!   mode: normal               # normal | always (required when retryPolicy is given)
//!   maxRetries: 5              # normal only; non-negative safe integer; 0 = never retry
//!   retryableCodes: [EMPTY_RESPONSE, RATE_LIMIT, SERVER, TIMEOUT, TRANSPORT]   # normal only
//!   backoff: {initialDelayMs: 500, maxDelayMs: 10000, jitterRatio: 0.1}
//! ```
//!
//! In `always` mode `maxRetries` and `retryableCodes` are tolerated and ignored: layered configs
//! leave them behind after a mode switch.

use std::collections::HashSet;

use abi_stable::std_types::{RString, RVec};
use dsh_abi::retry::MAX_DELAY_MS;
use dsh_abi::{js, ConfigError, PolicyMode, RetryPolicy};
use serde_json::{Map, Value};

pub const DEFAULT_MAX_RETRIES: u64 = 5;
pub const DEFAULT_INITIAL_DELAY_MS: f64 = 500.0;
pub const DEFAULT_MAX_DELAY_MS: f64 = 10_000.0;
pub const DEFAULT_JITTER_RATIO: f64 = 0.1;
pub const DEFAULT_RETRYABLE_CODES: [&str; 5] = ["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"];

const POLICY_KEYS: [&str; 4] = ["mode", "maxRetries", "retryableCodes", "backoff"];
const BACKOFF_KEYS: [&str; 3] = ["initialDelayMs", "maxDelayMs", "jitterRatio"];

/// The default policy: normal, 5 retries of the default codes, 500 ms doubling to 10 s, ±10 %.
pub fn default_policy() -> RetryPolicy {
    RetryPolicy {
        mode: PolicyMode::Normal,
        max_retries: DEFAULT_MAX_RETRIES,
        retryable_codes: DEFAULT_RETRYABLE_CODES.iter().map(|code| RString::from(*code)).collect(),
        initial_delay_ms: DEFAULT_INITIAL_DELAY_MS,
        max_delay_ms: DEFAULT_MAX_DELAY_MS,
        jitter_ratio: DEFAULT_JITTER_RATIO,
    }
}

/// Validates and resolves a provider's `retryPolicy` (absent: the default). Every problem found
/// is returned, its path relative to the policy (`mode`, `backoff.jitterRatio`).
pub fn resolve(config: Option<&Value>) -> Result<RetryPolicy, Vec<ConfigError>> {
    let Some(config) = config else {
        return Ok(default_policy());
    };
    let object = match config {
        Value::Object(object) => object,
        _ => return Err(vec![ConfigError::new("", "must be a mapping")]),
    };
    let mode = match object.get("mode").and_then(Value::as_str) {
        Some("normal") => PolicyMode::Normal,
        Some("always") => PolicyMode::Always,
        _ => return Err(vec![ConfigError::new("mode", "must be \"normal\" or \"always\"")]),
    };
    let mut errors = unknown_keys(object, &POLICY_KEYS, "");
    let (max_retries, retryable_codes) = match mode {
        PolicyMode::Always => (0, RVec::new()),
        PolicyMode::Normal => (max_retries(object, &mut errors), retryable_codes(object, &mut errors)),
    };
    let backoff = backoff(object.get("backoff"), &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    let (initial_delay_ms, max_delay_ms, jitter_ratio) = backoff;
    Ok(RetryPolicy { mode, max_retries, retryable_codes, initial_delay_ms, max_delay_ms, jitter_ratio })
}

fn unknown_keys(object: &Map<String, Value>, allowed: &[&str], path: &str) -> Vec<ConfigError> {
    object
        .keys()
        .filter(|key| !allowed.contains(&key.as_str()))
        .map(|key| ConfigError::new(path, format!("unknown key \"{key}\"")))
        .collect()
}

fn max_retries(object: &Map<String, Value>, errors: &mut Vec<ConfigError>) -> u64 {
    match object.get("maxRetries") {
        None => DEFAULT_MAX_RETRIES,
        Some(value) => js::as_safe_u64(value).unwrap_or_else(|| {
            errors.push(ConfigError::new("maxRetries", "must be a non-negative safe integer"));
            DEFAULT_MAX_RETRIES
        }),
    }
}

fn retryable_codes(object: &Map<String, Value>, errors: &mut Vec<ConfigError>) -> RVec<RString> {
    let Some(value) = object.get("retryableCodes") else {
        return DEFAULT_RETRYABLE_CODES.iter().map(|code| RString::from(*code)).collect();
    };
    let Some(items) = value.as_array() else {
        errors.push(ConfigError::new("retryableCodes", "must be a list of failure codes"));
        return RVec::new();
    };
    let problem = if items.is_empty() {
        Some("must not be empty")
    } else if items.iter().any(|item| item.as_str().is_none_or(str::is_empty)) {
        Some("must contain only non-empty strings")
    } else if items.iter().filter_map(Value::as_str).collect::<HashSet<_>>().len() != items.len() {
        Some("must not contain duplicates")
    } else {
        None
    };
    errors.extend(problem.map(|message| ConfigError::new("retryableCodes", message)));
    items.iter().filter_map(Value::as_str).map(RString::from).collect()
}

const DELAY_RULE: &str = "must be a positive finite number no greater than 2147483647";

fn backoff(config: Option<&Value>, errors: &mut Vec<ConfigError>) -> (f64, f64, f64) {
    let empty = Map::new();
    let object = match config {
        None => &empty,
        Some(Value::Object(object)) => object,
        Some(_) => {
            errors.push(ConfigError::new("backoff", "must be a mapping"));
            &empty
        }
    };
    errors.extend(unknown_keys(object, &BACKOFF_KEYS, "backoff"));
    let number = |key: &str, default: f64| object.get(key).map_or(Some(default), Value::as_f64);
    let initial = number("initialDelayMs", DEFAULT_INITIAL_DELAY_MS);
    let max = number("maxDelayMs", DEFAULT_MAX_DELAY_MS);
    let jitter = number("jitterRatio", DEFAULT_JITTER_RATIO);
    let valid_delay = |delay: Option<f64>| delay.filter(|d| d.is_finite() && *d > 0.0 && *d <= MAX_DELAY_MS);
    let (initial, max) = (valid_delay(initial), valid_delay(max));
    if initial.is_none() {
        errors.push(ConfigError::new("backoff.initialDelayMs", DELAY_RULE));
    }
    if max.is_none() {
        errors.push(ConfigError::new("backoff.maxDelayMs", DELAY_RULE));
    }
    if let (Some(initial), Some(max)) = (initial, max) {
        if initial > max {
            errors.push(ConfigError::new("backoff.initialDelayMs", "must be less than or equal to maxDelayMs"));
        }
    }
    let jitter = jitter.filter(|j| (0.0..=1.0).contains(j));
    if jitter.is_none() {
        errors.push(ConfigError::new("backoff.jitterRatio", "must be between 0 and 1"));
    }
    (
        initial.unwrap_or(DEFAULT_INITIAL_DELAY_MS),
        max.unwrap_or(DEFAULT_MAX_DELAY_MS),
        jitter.unwrap_or(DEFAULT_JITTER_RATIO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolved(value: Value) -> RetryPolicy {
        resolve(Some(&value)).unwrap()
    }

    /// Each problem as `path: message`.
    fn errors(value: Value) -> Vec<String> {
        resolve(Some(&value)).unwrap_err().iter().map(|error| format!("{}: {}", error.path, error.message)).collect()
    }

    fn codes(policy: &RetryPolicy) -> Vec<&str> {
        policy.retryable_codes.iter().map(|code| code.as_str()).collect()
    }

    #[test]
    fn an_omitted_policy_is_the_default_normal_policy() {
        let policy = resolve(None).unwrap();
        assert_eq!(policy, default_policy());
        assert_eq!(policy.mode, PolicyMode::Normal);
        assert_eq!(policy.max_retries, 5);
        assert_eq!(codes(&policy), DEFAULT_RETRYABLE_CODES);
        assert_eq!((policy.initial_delay_ms, policy.max_delay_ms, policy.jitter_ratio), (500.0, 10000.0, 0.1));
    }

    #[test]
    fn a_normal_policy_fills_in_defaults() {
        let policy = resolved(json!({"mode": "normal", "maxRetries": 2, "backoff": {"jitterRatio": 0}}));
        assert_eq!(policy.max_retries, 2);
        assert_eq!(codes(&policy), DEFAULT_RETRYABLE_CODES);
        assert_eq!((policy.initial_delay_ms, policy.max_delay_ms, policy.jitter_ratio), (500.0, 10000.0, 0.0));
    }

    #[test]
    fn an_always_policy_tolerates_left_over_normal_keys_and_drops_them() {
        let policy = resolved(
            json!({"mode": "always", "maxRetries": "junk", "retryableCodes": [], "backoff": {"initialDelayMs": 1, "maxDelayMs": 4}}),
        );
        assert_eq!(policy.mode, PolicyMode::Always);
        assert_eq!(policy.max_retries, 0);
        assert!(policy.retryable_codes.is_empty());
        assert_eq!((policy.initial_delay_ms, policy.max_delay_ms), (1.0, 4.0));
    }

    #[test]
    fn max_retries_zero_and_one_point_zero_are_accepted() {
        assert_eq!(resolved(json!({"mode": "normal", "maxRetries": 0})).max_retries, 0);
        assert_eq!(resolved(json!({"mode": "normal", "maxRetries": 1.0})).max_retries, 1);
    }

    #[test]
    fn mode_is_required_and_must_be_known() {
        for bad in [json!({}), json!({"mode": "sometimes"}), json!({"mode": 1})] {
            assert_eq!(errors(bad), ["mode: must be \"normal\" or \"always\""]);
        }
    }

    #[test]
    fn every_rejected_input_has_the_reference_message() {
        let cases = [
            (json!({"mode": "normal", "maxRetries": -1}), "maxRetries: must be a non-negative safe integer"),
            (json!({"mode": "normal", "maxRetries": 1.5}), "maxRetries: must be a non-negative safe integer"),
            (
                json!({"mode": "normal", "maxRetries": 9007199254740992.0}),
                "maxRetries: must be a non-negative safe integer",
            ),
            (json!({"mode": "normal", "retryableCodes": []}), "retryableCodes: must not be empty"),
            (
                json!({"mode": "normal", "retryableCodes": ["SERVER", ""]}),
                "retryableCodes: must contain only non-empty strings",
            ),
            (
                json!({"mode": "normal", "retryableCodes": ["SERVER", 5]}),
                "retryableCodes: must contain only non-empty strings",
            ),
            (
                json!({"mode": "normal", "retryableCodes": ["SERVER", "SERVER"]}),
                "retryableCodes: must not contain duplicates",
            ),
            (
                json!({"mode": "normal", "backoff": {"initialDelayMs": 0}}),
                "backoff.initialDelayMs: must be a positive finite number no greater than 2147483647",
            ),
            (
                json!({"mode": "normal", "backoff": {"initialDelayMs": "500"}}),
                "backoff.initialDelayMs: must be a positive finite number no greater than 2147483647",
            ),
            (
                json!({"mode": "always", "backoff": {"maxDelayMs": 2147483648u64}}),
                "backoff.maxDelayMs: must be a positive finite number no greater than 2147483647",
            ),
            (
                json!({"mode": "normal", "backoff": {"initialDelayMs": 11000}}),
                "backoff.initialDelayMs: must be less than or equal to maxDelayMs",
            ),
            (
                json!({"mode": "normal", "backoff": {"jitterRatio": 1.5}}),
                "backoff.jitterRatio: must be between 0 and 1",
            ),
            (
                json!({"mode": "normal", "backoff": {"jitterRatio": -0.1}}),
                "backoff.jitterRatio: must be between 0 and 1",
            ),
            (json!({"mode": "normal", "retries": 3}), ": unknown key \"retries\""),
            (json!({"mode": "always", "backoff": {"factor": 2}}), "backoff: unknown key \"factor\""),
        ];
        for (input, message) in cases {
            assert_eq!(errors(input.clone()), [message], "{input}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let found = errors(json!({"mode": "normal", "maxRetries": -1, "extra": 1, "backoff": {"jitterRatio": 2}}));
        assert_eq!(found.len(), 3, "{found:?}");
    }

    #[test]
    fn delays_at_the_timer_limit_are_accepted() {
        let policy = resolved(
            json!({"mode": "always", "backoff": {"initialDelayMs": 2147483647u64, "maxDelayMs": 2147483647u64, "jitterRatio": 1}}),
        );
        assert_eq!(policy.max_delay_ms, MAX_DELAY_MS);
    }
}
