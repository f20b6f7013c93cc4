//! The Rust side of a plugin: the traits plugin authors implement, the guards that turn them into
//! FFI trait objects, and [`export_plugin!`](crate::export_plugin).
//!
//! Every entry point runs inside `catch_unwind` here, in the plugin's own copy of std, so a panic
//! becomes a [`PluginError`] value and never unwinds across the boundary (which would abort the
//! host). Plugins must keep `panic = "unwind"`.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RBox, RErr, ROk, ROption, RResult, RStr, RString, RVec};

use crate::config::Schema;
use crate::ffi::{
    AnswerRepr_NE, DecisionRepr_NE, DownstreamRepr_NE, RequestErrorRef, SessionStartRepr_NE, VerdictRepr_NE,
};
use crate::host::HostContextRef;
use crate::instance::{
    CheckerObject, PluginInstance, PluginInstanceObject, PluginInstance_TO, SessionChecker, SessionChecker_TO,
};
use crate::types::{
    Answer, ConfigError, Continuation, Decision, DownstreamOutcome, EventRef, Hooks, InstantiateError, Manifest,
    PluginError, RequestErrorPayload, RequestSuccess, SessionStartSource, Verdict,
};

/// A plugin instance for one configured row. Every hook is optional; the manifest's [`Hooks`]
/// tell the host which ones to call.
pub trait Plugin: Send + Sync + 'static {
    /// Offered every request failure, outermost listener first.
    fn on_request_error(&self, _payload: &RequestErrorPayload, _ctx: &HostContextRef<'_>) -> Result<Answer, String> {
        Ok(Answer::Pass)
    }

    /// Called after [`Answer::DelegateFirst`] with what the rest of the chain answered. The
    /// default passes a downstream retry through unchanged.
    fn after_downstream(
        &self,
        _payload: &RequestErrorPayload,
        _ctx: &HostContextRef<'_>,
        outcome: &DownstreamOutcome,
    ) -> Result<Decision, String> {
        Ok(match outcome {
            DownstreamOutcome::Retried(retry) => Decision::Retry(retry.clone()),
            DownstreamOutcome::Switched(switch) => Decision::Switch(switch.clone()),
            _ => Decision::NoRetry,
        })
    }

    /// Raised when a session starts; may ask the host to enqueue one continuation message.
    fn on_session_start(
        &self,
        _source: SessionStartSource,
        _ctx: &HostContextRef<'_>,
    ) -> Result<Option<Continuation>, String> {
        Ok(None)
    }

    /// A streaming checker for one session, given its header line.
    fn open_checker(&self, _header: &str) -> Result<Option<Box<dyn Checker>>, String> {
        Ok(None)
    }

    /// Told of every request that was answered (hook `agent/request-success`, a dsh extension).
    fn on_request_success(&self, _success: &RequestSuccess, _ctx: &HostContextRef<'_>) -> Result<(), String> {
        Ok(())
    }

    /// Asked which route turn `turn` starts on (hook `agent/route`, a dsh extension); `None`
    /// leaves it to the agent row.
    fn choose_route(&self, _turn: u64, _ctx: &HostContextRef<'_>) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// Release whatever the instance holds; it is dropped right after.
    fn dispose(&mut self) {}
}

/// Lets a row warn once per turn about one cause (a store that cannot be reached, say), however
/// many of the turn's calls meet it: [`OncePerTurn::first`] is true for the first call of each
/// turn of each session.
#[derive(Debug, Default)]
pub struct OncePerTurn {
    last: std::sync::Mutex<Option<(String, u64)>>,
}

impl OncePerTurn {
    /// Whether this is the first time in `turn` of the session `ctx` serves.
    pub fn first(&self, ctx: &HostContextRef<'_>, turn: u64) -> bool {
        let session = ctx.session_header().into_string();
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.as_ref().is_some_and(|(seen, seen_turn)| *seen == session && *seen_turn == turn) {
            return false;
        }
        *last = Some((session, turn));
        true
    }
}

/// A per-session streaming checker.
pub trait Checker: Send + 'static {
    fn check_event(&mut self, event: &EventRef<'_>) -> Verdict;
}

impl Manifest {
    /// A manifest for this interface version; its config keys are the schema's.
    pub fn new(name: &str, version: &str, hooks: Hooks, description: &str, config: &Schema) -> Manifest {
        Manifest {
            name: name.into(),
            version: version.into(),
            abi_version: crate::ABI_VERSION,
            hooks,
            description: description.into(),
            config_keys: config.manifest_keys(),
        }
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

fn guarded<T>(call: impl FnOnce() -> Result<T, String>) -> RResult<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => ROk(value),
        Ok(Err(message)) => RErr(PluginError::failed(message)),
        Err(payload) => RErr(PluginError::panicked(panic_message(payload))),
    }
}

