//! The host side of the plugin call context: the session state a call answers from (the log's
//! index, cancellation, queued input) and the system's [`Services`] (clock, randomness, ids,
//! logging). The context itself is `dsh_abi`'s [`Context`], the one the author kit's fake host
//! uses too; tests and simulations fix the effects with [`ScriptedServices`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use abi_stable::std_types::{RString, RVec};
pub use dsh_abi::context::{Context, NoCounters, ScriptedServices, Services, Session};
use dsh_abi::{ChainKey, ChainRecord, LogLevel};

use dsh_session::index::HistoryIndex;

/// The real clock, a real RNG, UUID v4 ids and logging through `tracing`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemServices;

/// Milliseconds since the Unix epoch, whole, as the session log writes them.
pub fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Services for SystemServices {
    fn now_ms(&self) -> f64 {
        epoch_ms() as f64
    }

    fn random(&self) -> f64 {
        rand::random::<f64>()
    }

    fn new_id(&self) -> String {
        // A version-4 UUID from the thread's generator (seeded from the OS), without a system
        // call per id.
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).to_owned()
    }

    fn log(&self, level: LogLevel, message: &str) {
        match level {
            LogLevel::Debug => tracing::debug!(target: "dsh::plugin", "{message}"),
            LogLevel::Info => tracing::info!(target: "dsh::plugin", "{message}"),
            LogLevel::Warn => tracing::warn!(target: "dsh::plugin", "{message}"),
            LogLevel::Error => tracing::error!(target: "dsh::plugin", "{message}"),
        }
    }
}

/// The session side of a call: the log's index, the turn's cancellation, queued input.
#[derive(Clone, Copy)]
pub struct CallState<'a> {
    pub history: &'a HistoryIndex,
    pub cancelled: &'a AtomicBool,
    pub pending_input: bool,
    /// The routes whose `contextWindow` a call may ask for (none outside a running agent).
    pub routes: Option<&'a dyn ContextWindows>,
}

/// The `contextWindow` each route's provider row declares.
pub trait ContextWindows: Sync {
    fn context_window(&self, route: &str) -> Option<u64>;
}

impl Session for CallState<'_> {
    fn last_retry(&self, key: ChainKey<'_>) -> Option<ChainRecord> {
        self.history.last_retry(key).cloned()
    }

    fn last_turn_events(&self) -> RVec<RString> {
        self.history.last_turn_events().iter().map(|line| RString::from(line.as_str())).collect()
    }

    fn session_header(&self) -> RString {
        self.history.header().into()
    }

    fn has_pending_input(&self) -> bool {
        self.pending_input
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    fn route_context_window(&self, route: &str) -> Option<u64> {
        self.routes?.context_window(route)
    }
}

/// Everything one plugin call may ask the host, borrowed for the duration of the call; a row's
/// call adds its counters ([`Context::with_counters`]).
pub type CallContext<'a> = Context<CallState<'a>, &'a dyn Services, NoCounters>;

/// The context of a call over `history`, answered with `services`.
pub fn call_context<'a>(
    history: &'a HistoryIndex,
    cancelled: &'a AtomicBool,
    pending_input: bool,
    services: &'a dyn Services,
) -> CallContext<'a> {
    Context { session: CallState { history, cancelled, pending_input, routes: None }, services, counters: NoCounters }
}

/// A host over no session log, its effects scripted: `config explain`'s questions, tests, and
/// benchmarks of the waterfall.
#[derive(Default)]
pub struct SessionlessHost {
    pub history: HistoryIndex,
    pub cancelled: AtomicBool,
    pub services: ScriptedServices,
}

impl SessionlessHost {
    /// The turn is cancelled.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    pub fn context(&self) -> CallContext<'_> {
        call_context(&self.history, &self.cancelled, false, &self.services)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_ids_are_fresh_lowercase_version_4_uuids() {
        let (first, second) = (SystemServices.new_id(), SystemServices.new_id());
        let parsed = uuid::Uuid::parse_str(&first).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(first, parsed.hyphenated().to_string());
        assert_ne!(first, second);
    }
}
