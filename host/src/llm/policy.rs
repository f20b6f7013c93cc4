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

use abi_stable::std_types::{RString, RVec};
use dsh_abi::config::{Key, Kind, Row, Schema, MAX_SAFE_INTEGER};
use dsh_abi::retry::MAX_DELAY_MS;
use dsh_abi::{ConfigError, PolicyMode, RetryPolicy};
use serde_json::Value;

const DELAY_RULE: &str = "must be a positive finite number no greater than 2147483647";
const DELAY: Kind = Kind::number_above(0.0, MAX_DELAY_MS);
/// A failure code as the reference takes it: any string but the empty one.
const CODE: Kind = Kind::matching("a non-empty string", |code| !code.is_empty());

/// The keys of `retryPolicy`, with the reference's messages.
pub const POLICY: Schema = Schema::row(
    "retryPolicy",
    &[
        Key::new(
            "mode",
            Kind::Choice(&["normal", "always"]),
            "",
            "normal: bounded and code-filtered; always: unbounded",
        )
        .refused_as("must be \"normal\" or \"always\""),
        Key::new("maxRetries", Kind::integer(0, MAX_SAFE_INTEGER), "5", "retries of one request (normal only)")
            .refused_as("must be a non-negative safe integer"),
        Key::new(
            "retryableCodes",
            Kind::list_of(&CODE).distinct().non_empty(),
            r#"["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"]"#,
            "failure codes retried (normal only)",
        )
        .refused_as("must be a list of failure codes")
        .items_refused_as("must contain only non-empty strings")
        .repeats_refused_as("must not contain duplicates"),
        Key::new("backoff", Kind::Nested(&BACKOFF), "{}", "the waits").refused_as("must be a mapping"),
    ],
);

/// The keys of `retryPolicy.backoff`.
pub const BACKOFF: Schema = Schema::row(
    "backoff",
    &[
        Key::new("initialDelayMs", DELAY, "500", "the first wait, in ms").refused_as(DELAY_RULE),
        Key::new("maxDelayMs", DELAY, "10000", "the longest wait, in ms").refused_as(DELAY_RULE),
        Key::new("jitterRatio", Kind::number(0.0, 1.0), "0.1", "random spread of each wait")
            .refused_as("must be between 0 and 1"),
    ],
);

/// The default policy: normal, 5 retries of the default codes, 500 ms doubling to 10 s, ±10 %.
pub fn default_policy() -> RetryPolicy {
    resolve(Some(&serde_json::json!({"mode": "normal"}))).expect("the declared defaults form a policy")
}

/// Validates and resolves a provider's `retryPolicy` (absent: the default). Every problem found
/// is returned, its path relative to the provider row (`retryPolicy.mode`).
pub fn resolve(config: Option<&Value>) -> Result<RetryPolicy, Vec<ConfigError>> {
    let Some(config) = config else {
        return Ok(default_policy());
    };
    let mut row = POLICY.read_at("retryPolicy", config)?;
    let mode = match row.text("mode").as_deref() {
        Some("normal") => PolicyMode::Normal,
        Some("always") => PolicyMode::Always,
        _ if row.is_set("mode") => return row.finish(default_policy()),
        _ => return Err(vec![ConfigError::new(row.path("mode"), "must be \"normal\" or \"always\"")]),
    };
    let (max_retries, retryable_codes) = match mode {
        PolicyMode::Always => (0, RVec::new()),
        PolicyMode::Normal => {
            (row.integer("maxRetries"), row.strings("retryableCodes").into_iter().map(RString::from).collect())
        }
    };
    let (initial_delay_ms, max_delay_ms, jitter_ratio) = row.nested("backoff", delays);
    row.finish(RetryPolicy { mode, max_retries, retryable_codes, initial_delay_ms, max_delay_ms, jitter_ratio })
}

/// `(initialDelayMs, maxDelayMs, jitterRatio)`, the first at most the second.
fn delays(backoff: &mut Row<'_>) -> (f64, f64, f64) {
    let initial = backoff.number("initialDelayMs");
    let max = backoff.number("maxDelayMs");
    let admitted = |key: &str| backoff.given(key).is_none_or(|value| DELAY.admits(value));
    if admitted("initialDelayMs") && admitted("maxDelayMs") && initial > max {
        backoff.refuse("initialDelayMs", "must be less than or equal to maxDelayMs");
    }
    (initial, max, backoff.number("jitterRatio"))
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
        assert_eq!(codes(&policy), ["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"]);
        assert_eq!((POLICY.faults(), BACKOFF.faults()), (vec![], vec![]));
        assert_eq!((policy.initial_delay_ms, policy.max_delay_ms, policy.jitter_ratio), (500.0, 10000.0, 0.1));
    }

    #[test]
    fn a_normal_policy_fills_in_defaults() {
        let policy = resolved(json!({"mode": "normal", "maxRetries": 2, "backoff": {"jitterRatio": 0}}));
        assert_eq!(policy.max_retries, 2);
        assert_eq!(codes(&policy), ["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"]);
        assert_eq!((POLICY.faults(), BACKOFF.faults()), (vec![], vec![]));
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
            assert_eq!(errors(bad), ["retryPolicy.mode: must be \"normal\" or \"always\""]);
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
            (json!({"mode": "normal", "retries": 3}), "retries: unknown key \"retries\""),
            (json!({"mode": "always", "backoff": {"factor": 2}}), "backoff.factor: unknown key \"factor\""),
        ];
        for (input, message) in cases {
            assert_eq!(errors(input.clone()), [format!("retryPolicy.{message}")], "{input}");
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
