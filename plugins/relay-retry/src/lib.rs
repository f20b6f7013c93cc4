//! `relay-retry`: the fixed-schedule relay executor. A matching failure (exact code, or a prefix
//! rule such as `HTTP_*`) is retried after `schedule[retry-1]`, and after `tailDelayMs` once the
//! schedule is used up, forever. The chain count comes from the durable log through the host's
//! history index, so a restart continues it. Records are `always`-mode records with
//! `headRetries`, so displays show `(2/5, then ∞)` in the head and `(7/∞)` in the tail.

pub mod config;

use dsh_abi::retry::{ChainPosition, MAX_DELAY_MS};
use dsh_abi::{
    Answer, ChainKey, ConfigError, Decision, Hooks, HostContextRef, Manifest, Plugin, PolicyKey, RequestErrorPayload,
    RetryDecision, RetryRecord,
};
use serde_json::Value;

pub use config::RelayConfig;

pub fn manifest() -> Manifest {
    Manifest::new(
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        Hooks::REQUEST_ERROR,
        "retries relay and account-pool failures on a fixed schedule, then every tailDelayMs without limit",
        &config::SCHEMA,
    )
}

pub struct RelayRetry {
    config: RelayConfig,
    policy_key: PolicyKey,
}

impl RelayRetry {
    pub fn new(_row_id: &str, config: &Value) -> Result<RelayRetry, Vec<ConfigError>> {
        let config = RelayConfig::parse(config)?;
        let policy_key = PolicyKey::new(config.policy_key());
        Ok(RelayRetry { config, policy_key })
    }

    /// The wait before retry number `retry` (from 1), given the provider's hint.
    pub fn delay(&self, retry: u64, hint: Option<f64>) -> f64 {
        let scheduled = usize::try_from(retry - 1)
            .ok()
            .and_then(|index| self.config.schedule.get(index))
            .copied()
            .unwrap_or(self.config.tail_delay_ms) as f64;
        match hint.filter(|hint| self.config.respect_retry_after && hint.is_finite() && *hint > scheduled) {
            Some(hint) => hint.min(MAX_DELAY_MS),
            None => scheduled,
        }
    }

    /// Schedules the next retry of the failure's chain; `last_retry` answers the chain lookup.
    pub fn schedule(
        &self,
        payload: &RequestErrorPayload,
        last_retry: Option<dsh_abi::ChainRecord>,
        new_id: impl FnOnce() -> String,
    ) -> RetryDecision {
        let chain = ChainPosition::new(last_retry);
        let retry = chain.next_retry();
        let retry_id = chain.retry_id(new_id);
        let delay_ms = self.delay(retry, payload.failure.provider_retry_after_ms.into_option());
        let mut record = RetryRecord::new(payload, &retry_id, "always", &self.policy_key, retry, delay_ms);
        record.head_retries = Some(self.config.schedule.len());
        record.decision()
    }
}

impl Plugin for RelayRetry {
    fn on_request_error(&self, payload: &RequestErrorPayload, ctx: &HostContextRef<'_>) -> Result<Answer, String> {
        if !self.config.matches(&payload.failure.code) {
            return Ok(Answer::Pass);
        }
        if ctx.is_cancelled() {
            return Ok(Answer::Decide(Decision::NoRetry));
        }
        let last_retry = ctx.last_retry(ChainKey::new(payload, self.policy_key.as_str())).into_option();
        let decision = self.schedule(payload, last_retry, || ctx.new_id().into_string());
        Ok(Answer::Decide(Decision::Retry(decision)))
    }
}

dsh_abi::export_plugin! {
    manifest = manifest,
    instantiate = RelayRetry::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_abi::{ChainRecord, Failure};
    use serde_json::json;

    fn relay(config: Value) -> RelayRetry {
        RelayRetry::new("relay-retry", &config).unwrap()
    }

    fn payload(code: &str, hint: Option<f64>) -> RequestErrorPayload {
        let mut failure = Failure::new(code, "upstream account rejected");
        failure.provider_retry_after_ms = hint.into();
        RequestErrorPayload::new(1, 1, "relay", failure, None)
    }

    #[test]
    fn the_head_then_the_tail_forever() {
        let relay = relay(Value::Null);
        let delays: Vec<f64> = (1..=8).map(|retry| relay.delay(retry, None)).collect();
        assert_eq!(delays, [2000.0, 5000.0, 5000.0, 5000.0, 10000.0, 20000.0, 20000.0, 20000.0]);
        assert_eq!(relay.delay(u64::MAX, None), 20000.0);
    }

    #[test]
    fn a_hint_is_a_floor_only_when_asked_for() {
        assert_eq!(relay(Value::Null).delay(1, Some(9000.0)), 2000.0);
        let respecting = relay(json!({"respectRetryAfter": true}));
        assert_eq!(respecting.delay(1, Some(9000.0)), 9000.0);
        assert_eq!(respecting.delay(1, Some(900.0)), 2000.0);
        assert_eq!(respecting.delay(1, Some(1e15)), MAX_DELAY_MS);
    }

    #[test]
    fn the_record_is_an_always_record_with_head_retries() {
        let relay = relay(json!({"schedule": [10, 20], "tailDelayMs": 30, "retryableCodes": ["SERVER", "HTTP_*"]}));
        let first = relay.schedule(&payload("SERVER", None), None, || "chain".into());
        assert_eq!(
            first.record.as_str(),
            r#"{"retryId":"chain","turn":1,"step":1,"provider":"relay","mode":"always","policyKey":"[\"relay\",[10,20],30,[\"HTTP_*\",\"SERVER\"],false]","retry":1,"delayMs":10,"failure":{"message":"upstream account rejected","code":"SERVER"},"headRetries":2}"#
        );
        let third = relay.schedule(
            &payload("SERVER", None),
            Some(ChainRecord { retry_id: "chain".into(), retry: 2 }),
            || unreachable!(),
        );
        assert_eq!(third.delay_ms, 30.0);
        assert!(third.record.contains(r#""retry":3,"delayMs":30,"#));
    }

    #[test]
    fn the_default_policy_key() {
        assert_eq!(
            relay(Value::Null).policy_key.as_str(),
            r#"["relay",[2000,5000,5000,5000,10000],20000,["ACCOUNT_QUOTA","ACCOUNT_TOKEN_INVALID","AUTH","EMPTY_RESPONSE","HTTP_*","INVALID_CREDENTIAL","MALFORMED_RESPONSE","PI_AI_ERROR","QUOTA","RATE_LIMIT","SERVER","STREAM_CLOSED","TIMEOUT","TRANSPORT"],false]"#
        );
    }

    /// Through the author kit, as the host calls it: the schedule's head, then its tail, one
    /// chain under one id; a code it does not retry passes on.
    #[test]
    fn the_schedule_runs_through_the_host_history() {
        use dsh_abi::testing::FakeHost;
        let relay = relay(json!({"schedule": [10, 20], "tailDelayMs": 30}));
        let host = FakeHost::new();
        let mut delays = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let Ok(Answer::Decide(Decision::Retry(retry))) =
                relay.on_request_error(&payload("SERVER", None), &host.context())
            else {
                panic!("relay-retry retries a SERVER failure");
            };
            host.take_in(&retry).unwrap();
            delays.push(retry.delay_ms);
            ids.push(serde_json::from_str::<Value>(retry.record.as_str()).unwrap()["retryId"].clone());
        }
        assert_eq!(delays, [10.0, 20.0, 30.0]);
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        assert_eq!(relay.on_request_error(&payload("MISSING_CREDENTIAL", None), &host.context()), Ok(Answer::Pass));
    }
}
