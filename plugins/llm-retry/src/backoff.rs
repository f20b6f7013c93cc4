//! The maths of a policy, apart from any effect: the local delay and the policy key. Both must
//! equal the TypeScript reference bit for bit (operation order and JavaScript number formatting).

use dsh_abi::{js, PolicyMode, RetryPolicy};

/// The local (jittered exponential) delay before retry number `retry` (from 1), given one random
/// sample in [0, 1]:
///
/// ```text
/// exponent    = min(retry - 1, 1024)
/// exponential = min(initialDelayMs * 2^exponent, maxDelayMs)   // 2^1024 = +inf, capped by min
/// factor      = (1 - jitterRatio) + (2 * jitterRatio) * random
/// delayMs     = min(exponential * factor, maxDelayMs)
/// ```
pub fn local_delay(policy: &RetryPolicy, retry: u64, random: f64) -> f64 {
    let exponential = (policy.initial_delay_ms * js::pow2(retry.saturating_sub(1).min(1024))).min(policy.max_delay_ms);
    let factor = (1.0 - policy.jitter_ratio) + (2.0 * policy.jitter_ratio) * random;
    (exponential * factor).min(policy.max_delay_ms)
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
            let mut codes: Vec<&str> = policy.retryable_codes.iter().map(|code| code.as_str()).collect();
            codes.sort_by(|a, b| js::cmp_utf16(a, b));
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
    use abi_stable::std_types::{RString, RVec};
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
    fn normal_delays_with_random_zero_then_one() {
        let policy = normal(2, &DEFAULT_CODES, 500.0, 10000.0, 0.1);
        assert_eq!(local_delay(&policy, 1, 0.0), 450.0);
        assert_eq!(local_delay(&policy, 2, 1.0), 1100.0);
    }

    #[test]
    fn always_delays_double_up_to_the_cap() {
        let policy = always(1.0, 4.0, 0.1);
        let delays: Vec<f64> = (1..=4).map(|retry| local_delay(&policy, retry, 1.0)).collect();
        assert_eq!(delays, [1.1, 2.2, 4.0, 4.0]);
    }

    #[test]
    fn full_jitter_can_reach_zero() {
        assert_eq!(local_delay(&normal(2, &DEFAULT_CODES, 1.0, 1.0, 1.0), 1, 0.0), 0.0);
    }

    #[test]
    fn a_huge_retry_number_clamps_the_exponent() {
        assert_eq!(local_delay(&always(3.0, 7000.0, 0.25), 1101, 0.3), 6300.0);
        assert_eq!(local_delay(&always(3.0, 7000.0, 0.25), u64::MAX, 0.3), 6300.0);
    }

    fn valid_policies() -> impl Strategy<Value = RetryPolicy> {
        (1.0f64..=2_147_483_647.0, 0.0f64..=1.0, any::<bool>(), 0u64..100).prop_flat_map(
            |(a, jitter, is_always, max_retries)| {
                (a..=2_147_483_647.0).prop_map(move |max| {
                    if is_always {
                        always(a, max, jitter)
                    } else {
                        normal(max_retries, &DEFAULT_CODES, a, max, jitter)
                    }
                })
            },
        )
    }

    proptest! {
        #[test]
        fn delays_are_finite_and_within_their_bounds(policy in valid_policies(), retry in 1u64..=u64::from(u32::MAX), random in 0.0f64..=1.0) {
            let delay = local_delay(&policy, retry, random);
            let exponential = (policy.initial_delay_ms * js::pow2((retry - 1).min(1024))).min(policy.max_delay_ms);
            let lower = (exponential * (1.0 - policy.jitter_ratio)).max(0.0);
            prop_assert!(delay.is_finite());
            prop_assert!(delay >= lower, "{delay} < {lower}");
            prop_assert!(delay <= policy.max_delay_ms);
        }

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
