//! Steps 3–7 of the decision: given a failure the route's policy owns, find its chain, check the
//! budget, pick the delay and write the record — or decline. Pure: history, randomness and ids
//! come in as functions.

use dsh_abi::retry::ChainPosition;
use dsh_abi::{ChainRecord, PolicyKey, PolicyMode, RequestErrorPayload, RetryDecision, RetryPolicy, RetryRecord};

use crate::backoff::local_delay;

/// Schedules the next retry of the failure's chain under `policy`, or `None` when the policy
/// declines (normal budget spent, or a provider hint longer than `maxDelayMs` in normal mode).
///
/// `key` is the policy's [`policy_key`](crate::backoff::policy_key); `last_retry` answers the
/// chain lookup for it; `random` is asked at most once, only when the local delay is used;
/// `new_id` only when a new chain starts.
pub fn schedule(
    payload: &RequestErrorPayload,
    policy: &RetryPolicy,
    key: &PolicyKey,
    last_retry: impl FnOnce(&str) -> Option<ChainRecord>,
    random: impl FnOnce() -> f64,
    new_id: impl FnOnce() -> String,
) -> Option<RetryDecision> {
    let chain = ChainPosition::new(last_retry(key.as_str()));
    if policy.mode == PolicyMode::Normal && chain.previous() >= policy.max_retries {
        return None;
    }
    let retry = chain.next_retry();
    let delay_ms = match payload.failure.retry_after_hint() {
        Some(hint) if hint > policy.max_delay_ms => match policy.mode {
            PolicyMode::Normal => return None,
            PolicyMode::Always => local_delay(policy, retry, random()),
        },
        Some(hint) => hint,
        None => local_delay(policy, retry, random()),
    };
    let retry_id = chain.retry_id(new_id);
    let mut record = RetryRecord::new(payload, &retry_id, policy.mode.as_str(), key, retry, delay_ms);
    record.max_retries = (policy.mode == PolicyMode::Normal).then_some(policy.max_retries);
    Some(record.decision())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::policy_key;
    use dsh_abi::Failure;
    use dsh_abi::{ROption, RString, RVec};

    fn policy(mode: PolicyMode, max_retries: u64, initial: f64, max: f64, jitter: f64) -> RetryPolicy {
        RetryPolicy {
            mode,
            max_retries,
            retryable_codes: ["SERVER", "RATE_LIMIT"].iter().map(|code| RString::from(*code)).collect::<RVec<_>>(),
            initial_delay_ms: initial,
            max_delay_ms: max,
            jitter_ratio: jitter,
        }
    }

    fn payload(hint: Option<f64>) -> RequestErrorPayload {
        let mut failure = Failure::new("RATE_LIMIT", "busy");
        failure.status = ROption::RSome(429);
        failure.provider_retry_after_ms = hint.into();
        RequestErrorPayload::new(1, 2, "mock", failure, None)
    }

    #[test]
    fn a_new_chain_writes_a_normal_record_in_the_reference_key_order() {
        let normal = policy(PolicyMode::Normal, 2, 500.0, 10000.0, 0.0);
        let decision =
            schedule(&payload(None), &normal, &PolicyKey::new(policy_key(&normal)), |_| None, || 0.5, || "new".into())
                .unwrap();
        assert_eq!(decision.delay_ms, 500.0);
        assert_eq!(
            decision.record.as_str(),
            r#"{"retryId":"new","turn":1,"step":2,"provider":"mock","mode":"normal","policyKey":"[\"normal\",2,[\"RATE_LIMIT\",\"SERVER\"],500,10000,0]","retry":1,"maxRetries":2,"delayMs":500,"failure":{"message":"busy","code":"RATE_LIMIT","status":429}}"#
        );
    }

    #[test]
    fn an_existing_chain_keeps_its_id_and_counts_on() {
        let prior = ChainRecord { retry_id: "chain-1".into(), retry: 1 };
        let always = policy(PolicyMode::Always, 0, 1.0, 4.0, 0.1);
        let decision = schedule(
            &payload(None),
            &always,
            &PolicyKey::new(policy_key(&always)),
            |_| Some(prior),
            || 1.0,
            || unreachable!("no new id"),
        )
        .unwrap();
        assert_eq!(decision.delay_ms, 2.2);
        assert!(decision.record.starts_with(r#"{"retryId":"chain-1","turn":1,"step":2,"provider":"mock","mode":"always","policyKey":"[\"always\",1,4,0.1]","retry":2,"delayMs":2.2,"#));
    }

    #[test]
    fn a_spent_normal_budget_declines() {
        let prior = ChainRecord { retry_id: "c".into(), retry: 2 };
        let spent = policy(PolicyMode::Normal, 2, 1.0, 1.0, 0.0);
        assert_eq!(
            schedule(
                &payload(None),
                &spent,
                &PolicyKey::new(policy_key(&spent)),
                |_| Some(prior),
                || 0.5,
                || "x".into()
            ),
            None
        );
    }

    #[test]
    fn a_provider_hint_is_used_verbatim_up_to_the_cap() {
        let hinted = |hint, mode| {
            let hinted = policy(mode, 2, 2.0, 4.0, 0.5);
            schedule(
                &payload(Some(hint)),
                &hinted,
                &PolicyKey::new(policy_key(&hinted)),
                |_| None,
                || 1.0,
                || "x".into(),
            )
        };
        assert_eq!(hinted(4.0, PolicyMode::Normal).unwrap().delay_ms, 4.0);
        assert_eq!(hinted(10.0, PolicyMode::Normal), None);
        assert_eq!(hinted(10.0, PolicyMode::Always).unwrap().delay_ms, 3.0);
        assert_eq!(hinted(0.0, PolicyMode::Normal).unwrap().delay_ms, 3.0);
        assert_eq!(hinted(-5.0, PolicyMode::Normal).unwrap().delay_ms, 3.0);
    }
}
