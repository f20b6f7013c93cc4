//! A fake host for unit tests of plugin hooks (feature `testing`): a [`HostContext`] with
//! scripted history, clock, randomness and ids, so a plugin's decisions are tested without the
//! host, a session log or a wait.
//!
//! Build a host (`FakeHost::new().at(1_000.0).randoms([0.5])`), a payload
//! (`RequestErrorPayload::new(1, 1, "relay", failure("SERVER", 503), None)`), and call the hook:
//! `plugin.on_request_error(&payload, &host.context())`. A retry a plugin decides can be taken into
//! the history ([`FakeHost::take_in`]) so the next call continues the chain, as the host's index
//! of the session log would, once the host's own check of the decision passes. The context is
//! the host's own ([`crate::context::Context`]), over scripted parts; counters and circuits
//! update through [`crate::store`], as the host's stores do.

use std::collections::HashMap;
use std::sync::Mutex;

use abi_stable::std_types::{ROption, RString, RVec};

use crate::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState};
use crate::context::{Context, Counters, ScriptedServices, Services, Session};
use crate::host::HostContextRef;
use crate::js;
use crate::retry::check_row_decision;
use crate::store;
use crate::types::{ChainKey, ChainRecord, Failure, LogLevel, RetryDecision};

/// A host context whose answers a test sets: the host's own [`Context`] over a scripted session,
/// [`ScriptedServices`] and counters kept in memory.
#[derive(Debug)]
pub struct FakeHost {
    context: Context<ScriptedSession, ScriptedServices, ScriptedCounters>,
}

/// The session a [`FakeHost`] answers from.
#[derive(Debug)]
pub struct ScriptedSession {
    chains: Mutex<HashMap<(u64, u64, String, String), ChainRecord>>,
    last_turn_events: Mutex<Vec<String>>,
    header: String,
    pending_input: bool,
    cancelled: bool,
    context_windows: HashMap<String, u64>,
}

/// Counters and circuit breakers kept in memory as the host's memory store keeps them (both
/// update through [`crate::store`]), or a store that cannot be reached.
#[derive(Debug, Default)]
pub struct ScriptedCounters {
    values: Mutex<HashMap<String, f64>>,
    breakers: Mutex<HashMap<String, BreakerState>>,
    down: Option<String>,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl FakeHost {
    /// No history, the clock at 0, every random sample 0.5, ids `id-1`, `id-2`, ….
    pub fn new() -> FakeHost {
        let session = ScriptedSession {
            chains: Mutex::default(),
            last_turn_events: Mutex::default(),
            header: r#"{"type":"session","version":0,"id":"fake-session","createdAt":0,"delegationDepth":0}"#
                .to_owned(),
            pending_input: false,
            cancelled: false,
            context_windows: HashMap::new(),
        };
        let context = Context { session, services: ScriptedServices::default(), counters: ScriptedCounters::default() };
        FakeHost { context }
    }

    /// The shared counters' store cannot be reached: `counter_add` fails with `why`.
    pub fn store_down(mut self, why: &str) -> FakeHost {
        self.context.counters.down = Some(why.to_owned());
        self
    }

    /// The provider row of `route` declares this `contextWindow`.
    pub fn with_context_window(mut self, route: &str, tokens: u64) -> FakeHost {
        self.context.session.context_windows.insert(route.to_owned(), tokens);
        self
    }

    /// A circuit breaker's state, while the store keeps an entry for it (a closed circuit without
    /// failures has none, as in the host's stores).
    pub fn breaker_state(&self, key: &str) -> Option<BreakerState> {
        self.context.counters.breakers.lock().unwrap().get(key).cloned()
    }

    /// A shared counter's value, if it was ever touched.
    pub fn counter(&self, key: &str) -> Option<f64> {
        self.context.counters.values.lock().unwrap().get(key).copied()
    }

    /// The clock, in epoch milliseconds.
    pub fn at(self, now_ms: f64) -> FakeHost {
        self.context.services.set_now(now_ms);
        self
    }

    /// The random samples to hand out, in order (the last repeats; 0.5 when none was given).
    pub fn randoms(self, samples: impl IntoIterator<Item = f64>) -> FakeHost {
        self.context.services.push_randoms(samples);
        self
    }

    /// A chain whose last `llm/retry` is `retry`, under `retry_id`.
    pub fn with_chain(self, key: ChainKey<'_>, retry_id: &str, retry: u64) -> FakeHost {
        let chain = ChainRecord { retry_id: retry_id.into(), retry };
        self.context.session.chains.lock().unwrap().insert(chain_key(&key), chain);
        self
    }

    /// The events of the current turn, as JSON lines (`last_turn_events`).
    pub fn with_last_turn_events(self, events: impl IntoIterator<Item = impl Into<String>>) -> FakeHost {
        self.context.session.last_turn_events.lock().unwrap().extend(events.into_iter().map(Into::into));
        self
    }

    /// The session header line.
    pub fn with_header(mut self, header: &str) -> FakeHost {
        self.context.session.header = header.to_owned();
        self
    }

    /// The turn has been cancelled.
    pub fn cancelled(mut self) -> FakeHost {
        self.context.session.cancelled = true;
        self
    }

    /// Input is queued for the session.
    pub fn with_pending_input(mut self) -> FakeHost {
        self.context.session.pending_input = true;
        self
    }

    /// Moves the clock on.
    pub fn advance(&self, ms: f64) {
        let services = &self.context.services;
        services.set_now(services.now_ms() + ms);
    }

    /// The context to hand a plugin hook.
    pub fn context(&self) -> HostContextRef<'_> {
        self.context.as_abi()
    }

