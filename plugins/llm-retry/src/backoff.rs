//! The maths of a policy, apart from any effect: the local delay and the policy key. Both must
//! equal the TypeScript reference bit for bit (operation order and JavaScript number formatting).

use dsh_abi::retry::{sorted_codes, Backoff};
use dsh_abi::{js, PolicyMode, RetryPolicy};

/// The local (jittered exponential) delay before retry number `retry` (from 1), given one random
/// sample in [0, 1]: the shared [`Backoff`] with the policy's `initialDelayMs`, `maxDelayMs` and
/// `jitterRatio` (the policy's initial delay is never 0, so the result is the reference's).
pub fn local_delay(policy: &RetryPolicy, retry: u64, random: f64) -> f64 {
    Backoff {
        initial_delay_ms: policy.initial_delay_ms,
        max_delay_ms: policy.max_delay_ms,
        jitter_ratio: policy.jitter_ratio,
    }
    .delay(retry, random)
}

/// The policy key: compact JSON, codes sorted by UTF-16 code unit.
///
/// - normal: `["normal",maxRetries,[codes…],initialDelayMs,maxDelayMs,jitterRatio]`
/// - always: `["always",initialDelayMs,maxDelayMs,jitterRatio]`
pub fn policy_key(policy: &RetryPolicy) -> String {
    match policy.mode {
        PolicyMode::Always => {
            js::to_string(&("always", policy.initial_delay_ms, policy.max_delay_ms, policy.jitter_ratio))
        }
        PolicyMode::Normal => {
            let codes = sorted_codes(policy.retryable_codes.iter().map(|code| code.as_str()));
            js::to_string(&(
                "normal",
                policy.max_retries,
                codes,
                policy.initial_delay_ms,
                policy.max_delay_ms,
                policy.jitter_ratio,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_abi::{RString, RVec};
    use proptest::prelude::*;

    fn normal(max_retries: u64, codes: &[&str], initial: f64, max: f64, jitter: f64) -> RetryPolicy {
        RetryPolicy {
            mode: PolicyMode::Normal,
            max_retries,
            retryable_codes: codes.iter().map(|code| RString::from(*code)).collect(),
            initial_delay_ms: initial,
            max_delay_ms: max,
            jitter_ratio: jitter,
        }
    }

    fn always(initial: f64, max: f64, jitter: f64) -> RetryPolicy {
        RetryPolicy {
            mode: PolicyMode::Always,
            max_retries: 0,
            retryable_codes: RVec::new(),
            initial_delay_ms: initial,
            max_delay_ms: max,
            jitter_ratio: jitter,
        }
    }

    const DEFAULT_CODES: [&str; 5] = ["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"];

    #[test]
    fn the_default_policy_key_matches_the_reference() {
        assert_eq!(
            policy_key(&normal(5, &DEFAULT_CODES, 500.0, 10000.0, 0.1)),
            r#"["normal",5,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],500,10000,0.1]"#
        );
        assert_eq!(policy_key(&always(500.0, 10000.0, 0.1)), r#"["always",500,10000,0.1]"#);
    }

    #[test]
    fn the_local_delay_is_the_shared_backoff_of_the_policy() {
        let policy = normal(2, &DEFAULT_CODES, 500.0, 10000.0, 0.1);
        assert_eq!(local_delay(&policy, 1, 0.0), 450.0);
        assert_eq!(local_delay(&policy, 2, 1.0), 1100.0);
        assert_eq!(local_delay(&always(1.0, 4.0, 0.1), 3, 1.0), 4.0);
    }

    proptest! {
        #[test]
        fn the_normal_key_does_not_depend_on_code_order(mut codes in prop::collection::hash_set("[A-Z_]{1,12}|\u{1F600}|\u{FF5E}", 1..6).prop_map(|set| set.into_iter().collect::<Vec<_>>()), seed in any::<u64>()) {
            let key = |codes: &[String]| {
                let refs: Vec<&str> = codes.iter().map(String::as_str).collect();
                policy_key(&normal(3, &refs, 500.0, 10000.0, 0.1))
            };
            let first = key(&codes);
            let len = codes.len();
            codes.rotate_left((seed as usize) % len);
            codes.reverse();
            prop_assert_eq!(first, key(&codes));
        }
    }
}
