//! The one implementation of [`HostContext`]: a [`Context`] over the session it answers from, the
//! services that supply effects, and the counters of the row it serves. The host builds it over
//! the session log's index, the system's clock and the row's counter store; the author kit's
//! [`FakeHost`](crate::testing::FakeHost) builds the same type over scripted parts, so the two
//! cannot drift. A new context method is added to [`HostContext`] and implemented here, once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};

use crate::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy};
use crate::host::{HostContext, HostContextRef, HostContext_TO};
use crate::types::{ChainKey, ChainRecord, LogLevel};

/// What a call may ask of the session: its retry chains, recent events, header and state.
pub trait Session {
    /// The last `llm/retry` of a chain.
    fn last_retry(&self, key: ChainKey<'_>) -> Option<ChainRecord>;
    /// The events of the current (or last) turn, as JSON lines (see [`HostContext`]).
    fn last_turn_events(&self) -> RVec<RString>;
    /// The session header line.
    fn session_header(&self) -> RString;
    fn has_pending_input(&self) -> bool;
    fn is_cancelled(&self) -> bool;
    /// The `contextWindow` of the provider row serving `route`, when it declares one.
    fn route_context_window(&self, route: &str) -> Option<u64>;
}

/// Clock, randomness, ids and plugin logging.
pub trait Services: Send + Sync {
    /// Epoch milliseconds.
    fn now_ms(&self) -> f64;
    /// A sample in [0, 1].
    fn random(&self) -> f64;
    fn new_id(&self) -> String;
    fn log(&self, level: LogLevel, message: &str);
}

/// The shared counters of the row a call serves.
pub trait Counters {
    /// Adds `delta` to `key` (starting at `initial`), clamped to `[floor, ceiling]`; the new
    /// value, or why the store could not be reached.
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String>;
    /// Applies `event` at `now_ms` to the circuit breaker `key` (see [`crate::breaker`]).
    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String>;
}

impl<T: Session + ?Sized> Session for &T {
    fn last_retry(&self, key: ChainKey<'_>) -> Option<ChainRecord> {
        (**self).last_retry(key)
    }
    fn last_turn_events(&self) -> RVec<RString> {
        (**self).last_turn_events()
    }
    fn session_header(&self) -> RString {
        (**self).session_header()
    }
    fn has_pending_input(&self) -> bool {
        (**self).has_pending_input()
    }
    fn is_cancelled(&self) -> bool {
        (**self).is_cancelled()
    }
    fn route_context_window(&self, route: &str) -> Option<u64> {
        (**self).route_context_window(route)
    }
}

impl<T: Services + ?Sized> Services for &T {
    fn now_ms(&self) -> f64 {
        (**self).now_ms()
    }
    fn random(&self) -> f64 {
        (**self).random()
    }
    fn new_id(&self) -> String {
        (**self).new_id()
    }
    fn log(&self, level: LogLevel, message: &str) {
        (**self).log(level, message)
    }
}

impl<T: Counters + ?Sized> Counters for &T {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        (**self).add(key, delta, initial, floor, ceiling)
    }
    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        (**self).breaker(key, event, policy, now_ms)
    }
}

/// Counters of a call that serves no row: every add says so.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCounters;

impl Counters for NoCounters {
    fn add(&self, _: &str, _: f64, _: f64, _: f64, _: f64) -> Result<f64, String> {
        Err(NO_ROW.to_owned())
    }

    fn breaker(&self, _: &str, _: BreakerEvent, _: &BreakerPolicy, _: f64) -> Result<BreakerAnswer, String> {
        Err(NO_ROW.to_owned())
    }
}

const NO_ROW: &str = "this call belongs to no row, so it has no counter store";

/// Everything one plugin call may ask the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<S, E, C> {
    pub session: S,
    pub services: E,
    pub counters: C,
}

impl<S: Session, E: Services, C: Counters> Context<S, E, C> {
    /// The context as the FFI trait object handed to plugins.
    pub fn as_abi(&self) -> HostContextRef<'_> {
        HostContext_TO::from_ptr(RRef::new(self), TD_Opaque)
    }

    /// The same session and services, with the counters of one row.
    pub fn with_counters<D: Counters>(&self, counters: D) -> Context<S, E, D>
    where
        S: Copy,
        E: Copy,
    {
        Context { session: self.session, services: self.services, counters }
    }
}

impl<S: Session, E: Services, C: Counters> HostContext for Context<S, E, C> {
    fn last_retry(&self, key: ChainKey<'_>) -> ROption<ChainRecord> {
        self.session.last_retry(key).into()
    }

    fn last_turn_events(&self) -> RVec<RString> {
        self.session.last_turn_events()
    }

    fn session_header(&self) -> RString {
        self.session.session_header()
    }

    fn has_pending_input(&self) -> bool {
        self.session.has_pending_input()
    }