    /// Takes a retry the plugin decided into the history, as the host does once the record is
    /// durable: the record joins the turn's events, and its chain's last retry becomes this one.
    /// `Err` when the host would refuse the decision, with the message the host gives
    /// ([`check_row_decision`]). A record without `turn`, `step`, `provider` and `policyKey`
    /// starts no chain, as in the host's index.
    pub fn take_in(&self, decision: &RetryDecision) -> Result<(), String> {
        let checked = check_row_decision(decision)?;
        let session = &self.context.session;
        if let Some((key, chain)) = chain_of(&checked.record) {
            session.chains.lock().unwrap().insert(key, chain);
        }
        let time = js::number(self.context.services.now_ms());
        let line = format!(r#"{{"type":"llm/retry","seq":0,"time":{time},"data":{}}}"#, checked.record);
        session.last_turn_events.lock().unwrap().push(line);
        Ok(())
    }

    /// What the plugin logged, in order.
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.context.services.logs()
    }
}

fn chain_key(key: &ChainKey<'_>) -> (u64, u64, String, String) {
    (key.turn, key.step, key.provider.to_string(), key.policy_key.to_string())
}

/// The chain a checked record continues, read as the host's index reads it.
fn chain_of(record: &str) -> Option<((u64, u64, String, String), ChainRecord)> {
    let record: serde_json::Value = serde_json::from_str(record).ok()?;
    let number = |key: &str| record.get(key).and_then(js::as_safe_u64);
    let text = |key: &str| record.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    let key = (number("turn")?, number("step")?, text("provider")?, text("policyKey")?);
    Some((key, ChainRecord { retry_id: text("retryId")?.into(), retry: number("retry")? }))
}

impl Session for ScriptedSession {
    fn last_retry(&self, key: ChainKey<'_>) -> Option<ChainRecord> {
        self.chains.lock().unwrap().get(&chain_key(&key)).cloned()
    }

    fn last_turn_events(&self) -> RVec<RString> {
        self.last_turn_events.lock().unwrap().iter().map(|line| RString::from(line.as_str())).collect()
    }

    fn session_header(&self) -> RString {
        self.header.as_str().into()
    }

    fn has_pending_input(&self) -> bool {
        self.pending_input
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    fn route_context_window(&self, route: &str) -> Option<u64> {
        self.context_windows.get(route).copied()
    }
}

impl Counters for ScriptedCounters {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        if let Some(why) = &self.down {
            return Err(why.clone());
        }
        Ok(store::add_in(&mut self.values.lock().unwrap(), key, delta, initial, floor, ceiling))
    }

    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        if let Some(why) = &self.down {
            return Err(why.clone());
        }
        Ok(store::apply_in(&mut self.breakers.lock().unwrap(), key, event, policy, now_ms))
    }
}

