//! `dsh-retry` (row `model-error-retry`): the fallback executor.
//!
//! It never widens a provider's own policy. It asks the rest of the waterfall first and passes a
//! downstream retry through unchanged; then it retries only what no policy owns — generic or
//! unclassified codes, and overloads (`PI_AI_ERROR` saying "overloaded") with their own budget
//! and longer first wait ([`recovery`]). On a cold resume it continues work the log proves was
//! interrupted ([`resume`]).

pub mod config;
pub mod recovery;
pub mod resume;

use dsh_abi::{
    Answer, ChainKey, ConfigError, Continuation, Decision, DownstreamOutcome, Hooks, HostContextRef, LogLevel,
    Manifest, Plugin, PolicyKey, RequestErrorPayload, SessionStartSource,
};
use serde_json::Value;

pub use config::FallbackConfig;

pub fn manifest() -> Manifest {
    Manifest::new(
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        Hooks::REQUEST_ERROR.union(Hooks::SESSION_START),
        "retries failures no provider policy owns (generic codes, overloads) and continues interrupted work after a restart",
        &config::SCHEMA,
    )
}

pub struct DshRetry {
    config: FallbackConfig,
    policy_key: PolicyKey,
}

impl DshRetry {
    pub fn new(_row_id: &str, config: &Value) -> Result<DshRetry, Vec<ConfigError>> {
        let config = FallbackConfig::parse(config)?;
        let policy_key = PolicyKey::new(config.policy_key());
        Ok(DshRetry { config, policy_key })
    }
}

impl Plugin for DshRetry {
    fn on_request_error(&self, _payload: &RequestErrorPayload, _ctx: &HostContextRef<'_>) -> Result<Answer, String> {
        Ok(Answer::DelegateFirst)
    }

    fn after_downstream(
        &self,
        payload: &RequestErrorPayload,
        ctx: &HostContextRef<'_>,
        outcome: &DownstreamOutcome,
    ) -> Result<Decision, String> {
        match outcome {
            DownstreamOutcome::Retried(retry) => return Ok(Decision::Retry(retry.clone())),
            DownstreamOutcome::Switched(switch) => return Ok(Decision::Switch(switch.clone())),
            _ => {}
        }
        if ctx.is_cancelled() || recovery::owned_by_policy(payload) {
            return Ok(Decision::NoRetry);
        }
        let key = ChainKey::new(payload, self.policy_key.as_str());
        let scheduled = recovery::schedule(
            &self.config,
            &self.policy_key,
            payload,
            || ctx.last_retry(key).into_option(),
            || ctx.random(),
            || ctx.new_id().into_string(),
        );
        Ok(match scheduled {
            Some(scheduled) => {
                // The host's retry line already shows this retry; the line is for `-v`.
                ctx.log(LogLevel::Info, scheduled.warning.as_str().into());
                Decision::Retry(scheduled.decision)
            }
            None => Decision::NoRetry,
        })
    }

    fn on_session_start(
        &self,
        source: SessionStartSource,
        ctx: &HostContextRef<'_>,
    ) -> Result<Option<Continuation>, String> {
        if source != SessionStartSource::Resume {
            return Ok(None);
        }
        let header: Value = serde_json::from_str(&ctx.session_header()).unwrap_or(Value::Null);
        let events: Vec<Value> =
            ctx.last_turn_events().iter().filter_map(|line| serde_json::from_str(line).ok()).collect();
        Ok(resume::continuation(&self.config, &header, &events, ctx.has_pending_input(), ctx.now_ms()))
    }
}

dsh_abi::export_plugin! {
    manifest = manifest,
    instantiate = DshRetry::new,
}

#[cfg(test)]
mod tests {
    use dsh_abi::testing::{failure, FakeHost};
    use serde_json::json;

    use super::*;

    /// Through the author kit, as the host calls it: dsh-retry lets the chain below decide
    /// first, keeps a retry it made, falls back (with a warning) when nobody retried, and does
    /// nothing in a cancelled turn.
    #[test]
    fn it_falls_back_only_when_the_chain_below_retried_nothing() {
        let plugin = DshRetry::new("model-error-retry", &json!({"initialDelayMs": 100, "jitterRatio": 0})).unwrap();
        let payload = RequestErrorPayload::new(1, 1, "relay", failure("STREAM_CLOSED", 200), None);
        let host = FakeHost::new();
        assert_eq!(plugin.on_request_error(&payload, &host.context()), Ok(Answer::DelegateFirst));
        let below = dsh_abi::RetryDecision { delay_ms: 7.0, record: "{}".into() };
        let kept = plugin.after_downstream(&payload, &host.context(), &DownstreamOutcome::Retried(below.clone()));
        assert_eq!(kept, Ok(Decision::Retry(below)));
        let Ok(Decision::Retry(fallback)) =
            plugin.after_downstream(&payload, &host.context(), &DownstreamOutcome::Declined)
        else {
            panic!("a declined STREAM_CLOSED falls back");
        };
        assert_eq!(fallback.delay_ms, 100.0);
        assert!(fallback.record.contains("\"policyKey\":\"[\\\"dsh-retry/v1\\\""), "{}", fallback.record);
        assert!(matches!(host.logs().as_slice(), [(LogLevel::Info, _)]), "{:?}", host.logs());
        let cancelled = FakeHost::new().cancelled();
        let declined = plugin.after_downstream(&payload, &cancelled.context(), &DownstreamOutcome::Declined);
        assert_eq!(declined, Ok(Decision::NoRetry));
    }
}
