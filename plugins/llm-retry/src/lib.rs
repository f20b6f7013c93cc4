//! `llm-retry`: the built-in executor. The policy belongs to each provider route (`retryPolicy`
//! in the provider row) and arrives resolved in every request-error payload; this plugin applies
//! it, in the exact decision order of the TypeScript reference:
//!
//! 1. no policy: pass;
//! 2. always mode: cancelled → no retry; otherwise ask the rest of the chain first and return a
//!    downstream retry unchanged; normal mode: a code not listed (case-sensitive) → pass;
//! 3. find the chain's last record (turn, step, provider, policy key) through the host's index;
//! 4. normal mode with the budget spent → pass;
//! 5. the provider's hint as the delay when present (over `maxDelayMs`: normal passes, always
//!    uses the local delay), else the local jittered exponential delay;
//! 6. decide, with the `llm/retry` record the host appends before it waits.

pub mod backoff;
pub mod schedule;

use dsh_abi::{
    Answer, ConfigError, Decision, DownstreamOutcome, Hooks, HostContextRef, Key, Kind, LogLevel, Manifest, Plugin,
    PolicyKey, PolicyMode, RequestErrorPayload, RetryPolicy, Schema,
};
use serde_json::Value;
use std::sync::{Arc, Mutex, PoisonError};

/// The row takes no config; a `retryPolicy` here is refused with where it belongs.
pub const SCHEMA: Schema = Schema::plugin(
    "llm-retry",
    &[Key::new("retryPolicy", Kind::Misplaced("retryPolicy belongs under each provider configuration"), "", "")],
);

pub fn manifest() -> Manifest {
    Manifest::new(
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        Hooks::REQUEST_ERROR,
        "applies each provider route's retryPolicy: bounded code-filtered backoff (normal) or unbounded (always)",
        &SCHEMA,
    )
}

/// How many routes' policy keys an executor remembers.
const REMEMBERED_POLICIES: usize = 16;

/// The executor. Its row takes no config: policies belong to provider rows. It remembers the
/// keys of the policies it has met (one per route), so a failure does not rebuild its key.
#[derive(Default)]
pub struct LlmRetry {
    keys: Mutex<Vec<(RetryPolicy, Arc<PolicyKey>)>>,
}

impl LlmRetry {
    pub fn new(_row_id: &str, config: &Value) -> Result<LlmRetry, Vec<ConfigError>> {
        SCHEMA.read(config)?.finish(LlmRetry::default())
    }

    fn policy_key(&self, policy: &RetryPolicy) -> Arc<PolicyKey> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, key)) = keys.iter().find(|(known, _)| known == policy) {
            return key.clone();
        }
        let key = Arc::new(PolicyKey::new(backoff::policy_key(policy)));
        if keys.len() == REMEMBERED_POLICIES {
            keys.remove(0);
        }
        keys.push((policy.clone(), key.clone()));
        key
    }

    fn schedule(&self, payload: &RequestErrorPayload, ctx: &HostContextRef<'_>) -> Decision {
        let Some(policy) = payload.retry_policy.as_ref().into_option() else {
            return Decision::NoRetry;
        };
        let decision = schedule::schedule(
            payload,
            policy,
            &self.policy_key(policy),
            |policy_key| ctx.last_retry(dsh_abi::ChainKey::new(payload, policy_key)).into_option(),
            || ctx.random(),
            || ctx.new_id().into_string(),
        );
        decision.map_or(Decision::NoRetry, Decision::Retry)
    }
}

impl Plugin for LlmRetry {
    fn on_request_error(&self, payload: &RequestErrorPayload, ctx: &HostContextRef<'_>) -> Result<Answer, String> {
        let Some(policy) = payload.retry_policy.as_ref().into_option() else {
            return Ok(Answer::Pass);
        };
        Ok(match policy.mode {
            PolicyMode::Always if ctx.is_cancelled() => Answer::Decide(Decision::NoRetry),
            PolicyMode::Always => Answer::DelegateFirst,
            PolicyMode::Normal if !policy.retryable_codes.contains(&payload.failure.code) => Answer::Pass,
            PolicyMode::Normal => match self.schedule(payload, ctx) {
                Decision::NoRetry => Answer::Pass,
                retry => Answer::Decide(retry),
            },
        })
    }

