//! One plugin instance serving one configured row.
//!
//! The wrapper keeps the instance's fault state: after a panic the instance is marked faulted and
//! is not called again (its state may be broken). A faulted request-error listener passes every
//! later failure on, so one broken plugin does not switch off the recovery of the others; its
//! other hooks answer with an error that says it is faulted. The instance is disposed when the
//! row is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr};
use dsh_abi::ffi::{DownstreamRepr_NE, RequestErrorRef, RequestError_TO, SessionStartRepr_NE};
use dsh_abi::{
    Answer, CheckerObject, Continuation, Decision, DownstreamOutcome, Hooks, HostContextRef, PluginError,
    PluginInstanceObject, RequestErrorPayload, RequestSuccess, SessionStartSource,
};

use crate::context::CallContext;
use crate::counters::CounterStore;
use crate::waterfall::{Listener, ListenerError};
use dsh_abi::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy};
use dsh_abi::context::Counters;

/// Runs `calls` into plugin rows, which may wait on their store's file lock or socket
/// (`may_wait`), without stalling the other tasks of the runtime worker it runs on.
pub fn call_rows<T>(may_wait: bool, calls: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi_thread =
        || Handle::try_current().is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::MultiThread);
    if may_wait && multi_thread() {
        tokio::task::block_in_place(calls)
    } else {
        calls()
    }
}

pub struct RowInstance {
    row_id: String,
    package: String,
    hooks: Hooks,
    object: PluginInstanceObject,
    faulted: AtomicBool,
    /// The counters the row's config names, when its manifest asks for them.
    store: Option<Arc<dyn CounterStore>>,
}

/// The counters of one row: its store, when its manifest asks for one.
struct RowCounters<'r> {
    row_id: &'r str,
    store: Option<&'r dyn CounterStore>,
}

impl Counters for RowCounters<'_> {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        self.store()?.add(key, delta, initial, floor, ceiling)
    }

    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        self.store()?.breaker(key, event, policy, now_ms)
    }
}

impl<'r> RowCounters<'r> {
    fn store(&self) -> Result<&'r dyn CounterStore, String> {
        self.store.ok_or_else(|| {
            format!("row \"{}\" has no counters: its manifest does not ask for them (counters)", self.row_id)
        })
    }
}

impl RowInstance {
    pub fn new(row_id: &str, package: &str, hooks: Hooks, object: PluginInstanceObject) -> Self {
        RowInstance {
            row_id: row_id.to_owned(),
            package: package.to_owned(),
            hooks,
            object,
            faulted: AtomicBool::new(false),
            store: None,
        }
    }

    /// The row's counters are in `store`.
    pub fn with_store(mut self, store: Arc<dyn CounterStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Whether a call into the row may wait on its counter store's I/O.
    pub fn may_wait(&self) -> bool {
        self.store.as_ref().is_some_and(|store| store.may_wait())
    }

    /// Runs `call` with the context the row's plugin gets.
    fn in_context<T>(&self, ctx: &CallContext<'_>, call: impl FnOnce(HostContextRef<'_>) -> T) -> T {
        let row = ctx.with_counters(RowCounters { row_id: &self.row_id, store: self.store.as_deref() });
        call(row.as_abi())
    }

    /// Tells the row a request was answered (`agent/request-success`).
    pub fn on_request_success(&self, success: &RequestSuccess, ctx: &CallContext<'_>) -> Result<(), ListenerError> {
        self.call("agent/request-success", || {
            self.in_context(ctx, |ctx| {
                self.object.on_request_success(
                    success.turn,
                    success.step,
                    success.provider.as_rstr(),
                    success.endpoint_host.as_rstr(),
                    ctx,
                )
            })
        })
    }