    fn is_cancelled(&self) -> bool {
        self.session.is_cancelled()
    }

    fn now_ms(&self) -> f64 {
        self.services.now_ms()
    }

    fn random(&self) -> f64 {
        self.services.random().clamp(0.0, 1.0)
    }

    fn new_id(&self) -> RString {
        self.services.new_id().into()
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        self.services.log(level, message.as_str());
    }

    fn counter_add(&self, key: RStr<'_>, delta: f64, initial: f64, floor: f64, ceiling: f64) -> RResult<f64, RString> {
        self.counters.add(key.as_str(), delta, initial, floor, ceiling).map_err(RString::from).into()
    }

    fn breaker(&self, key: RStr<'_>, event: BreakerEvent, policy: BreakerPolicy) -> RResult<BreakerAnswer, RString> {
        let now = self.services.now_ms();
        self.counters.breaker(key.as_str(), event, &policy, now).map_err(RString::from).into()
    }

    fn route_context_window(&self, route: RStr<'_>) -> ROption<u64> {
        self.session.route_context_window(route.as_str()).into()
    }
}

/// Deterministic services for tests and simulations: random samples served from a script (the
/// last one repeats; 0.5 when none), ids counting up (`id-1`, `id-2`, …), a clock that moves only
/// when told (it starts at the epoch), and log lines kept.
#[derive(Debug, Default)]
pub struct ScriptedServices {
    randoms: Mutex<VecDeque<f64>>,
    last_random: Mutex<Option<f64>>,
    used: Mutex<Vec<f64>>,
    next_id: AtomicU64,
    now_ms: Mutex<f64>,
    logs: Mutex<Vec<(LogLevel, String)>>,
}

impl ScriptedServices {
    pub fn with_randoms(randoms: impl IntoIterator<Item = f64>) -> Self {
        ScriptedServices { randoms: Mutex::new(randoms.into_iter().collect()), ..Default::default() }
    }

    /// More random samples to hand out, after those not yet served.
    pub fn push_randoms(&self, randoms: impl IntoIterator<Item = f64>) {
        self.randoms.lock().unwrap().extend(randoms);
    }

    /// Sets the clock (epoch milliseconds).
    pub fn set_now(&self, now_ms: f64) {
        *self.now_ms.lock().unwrap() = now_ms;
    }

    /// The random samples handed out so far.
    pub fn randoms_used(&self) -> Vec<f64> {
        self.used.lock().unwrap().clone()
    }

    /// What was logged, in order.
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.logs.lock().unwrap().clone()
    }
}

impl Services for ScriptedServices {
    fn now_ms(&self) -> f64 {
        *self.now_ms.lock().unwrap()
    }

    fn random(&self) -> f64 {
        let mut last = self.last_random.lock().unwrap();
        let sample = self.randoms.lock().unwrap().pop_front().or(*last).unwrap_or(0.5);
        *last = Some(sample);
        self.used.lock().unwrap().push(sample);
        sample
    }

    fn new_id(&self) -> String {
        format!("id-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.logs.lock().unwrap().push((level, message.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_randomness_repeats_its_last_sample_and_records_what_it_served() {
        let services = ScriptedServices::with_randoms([0.0, 1.0]);
        let served: Vec<f64> = (0..3).map(|_| services.random()).collect();
        assert_eq!(served, vec![0.0, 1.0, 1.0]);
        assert_eq!(services.randoms_used(), served);
        assert_eq!(ScriptedServices::default().random(), 0.5);
    }

    #[test]
    fn a_call_that_serves_no_row_has_no_counters() {
        let context = Context { session: NoSession, services: ScriptedServices::default(), counters: NoCounters };
        let added = context.as_abi().counter_add("k".into(), 1.0, 0.0, 0.0, 10.0).into_result();
        assert_eq!(added.unwrap_err().as_str(), "this call belongs to no row, so it has no counter store");
        let policy = crate::breaker::BreakerPolicy { failures: 1, window_ms: 1.0, cooldown_ms: 1.0 };
        let breaker = context.as_abi().breaker("k".into(), crate::breaker::BreakerEvent::Admit, policy).into_result();
        assert_eq!(breaker.unwrap_err().as_str(), "this call belongs to no row, so it has no counter store");
    }

    struct NoSession;

    impl Session for NoSession {
        fn last_retry(&self, _: ChainKey<'_>) -> Option<ChainRecord> {
            None
        }
        fn last_turn_events(&self) -> RVec<RString> {
            RVec::new()
        }
        fn session_header(&self) -> RString {
            RString::new()
        }
        fn has_pending_input(&self) -> bool {
            false
        }
        fn is_cancelled(&self) -> bool {
            false
        }
        fn route_context_window(&self, _: &str) -> Option<u64> {
            None
        }
    }
}