    fn after_downstream(
        &self,
        payload: &RequestErrorPayload,
        ctx: &HostContextRef<'_>,
        outcome: &DownstreamOutcome,
    ) -> Result<Decision, String> {
        if ctx.is_cancelled() {
            return Ok(Decision::NoRetry);
        }
        match outcome {
            DownstreamOutcome::Retried(retry) => return Ok(Decision::Retry(retry.clone())),
            DownstreamOutcome::Switched(switch) => return Ok(Decision::Switch(switch.clone())),
            DownstreamOutcome::Failed(message) => ctx.log(
                LogLevel::Warn,
                format!(
                    "llm-retry: provider \"{}\" always policy ignored a downstream recovery failure: {message}",
                    payload.provider
                )
                .as_str()
                .into(),
            ),
            _ => {}
        }
        Ok(self.schedule(payload, ctx))
    }
}

dsh_abi::export_plugin! {
    manifest = manifest,
    instantiate = LlmRetry::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(config: Value) -> Vec<(String, String)> {
        LlmRetry::new("llm-retry", &config)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|error| (error.path.into_string(), error.message.into_string()))
            .collect()
    }

    #[test]
    fn the_row_takes_no_config() {
        assert!(errors(Value::Null).is_empty());
        assert!(errors(json!({})).is_empty());
        assert_eq!(
            errors(json!({"retryPolicy": {}})),
            [("retryPolicy".into(), "llm-retry: retryPolicy belongs under each provider configuration".into())]
        );
        assert_eq!(
            errors(json!({"maxRetries": 3})),
            [("maxRetries".into(), "llm-retry: unknown key \"maxRetries\"".into())]
        );
        assert_eq!(errors(json!([1])), [("".into(), "llm-retry: configuration must be an object".into())]);
    }

    /// The executor remembers each route's key; a policy changed by a reloaded profile (same
    /// route, new settings) gets its own key, so its records start a new chain.
    #[test]
    fn a_changed_policy_gets_its_own_key_and_more_routes_than_remembered_keep_theirs_right() {
        let policy = |max_retries| dsh_abi::RetryPolicy {
            mode: PolicyMode::Normal,
            max_retries,
            retryable_codes: vec!["SERVER".into()].into(),
            initial_delay_ms: 100.0,
            max_delay_ms: 1000.0,
            jitter_ratio: 0.0,
        };
        let plugin = LlmRetry::default();
        for round in 0..2 {
            for max_retries in 0..(REMEMBERED_POLICIES as u64 + 3) {
                let remembered = plugin.policy_key(&policy(max_retries));
                assert_eq!(remembered.as_str(), backoff::policy_key(&policy(max_retries)), "round {round}");
            }
        }
        assert_eq!(plugin.keys.lock().unwrap().len(), REMEMBERED_POLICIES);
    }

    /// Through the author kit, as the host calls it: a normal policy retries its codes, one chain
    /// under one id, until `maxRetries`, then passes the failure on.
    #[test]
    fn a_normal_policy_continues_its_chain_through_the_host_history_until_max_retries() {
        use dsh_abi::testing::{failure, FakeHost};
        let policy = dsh_abi::RetryPolicy {
            mode: PolicyMode::Normal,
            max_retries: 2,
            retryable_codes: vec!["SERVER".into()].into(),
            initial_delay_ms: 100.0,
            max_delay_ms: 1000.0,
            jitter_ratio: 0.0,
        };
        let payload = RequestErrorPayload::new(1, 1, "relay", failure("SERVER", 503), Some(policy));
        let host = FakeHost::new().at(1_000.0);
        let plugin = LlmRetry::default();
        let mut records = Vec::new();
        for _ in 0..2 {
            let Ok(Answer::Decide(Decision::Retry(retry))) = plugin.on_request_error(&payload, &host.context()) else {
                panic!("a SERVER failure within maxRetries is retried");
            };
            host.take_in(&retry).unwrap();
            records.push(serde_json::from_str::<Value>(retry.record.as_str()).unwrap());
        }
        assert_eq!((&records[0]["retry"], &records[1]["retry"]), (&json!(1), &json!(2)));
        assert_eq!(records[0]["retryId"], records[1]["retryId"], "one chain, one id");
        assert_eq!(plugin.on_request_error(&payload, &host.context()), Ok(Answer::Pass), "past maxRetries");
        let mut other = payload.clone();
        other.failure = failure("AUTH", 401);
        assert_eq!(plugin.on_request_error(&other, &host.context()), Ok(Answer::Pass), "not a retryable code");
    }
}
