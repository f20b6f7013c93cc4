//! `retry-budget`: gRPC-style retry throttling, shared through the host's counter store.
//!
//! The budget of a key (a route, or a relay host) is a bucket of `maxTokens`: each failure takes
//! a token, each answered request gives `tokenRatio` back, and a retry another row decided goes
//! ahead only while the bucket holds more than half. The row delegates first — every other row
//! decides — then lets the retry through or refuses it with its reason. The counter lives in the
//! store the row's config names (`store`), which the host opens; this plugin only does the maths
//! ([`Budget`]).

use dsh_abi::config::COUNTER_STORE_KEY;
use dsh_abi::{
    Answer, ConfigError, Decision, DownstreamOutcome, Hooks, HostContextRef, Key, Kind, LogLevel, Manifest,
    OncePerTurn, Plugin, RString, RequestErrorPayload, RequestSuccess, Schema,
};
use serde_json::Value;

const NAME: &str = "retry-budget";
/// The row's keys; `store` is where the host keeps the bucket (the `counters` capability).
pub const SCHEMA: Schema = Schema::plugin(
    NAME,
    &[
        Key::new("maxTokens", Kind::integer(1, 1000), "10", "the bucket's size"),
        Key::new("tokenRatio", Kind::number_above(0.0, 1.0), "0.1", "tokens an answered request gives back"),
        Key::new("key", Kind::Choice(&["route", "host"]), "\"route\"", "one bucket per route, or per relay host"),
        Key::new(COUNTER_STORE_KEY, Kind::CounterStore, "\"memory\"", "where the bucket is kept (the host opens it)"),
        Key::new(
            "onStoreError",
            Kind::Choice(&["open", "closed"]),
            "\"open\"",
            "when the store cannot be reached: open lets retries through, closed holds them back",
        ),
    ],
);

fn manifest() -> Manifest {
    Manifest::new(
        NAME,
        env!("CARGO_PKG_VERSION"),
        Hooks::REQUEST_ERROR.union(Hooks::REQUEST_SUCCESS).union(Hooks::COUNTERS),
        "holds back retries while a route's or relay's failures outrun its successes (gRPC retry throttling)",
        &SCHEMA,
    )
}

/// The bucket's maths, apart from where it is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub max_tokens: f64,
    pub token_ratio: f64,
}

impl Budget {
    /// What a failure takes.
    pub const FAILURE: f64 = -1.0;

