//! The FFI-safe trait objects a plugin hands to the host: one instance per configured row, and one
//! session checker per session (or per file verified).
//!
//! These are implemented by the guards of [`crate::plugin`], never by plugin authors directly, so
//! every call is wrapped in `catch_unwind`. Their arguments and results are the growable forms of
//! [`crate::ffi`]; methods added later go after the last prefix method, with a default body.

use abi_stable::sabi_trait;
use abi_stable::std_types::{RBox, ROption, RResult, RStr, RString};

use crate::ffi::{
    AnswerRepr_NE, DecisionRepr_NE, DownstreamRepr_NE, RequestErrorRef, SessionStartRepr_NE, VerdictRepr_NE,
};
use crate::host::HostContextRef;
use crate::types::{Continuation, EventRef, PluginError};

#[sabi_trait]
pub trait PluginInstance: Send + Sync {
    fn on_request_error(
        &self,
        payload: RequestErrorRef<'_>,
        ctx: HostContextRef<'_>,
    ) -> RResult<AnswerRepr_NE, PluginError>;

    fn after_downstream(
        &self,
        payload: RequestErrorRef<'_>,
        ctx: HostContextRef<'_>,
        outcome: &DownstreamRepr_NE,
    ) -> RResult<DecisionRepr_NE, PluginError>;

    fn on_session_start(
        &self,
        source: SessionStartRepr_NE,
        ctx: HostContextRef<'_>,
    ) -> RResult<ROption<Continuation>, PluginError>;

    /// A streaming checker for one session, given its header line; `None` when the plugin has
    /// no checker.
    fn open_checker(&self, header: RStr<'_>) -> RResult<ROption<CheckerObject>, PluginError>;

    /// Called once before the instance is dropped (plugin disabled or host shutting down).
    #[sabi(last_prefix_field)]
    fn dispose(&mut self);

    /// Told of a request that was answered (`agent/request-success`). Added after ABI version 2:
    /// for a library built before, the host's call runs this default and does nothing.
    fn on_request_success(
        &self,
        turn: u64,
        step: u64,
        provider: RStr<'_>,
        endpoint_host: RStr<'_>,
        ctx: HostContextRef<'_>,
    ) -> RResult<(), PluginError> {
        let _ = (turn, step, provider, endpoint_host, ctx);
        RResult::ROk(())
    }

    /// Asked which route turn `turn` starts on (`agent/route`); `None` leaves it to the agent
    /// row. Added after ABI version 2: for a library built before, the default answers `None`.
    fn choose_route(&self, turn: u64, ctx: HostContextRef<'_>) -> RResult<ROption<RString>, PluginError> {
        let _ = (turn, ctx);
        RResult::ROk(ROption::RNone)
    }
}

/// An owned plugin instance.
pub type PluginInstanceObject = PluginInstance_TO<'static, RBox<()>>;

#[sabi_trait]
pub trait SessionChecker: Send {
    /// Checks one event against everything fed before it. A refused event does not change the
    /// checker's state.
    #[sabi(last_prefix_field)]
    fn check_event(&mut self, event: EventRef<'_>) -> RResult<VerdictRepr_NE, PluginError>;
}

/// An owned session checker.
pub type CheckerObject = SessionChecker_TO<'static, RBox<()>>;