/// A plugin behind the panic guard.
struct GuardedPlugin<P> {
    plugin: P,
}

thread_local! {
    /// The payload this thread's calls into this library read their views into, reusing its
    /// memory: a call allocates nothing to hand the plugin its payload, and takes no lock.
    static KEPT_PAYLOAD: RefCell<Option<RequestErrorPayload>> = const { RefCell::new(None) };
}

/// Runs `call` with `view` read into this thread's kept payload (or into a fresh one, when a call
/// on this thread already holds it).
fn with_payload<T>(view: &RequestErrorRef<'_>, call: impl FnOnce(&RequestErrorPayload) -> T) -> T {
    KEPT_PAYLOAD.with(|kept| match kept.try_borrow_mut() {
        Ok(mut kept) => {
            let payload = kept.get_or_insert_with(|| RequestErrorPayload::from_view(view));
            payload.read_view(view);
            call(payload)
        }
        Err(_) => call(&RequestErrorPayload::from_view(view)),
    })
}

impl<P: Plugin> PluginInstance for GuardedPlugin<P> {
    fn on_request_error(
        &self,
        payload: RequestErrorRef<'_>,
        ctx: HostContextRef<'_>,
    ) -> RResult<AnswerRepr_NE, PluginError> {
        guarded(|| {
            with_payload(&payload, |payload| self.plugin.on_request_error(payload, &ctx)).map(AnswerRepr_NE::from)
        })
    }

    fn after_downstream(
        &self,
        payload: RequestErrorRef<'_>,
        ctx: HostContextRef<'_>,
        outcome: &DownstreamRepr_NE,
    ) -> RResult<DecisionRepr_NE, PluginError> {
        guarded(|| {
            let outcome = DownstreamOutcome::try_from(outcome.clone())?;
            with_payload(&payload, |payload| self.plugin.after_downstream(payload, &ctx, &outcome))
                .map(DecisionRepr_NE::from)
        })
    }

    fn on_session_start(
        &self,
        source: SessionStartRepr_NE,
        ctx: HostContextRef<'_>,
    ) -> RResult<ROption<Continuation>, PluginError> {
        guarded(|| {
            let source = SessionStartSource::try_from(source)?;
            self.plugin.on_session_start(source, &ctx).map(ROption::from)
        })
    }

    fn open_checker(&self, header: RStr<'_>) -> RResult<ROption<CheckerObject>, PluginError> {
        guarded(|| {
            let checker = self.plugin.open_checker(header.as_str())?;
            Ok(checker.map(|checker| SessionChecker_TO::from_ptr(RBox::new(GuardedChecker(checker)), TD_Opaque)).into())
        })
    }

    fn dispose(&mut self) {
        // A panic while disposing has nowhere useful to go; the instance is dropped either way.
        let _ = catch_unwind(AssertUnwindSafe(|| self.plugin.dispose()));
    }

    fn on_request_success(
        &self,
        turn: u64,
        step: u64,
        provider: RStr<'_>,
        endpoint_host: RStr<'_>,
        ctx: HostContextRef<'_>,
    ) -> RResult<(), PluginError> {
        guarded(|| {
            let success = RequestSuccess { turn, step, provider: provider.into(), endpoint_host: endpoint_host.into() };
            self.plugin.on_request_success(&success, &ctx)
        })
    }

    fn choose_route(&self, turn: u64, ctx: HostContextRef<'_>) -> RResult<ROption<RString>, PluginError> {
        guarded(|| self.plugin.choose_route(turn, &ctx).map(|route| route.map(RString::from).into()))
    }
}

struct GuardedChecker(Box<dyn Checker>);

impl SessionChecker for GuardedChecker {
    fn check_event(&mut self, event: EventRef<'_>) -> RResult<VerdictRepr_NE, PluginError> {
        guarded(|| Ok(self.0.check_event(&event).into()))
    }
}

/// Runs a plugin's manifest function under the panic guard. Used by [`export_plugin!`](crate::export_plugin).
#[doc(hidden)]
pub fn guard_manifest(manifest: fn() -> Manifest) -> RResult<Manifest, PluginError> {
    guarded(|| Ok(manifest()))
}

/// Panics under the panic guard, so the host can tell a library that unwinds (this returns the
/// caught panic) from one built with `panic = "abort"` (the process aborts). Used by
/// [`export_plugin!`](crate::export_plugin).
#[doc(hidden)]
pub fn guard_unwinding() -> RResult<(), PluginError> {
    guarded(|| -> Result<(), String> { std::panic::resume_unwind(Box::new("dsh: unwinding check")) })
}