    /// Whether a retry may go ahead with `tokens` left (after the failure took its token).
    pub fn allows(&self, tokens: f64) -> bool {
        tokens > self.max_tokens / 2.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyBy {
    Route,
    Host,
}

/// One configured row.
pub struct RetryBudget {
    budget: Budget,
    key_by: KeyBy,
    fail_open: bool,
    /// One store warning per turn.
    warned: OncePerTurn,
}

impl RetryBudget {
    pub fn new(_row_id: &str, config: &Value) -> Result<RetryBudget, Vec<ConfigError>> {
        let mut row = SCHEMA.read(config)?;
        let budget = Budget { max_tokens: row.number("maxTokens"), token_ratio: row.number("tokenRatio") };
        let key_by = if row.text("key").as_deref() == Some("host") { KeyBy::Host } else { KeyBy::Route };
        row.value(COUNTER_STORE_KEY);
        let fail_open = row.text("onStoreError").as_deref() != Some("closed");
        row.finish(RetryBudget { budget, key_by, fail_open, warned: OncePerTurn::default() })
    }

    fn key(&self, provider: &str, endpoint_host: &str) -> String {
        match self.key_by {
            KeyBy::Route => format!("{NAME}:route:{provider}"),
            KeyBy::Host if endpoint_host.is_empty() => format!("{NAME}:route:{provider}"),
            KeyBy::Host => format!("{NAME}:host:{endpoint_host}"),
        }
    }

    /// Adds `delta` to the bucket of `key`; `Err` says why the store cannot be reached.
    fn add(&self, ctx: &HostContextRef<'_>, key: &str, delta: f64) -> Result<f64, RString> {
        ctx.counter_add(key.into(), delta, self.budget.max_tokens, 0.0, self.budget.max_tokens).into_result()
    }

    /// The store could not be reached: warn once per turn.
    fn warn_store(&self, ctx: &HostContextRef<'_>, turn: u64, why: &str) {
        if !self.warned.first(ctx, turn) {
            return;
        }
        let policy = if self.fail_open { "retries go ahead unbudgeted" } else { "retries are held back" };
        ctx.log(
            LogLevel::Warn,
            format!("{NAME}: the budget store cannot be reached ({why}); {policy}").as_str().into(),
        );
    }
}

impl Plugin for RetryBudget {
    fn on_request_error(&self, _payload: &RequestErrorPayload, _ctx: &HostContextRef<'_>) -> Result<Answer, String> {
        Ok(Answer::DelegateFirst)
    }

    fn after_downstream(
        &self,
        payload: &RequestErrorPayload,
        ctx: &HostContextRef<'_>,
        outcome: &DownstreamOutcome,
    ) -> Result<Decision, String> {
        let key = self.key(payload.provider.as_str(), payload.endpoint_host.as_str());
        let tokens = self.add(ctx, &key, Budget::FAILURE);
        let retry = match outcome {
            DownstreamOutcome::Retried(retry) => retry,
            // A failover hop is not a retry of this route: the budget does not hold it back.
            DownstreamOutcome::Switched(switch) => return Ok(Decision::Switch(switch.clone())),
            _ => return Ok(Decision::NoRetry),
        };
        match tokens {
            Ok(tokens) if self.budget.allows(tokens) => Ok(Decision::Retry(retry.clone())),
            Ok(tokens) => Ok(Decision::Refuse(
                format!(
                    "the retry budget of {} is spent ({} of {} tokens left; retries resume above {}, as requests are answered)",
                    key.trim_start_matches("retry-budget:"),
                    dsh_abi::js::number((tokens * 10.0).round() / 10.0),
                    self.budget.max_tokens,
                    self.budget.max_tokens / 2.0
                )
                .into(),
            )),
            Err(why) => {
                self.warn_store(ctx, payload.turn, why.as_str());
                if self.fail_open {
                    Ok(Decision::Retry(retry.clone()))
                } else {
                    Ok(Decision::Refuse(
                        format!("the retry budget's store cannot be reached ({why}); onStoreError: closed").into(),
                    ))
                }
            }
        }
    }

    fn on_request_success(&self, success: &RequestSuccess, ctx: &HostContextRef<'_>) -> Result<(), String> {
        let key = self.key(success.provider.as_str(), success.endpoint_host.as_str());
        if let Err(why) = self.add(ctx, &key, self.budget.token_ratio) {
            self.warn_store(ctx, success.turn, why.as_str());
        }
        Ok(())
    }
}

dsh_abi::export_plugin! {
    manifest = manifest,
    instantiate = RetryBudget::new,
}

#[cfg(test)]
mod tests {
    use dsh_abi::testing::{failure, FakeHost};
    use dsh_abi::RetryDecision;

    use super::*;

    fn retried() -> DownstreamOutcome {
        DownstreamOutcome::Retried(RetryDecision { delay_ms: 5.0, record: r#"{"retryId":"r","retry":1}"#.into() })
    }

    fn payload() -> RequestErrorPayload {
        RequestErrorPayload::new(1, 1, "relay", failure("SERVER", 503), None)
    }

    #[test]
    fn retries_go_ahead_above_half_the_bucket_and_are_refused_at_half() {
        let budget = RetryBudget::new(NAME, &Value::Null).unwrap();
        let host = FakeHost::new();
        let decisions: Vec<bool> = (0..7)
            .map(|_| matches!(budget.after_downstream(&payload(), &host.context(), &retried()), Ok(Decision::Retry(_))))
            .collect();
        assert_eq!(decisions, [true, true, true, true, false, false, false]);
        assert_eq!(host.counter("retry-budget:route:relay"), Some(3.0));
        let Ok(Decision::Refuse(reason)) = budget.after_downstream(&payload(), &host.context(), &retried()) else {
            panic!("refused")
        };
        assert!(reason.contains("route:relay is spent (2 of 10 tokens left; retries resume above 5"), "{reason}");
    }

    #[test]
    fn answered_requests_give_tokens_back() {
        let budget = RetryBudget::new(NAME, &serde_json::json!({"maxTokens": 4, "tokenRatio": 0.5})).unwrap();
        let host = FakeHost::new();
        for _ in 0..3 {
            let _ = budget.after_downstream(&payload(), &host.context(), &retried());
        }
        assert_eq!(host.counter("retry-budget:route:relay"), Some(1.0));
        let success = RequestSuccess { turn: 2, step: 1, provider: "relay".into(), endpoint_host: "r.example".into() };
        for _ in 0..10 {
            budget.on_request_success(&success, &host.context()).unwrap();
        }
        assert_eq!(host.counter("retry-budget:route:relay"), Some(4.0), "never above maxTokens");
    }

    #[test]
    fn a_host_key_shares_one_bucket_between_routes_of_one_relay() {
        let budget = RetryBudget::new(NAME, &serde_json::json!({"key": "host"})).unwrap();
        let host = FakeHost::new();
        let mut on_relay = payload();
        on_relay.endpoint_host = "relay.example".into();
        let _ = budget.after_downstream(&on_relay, &host.context(), &retried());
        assert_eq!(host.counter("retry-budget:host:relay.example"), Some(9.0));
    }

    #[test]
    fn an_unreachable_store_fails_open_or_closed_with_one_warning_per_turn() {
        let open = RetryBudget::new(NAME, &Value::Null).unwrap();
        let host = FakeHost::new().store_down("cannot reach redis://127.0.0.1:1");
        for _ in 0..3 {
            assert!(matches!(open.after_downstream(&payload(), &host.context(), &retried()), Ok(Decision::Retry(_))));
        }
        assert_eq!(host.logs().len(), 1, "one warning per turn: {:?}", host.logs());
        let closed = RetryBudget::new(NAME, &serde_json::json!({"onStoreError": "closed"})).unwrap();
        let Ok(Decision::Refuse(reason)) = closed.after_downstream(&payload(), &host.context(), &retried()) else {
            panic!("closed refuses")
        };
        assert!(reason.contains("onStoreError: closed"), "{reason}");
    }

    #[test]
    fn a_failover_hop_below_goes_through_and_still_counts_the_failure() {
        let budget = RetryBudget::new(NAME, &Value::Null).unwrap();
        let host = FakeHost::new();
        let switch = dsh_abi::RouteSwitch { route: "backup".into(), reason: "relay: SERVER".into() };
        let decided =
            budget.after_downstream(&payload(), &host.context(), &DownstreamOutcome::Switched(switch.clone()));
        assert_eq!(decided, Ok(Decision::Switch(switch)));
        assert_eq!(host.counter("retry-budget:route:relay"), Some(9.0));
    }

    #[test]
    fn bad_values_are_named() {
        let errors =
            RetryBudget::new(NAME, &serde_json::json!({"maxTokens": 0, "tokenRatio": 2, "key": "user", "colour": 1}))
                .err()
                .unwrap();
        let keys: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
        assert_eq!(keys, ["colour", "maxTokens", "tokenRatio", "key"]);
        assert_eq!(SCHEMA.faults(), Vec::<String>::new());
    }
}
