//! The host context: what a plugin may ask the host during a call.
//!
//! Clock, randomness and ids come from the host, so tests can fix them; history queries are
//! answered from the host's index of the durable session log, never by a scan.

use abi_stable::sabi_trait;
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};

use crate::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy};
use crate::types::{ChainKey, ChainRecord, LogLevel};

#[sabi_trait]
pub trait HostContext {
    /// The last `llm/retry` of a chain, in constant time.
    fn last_retry(&self, key: ChainKey<'_>) -> ROption<ChainRecord>;

    /// The events of the current turn, or of the last turn when none is open, as JSON lines
    /// (the whole envelope), oldest first — all but streamed chunks (`assistant/chunk`) and
    /// failed attempts (`assistant/attempt`), whose text has no bound.
    fn last_turn_events(&self) -> RVec<RString>;

    /// The session header line (JSON).
    fn session_header(&self) -> RString;

    /// Whether input is already queued for the session and not yet turned into a turn.
    fn has_pending_input(&self) -> bool;

    /// Whether the current turn has been cancelled.
    fn is_cancelled(&self) -> bool;

    /// Epoch milliseconds.
    fn now_ms(&self) -> f64;

    /// A sample in [0, 1].
    fn random(&self) -> f64;

    /// A fresh unique id (UUID v4 in production).
    fn new_id(&self) -> RString;

    #[sabi(last_prefix_field)]
    fn log(&self, level: LogLevel, message: RStr<'_>);

    /// Adds `delta` to the shared counter `key` of the store the calling row's config names
    /// (`store: memory | machine | redis://HOST:PORT`; memory when it names none), clamped to
    /// `[floor, ceiling]` — a counter never touched starts at `initial` — and returns the new
    /// value. One atomic step, however many processes share the store. `Err` says why the store
    /// could not be reached. (Added after ABI version 2.)
    fn counter_add(&self, key: RStr<'_>, delta: f64, initial: f64, floor: f64, ceiling: f64) -> RResult<f64, RString>;

    /// Applies `event` to the circuit breaker `key` in the store the calling row's config names
    /// (see [`crate::breaker`]), at the host's clock, atomically across every process sharing
    /// the store. `Err` says why the store could not be reached. (Added after ABI version 2.)
    fn breaker(&self, key: RStr<'_>, event: BreakerEvent, policy: BreakerPolicy) -> RResult<BreakerAnswer, RString>;

    /// The `contextWindow` (tokens) of the provider row serving `route`; `None` when the row
    /// declares none or no row serves it. (Added after ABI version 2.)
    fn route_context_window(&self, route: RStr<'_>) -> ROption<u64>;
}

/// The borrowed form in which the host hands its context to a plugin call.
pub type HostContextRef<'a> = HostContext_TO<'a, RRef<'a, ()>>;
