//! The host side of the plugin call context: what a plugin may ask during a call (history, the
//! clock, randomness, ids, cancellation, logging), and the [`Services`] that supply the effects so
//! tests and simulations can fix them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{ROption, RResult, RStr, RString, RVec};
use dsh_abi::{ChainKey, ChainRecord, HostContext, HostContextRef, HostContext_TO, LogLevel};

use crate::session::index::HistoryIndex;

/// Clock, randomness, ids and plugin logging.
pub trait Services: Send + Sync {
    /// Epoch milliseconds.
    fn now_ms(&self) -> f64;
    /// A sample in [0, 1].
    fn random(&self) -> f64;
    fn new_id(&self) -> String;
    fn log(&self, level: LogLevel, message: &str);
}

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
        uuid::Builder::from_random_bytes(rand::random()).into_uuid().to_string()
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

/// Deterministic services for tests: random samples are served from a script (the last one
/// repeats; 0.5 when none), ids count up (`id-1`, `id-2`, …), the clock stands still at the
/// epoch, and log lines are kept.
#[derive(Debug, Default)]
pub struct ScriptedServices {
    randoms: Mutex<VecDeque<f64>>,
    last_random: Mutex<Option<f64>>,
    used: Mutex<Vec<f64>>,
    next_id: AtomicU64,
    logs: Mutex<Vec<(LogLevel, String)>>,
}

impl ScriptedServices {
    pub fn with_randoms(randoms: impl IntoIterator<Item = f64>) -> Self {
        ScriptedServices { randoms: Mutex::new(randoms.into_iter().collect()), ..Default::default() }
    }

    /// The random samples handed out so far.
    pub fn randoms_used(&self) -> Vec<f64> {
        self.used.lock().unwrap().clone()
    }

    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.logs.lock().unwrap().clone()
    }
}

impl Services for ScriptedServices {
    fn now_ms(&self) -> f64 {
        0.0
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

/// Everything one plugin call may ask the host, borrowed for the duration of the call.
pub struct CallContext<'a> {
    pub history: &'a HistoryIndex,
    pub cancelled: &'a AtomicBool,
    pub pending_input: bool,
    pub services: &'a dyn Services,
}

impl CallContext<'_> {
    /// The context as the FFI trait object handed to plugins.
    pub fn as_abi(&self) -> HostContextRef<'_> {
        HostContext_TO::from_ptr(self, TD_Opaque)
    }
}

impl HostContext for CallContext<'_> {
    fn last_retry(&self, key: ChainKey<'_>) -> ROption<ChainRecord> {
        self.history.last_retry(key).cloned().into()
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

    /// Rows reach their counters through their own context (the row's store); a call that
    /// comes here belongs to no row.
    fn counter_add(&self, _: RStr<'_>, _: f64, _: f64, _: f64, _: f64) -> RResult<f64, RString> {
        RResult::RErr("this call belongs to no row, so it has no counter store".into())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dsh_abi::{Failure, RequestErrorPayload};

    /// A session-less host for unit tests.
    #[derive(Default)]
    pub(crate) struct TestHost {
        pub history: HistoryIndex,
        pub cancelled: AtomicBool,
        pub services: ScriptedServices,
    }

    impl TestHost {
        pub fn cancel(&self) {
            self.cancelled.store(true, Ordering::SeqCst);
        }

        pub fn context(&self) -> CallContext<'_> {
            CallContext {
                history: &self.history,
                cancelled: &self.cancelled,
                pending_input: false,
                services: &self.services,
            }
        }

        pub fn payload() -> RequestErrorPayload {
            RequestErrorPayload {
                model: Default::default(),
                endpoint_host: Default::default(),
                turn: 1,
                step: 1,
                provider: "mock".into(),
                failure: Failure::new("SERVER", "HTTP 503"),
                retry_policy: ROption::RNone,
            }
        }
    }

    #[test]
    fn scripted_randomness_repeats_its_last_sample_and_records_what_it_served() {
        let services = ScriptedServices::with_randoms([0.0, 1.0]);
        let served: Vec<f64> = (0..3).map(|_| services.random()).collect();
        assert_eq!(served, vec![0.0, 1.0, 1.0]);
        assert_eq!(services.randoms_used(), served);
    }
}