/// A failure with `code` and HTTP `status`, its message saying so.
pub fn failure(code: &str, status: u32) -> Failure {
    let mut failure = Failure::new(code, format!("HTTP {status}"));
    failure.status = ROption::RSome(status);
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RequestErrorPayload;

    #[test]
    fn the_fake_host_answers_what_it_was_given_and_takes_in_retries() {
        let host = FakeHost::new().at(10.0).randoms([0.25]);
        let ctx = host.context();
        assert_eq!((ctx.now_ms(), ctx.random(), ctx.random()), (10.0, 0.25, 0.25));
        assert_eq!((ctx.new_id().as_str(), ctx.new_id().as_str()), ("id-1", "id-2"));
        let payload = RequestErrorPayload::new(1, 2, "relay", failure("SERVER", 503), None);
        let key = ChainKey::new(&payload, "k");
        assert!(ctx.last_retry(key).is_none());
        let record = r#"{"retryId":"r","turn":1,"step":2,"provider":"relay","policyKey":"k","retry":1,"delayMs":5}"#;
        host.take_in(&RetryDecision { delay_ms: 5.0, record: record.into() }).unwrap();
        assert_eq!(ctx.last_retry(key).into_option().map(|chain| chain.retry), Some(1));
        assert_eq!(ctx.last_turn_events().len(), 1);
        ctx.log(LogLevel::Warn, "careful".into());
        assert_eq!(host.logs(), [(LogLevel::Warn, "careful".to_owned())]);
    }

    #[test]
    fn take_in_refuses_what_the_host_refuses_with_the_hosts_message() {
        let host = FakeHost::new();
        let record = r#"{"retryId":"r","turn":1,"step":2,"provider":"relay","policyKey":"k","retry":1,"delayMs":5}"#;
        let differs = RetryDecision { delay_ms: 6.0, record: record.into() };
        assert_eq!(
            host.take_in(&differs),
            Err("returned a retry decision the host cannot carry out: its retry delay 6 differs from its record's delayMs 5".to_owned())
        );
        assert_eq!(host.take_in(&differs), check_row_decision(&differs).map(|_| ()));
        assert!(host.context().last_turn_events().is_empty(), "nothing of a refused decision is kept");
        let unkeyed = RetryDecision { delay_ms: 5.0, record: r#"{"retryId":"r","retry":1,"delayMs":5}"#.into() };
        assert_eq!(host.take_in(&unkeyed), Ok(()), "the host writes a record its index cannot key");
    }

    #[test]
    fn a_ceiling_below_the_floor_gives_the_hosts_answer_without_a_panic() {
        let host = FakeHost::new();
        let added = host.context().counter_add("k".into(), 1.0, 5.0, 3.0, 1.0).into_result();
        assert_eq!(added, Ok(store::clamped(5.0, 1.0, 3.0, 1.0)));
        assert_eq!(added, Ok(3.0));
    }

    #[test]
    fn a_circuit_closed_again_leaves_no_entry() {
        let host = FakeHost::new().at(1_000.0);
        let policy = BreakerPolicy { failures: 1, window_ms: 1_000.0, cooldown_ms: 100.0 };
        let ctx = host.context();
        assert!(ctx.breaker("route".into(), BreakerEvent::Admit, policy).into_result().unwrap().admitted);
        assert_eq!(host.breaker_state("route"), None, "admitting through a closed circuit stores nothing");
        ctx.breaker("route".into(), BreakerEvent::Failure, policy).into_result().unwrap();
        assert!(host.breaker_state("route").is_some_and(|state| state.open_until == 1_100.0));
        host.advance(100.0);
        assert!(ctx.breaker("route".into(), BreakerEvent::Admit, policy).into_result().unwrap().probe);
        ctx.breaker("route".into(), BreakerEvent::Success, policy).into_result().unwrap();
        assert_eq!(host.breaker_state("route"), None);
    }
}