/// Parses the row config and runs a plugin's constructor under the panic guard. Used by
/// [`export_plugin!`](crate::export_plugin).
#[doc(hidden)]
pub fn guard_instantiate<P: Plugin>(
    row_id: RStr<'_>,
    config_json: RStr<'_>,
    instantiate: fn(&str, &serde_json::Value) -> Result<P, Vec<ConfigError>>,
) -> RResult<PluginInstanceObject, InstantiateError> {
    let built = catch_unwind(AssertUnwindSafe(|| {
        let config: serde_json::Value = serde_json::from_str(config_json.as_str())
            .map_err(|err| vec![ConfigError::new("", format!("config is not valid JSON: {err}"))])?;
        instantiate(row_id.as_str(), &config)
    }));
    match built {
        Ok(Ok(plugin)) => ROk(PluginInstance_TO::from_ptr(RBox::new(GuardedPlugin { plugin }), TD_Opaque)),
        Ok(Err(errors)) => RErr(InstantiateError::Config(errors.into_iter().collect::<RVec<_>>())),
        Err(payload) => RErr(InstantiateError::Failed(PluginError::panicked(panic_message(payload)))),
    }
}

/// Exports a plugin library: its root module, with every entry point behind the panic guard.
///
/// ```ignore
/// dsh_abi::export_plugin! {
///     manifest = my_manifest,        // fn() -> dsh_abi::Manifest
///     instantiate = MyPlugin::new,   // fn(&str, &serde_json::Value) -> Result<MyPlugin, Vec<ConfigError>>
/// }
/// ```
///
/// Everything the expansion names comes through `dsh_abi` (a plugin crate needs no direct
/// `abi_stable` dependency): it declares the library header abi_stable's loader looks for, as
/// `#[abi_stable::export_root_module]` would, with the root module's type layout checked at load.
#[macro_export]
macro_rules! export_plugin {
    (manifest = $manifest:path, instantiate = $instantiate:path $(,)?) => {
        fn dsh_plugin_root_module() -> $crate::PluginModuleRef {
            use $crate::reexports::abi_stable::prefix_type::PrefixTypeTrait;
            $crate::PluginModule {
                manifest: dsh_plugin_manifest,
                instantiate: dsh_plugin_instantiate,
                check_unwinding: dsh_plugin_check_unwinding,
            }
            .leak_into_prefix()
        }

        /// The library header abi_stable's loader reads (its name is abi_stable's, mangled).
        #[no_mangle]
        #[allow(non_upper_case_globals)]
        pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::reexports::abi_stable::library::LibHeader = {
            extern "C" fn erased_root_module() -> $crate::reexports::abi_stable::library::RootModuleResult {
                $crate::reexports::abi_stable::library::__call_root_module_loader(dsh_plugin_root_module)
            }
            // SAFETY: the header is built from the root module constructor above, whose type is
            // the interface's root module, as `#[export_root_module]` builds it.
            unsafe {
                $crate::reexports::abi_stable::library::LibHeader::from_constructor::<$crate::PluginModuleRef>(
                    erased_root_module,
                    $crate::reexports::abi_stable::library::CheckTypeLayout::Yes,
                )
            }
        };

        extern "C" fn dsh_plugin_check_unwinding(
        ) -> $crate::reexports::abi_stable::std_types::RResult<(), $crate::PluginError> {
            $crate::plugin::guard_unwinding()
        }

        extern "C" fn dsh_plugin_manifest(
        ) -> $crate::reexports::abi_stable::std_types::RResult<$crate::Manifest, $crate::PluginError> {
            $crate::plugin::guard_manifest($manifest)
        }

        extern "C" fn dsh_plugin_instantiate(
            row_id: $crate::reexports::abi_stable::std_types::RStr<'_>,
            config_json: $crate::reexports::abi_stable::std_types::RStr<'_>,
        ) -> $crate::reexports::abi_stable::std_types::RResult<$crate::PluginInstanceObject, $crate::InstantiateError> {
            $crate::plugin::guard_instantiate(row_id, config_json, $instantiate)
        }
    };
}

#[cfg(test)]
mod tests {
    use abi_stable::sabi_types::RRef;

    use super::*;
    use crate::ffi::RequestError_TO;
    use crate::Failure;

    fn payload(provider: &str) -> RequestErrorPayload {
        RequestErrorPayload::new(1, 1, provider, Failure::new("SERVER", "down"), None)
    }

    fn provider_seen(payload: &RequestErrorPayload) -> String {
        with_payload(&RequestError_TO::from_ptr(RRef::new(payload), TD_Opaque), |read| read.provider.to_string())
    }

    #[test]
    fn a_call_made_while_the_kept_payload_is_lent_reads_into_a_fresh_one() {
        let (outer, inner) = (payload("outer"), payload("inner"));
        let view = RequestError_TO::from_ptr(RRef::new(&outer), TD_Opaque);
        let (seen_outer, seen_inner) = with_payload(&view, |kept| (kept.provider.to_string(), provider_seen(&inner)));
        assert_eq!((seen_outer.as_str(), seen_inner.as_str()), ("outer", "inner"));
    }
}