    /// Asks the row which route turn `turn` starts on (`agent/route`).
    pub fn choose_route(&self, turn: u64, ctx: &CallContext<'_>) -> Result<Option<String>, ListenerError> {
        self.call("agent/route", || self.in_context(ctx, |ctx| self.object.choose_route(turn, ctx)))
            .map(|route| route.into_option().map(|route| route.into_string()))
    }

    pub fn row_id(&self) -> &str {
        &self.row_id
    }

    pub fn package(&self) -> &str {
        &self.package
    }

    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    pub fn is_faulted(&self) -> bool {
        self.faulted.load(Ordering::Relaxed)
    }

    /// Calls the instance and reads its answer from its growable form (`read`): an answer this
    /// build cannot read (a variant of a newer interface) is the call's failure.
    fn call_reading<R, T>(
        &self,
        hook: &str,
        call: impl FnOnce() -> RResult<R, PluginError>,
        read: impl FnOnce(R) -> Result<T, String>,
    ) -> Result<T, ListenerError> {
        let answer = self.call(hook, call)?;
        read(answer).map_err(|message| ListenerError { panicked: false, message: format!("{hook} failed: {message}") })
    }

    fn call<T>(&self, hook: &str, call: impl FnOnce() -> RResult<T, PluginError>) -> Result<T, ListenerError> {
        if self.is_faulted() {
            return Err(ListenerError {
                panicked: false,
                message: format!("{hook}: the instance is faulted (it panicked earlier) and is no longer called"),
            });
        }
        match call() {
            ROk(value) => Ok(value),
            RErr(err) => {
                if err.panicked {
                    self.faulted.store(true, Ordering::Relaxed);
                }
                let what = if err.panicked { "panicked" } else { "failed" };
                Err(ListenerError { panicked: err.panicked, message: format!("{hook} {what}: {}", err.message) })
            }
        }
    }

    pub fn on_session_start(
        &self,
        source: SessionStartSource,
        ctx: &CallContext<'_>,
    ) -> Result<Option<Continuation>, ListenerError> {
        self.call("agent/session-start", || {
            self.in_context(ctx, |ctx| self.object.on_session_start(SessionStartRepr_NE::from(source), ctx))
        })
        .map(ROption::into_option)
    }

    pub fn open_checker(&self, header: &str) -> Result<Option<CheckerObject>, ListenerError> {
        self.call("session/check", || self.object.open_checker(RStr::from_str(header))).map(ROption::into_option)
    }
}

impl Listener for RowInstance {
    fn row_id(&self) -> &str {
        RowInstance::row_id(self)
    }

    fn on_request_error(&self, payload: &RequestErrorPayload, ctx: &CallContext<'_>) -> Result<Answer, ListenerError> {
        if self.is_faulted() {
            return Ok(Answer::Pass);
        }
        self.call_reading(
            "agent/request-error listener",
            || self.in_context(ctx, |ctx| self.object.on_request_error(view(payload), ctx)),
            Answer::try_from,
        )
    }

    /// The outcome crosses the boundary by move and comes back the same way: lent, not copied.
    fn after_downstream(
        &self,
        payload: &RequestErrorPayload,
        ctx: &CallContext<'_>,
        outcome: &mut DownstreamOutcome,
    ) -> Result<Decision, ListenerError> {
        let lent = DownstreamRepr_NE::from(std::mem::replace(outcome, DownstreamOutcome::Cancelled));
        let decision = self.call_reading(
            "agent/request-error after_downstream",
            || self.in_context(ctx, |ctx| self.object.after_downstream(view(payload), ctx, &lent)),
            Decision::try_from,
        );
        *outcome = DownstreamOutcome::try_from(lent).expect("an outcome the host made reads back");
        decision
    }
}

/// The payload as a plugin reads it: through accessors.
fn view(payload: &RequestErrorPayload) -> RequestErrorRef<'_> {
    RequestError_TO::from_ptr(RRef::new(payload), TD_Opaque)
}

impl Drop for RowInstance {
    fn drop(&mut self) {
        self.object.dispose();
    }
}
