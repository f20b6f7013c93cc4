//! The data plugins and the host exchange: manifests, config errors, the request-error payload,
//! listener answers and decisions, session events and checker verdicts.
//!
//! Types that derive `StableAbi` cross the boundary as they are. The payload, answers,
//! decisions, outcomes, session-start sources and verdicts may grow: they are plain Rust here and
//! cross through the growable forms of [`crate::ffi`]; the enums the host sends a plugin are
//! `#[non_exhaustive]`, so plugin code is written for variants added later.

use abi_stable::std_types::{ROption, RStr, RString, RVec};
use abi_stable::StableAbi;
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::js::Field;

/// The hooks a plugin implements, as bit flags.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Hooks(pub u32);

impl Hooks {
    /// `agent/request-error`: `on_request_error` and `after_downstream`.
    pub const REQUEST_ERROR: Hooks = Hooks(1);
    /// `agent/session-start`: `on_session_start`.
    pub const SESSION_START: Hooks = Hooks(1 << 1);
    /// `session/check`: `open_checker`, a streaming checker fed every event.
    pub const CHECKER: Hooks = Hooks(1 << 2);
    /// `agent/request-success`: `on_request_success`, told of every request that was answered
    /// (a dsh extension, added after ABI version 2).
    pub const REQUEST_SUCCESS: Hooks = Hooks(1 << 3);
    /// Not a hook but a capability: the row adds to shared counters (`counter_add`), kept in the
    /// store its config's [`COUNTER_STORE_KEY`](crate::config::COUNTER_STORE_KEY) names. A row
    /// without it has no counters, and a `store` key in its config is its own.
    pub const COUNTERS: Hooks = Hooks(1 << 4);
    /// `agent/route`: `choose_route`, asked which route a turn starts on; the row may answer a
    /// request failure with [`Decision::Switch`]. Its config names provider routes under
    /// [`ROUTES_KEY`](crate::config::ROUTES_KEY), which the host checks against its provider rows.
    /// (Added after ABI version 2.)
    pub const ROUTES: Hooks = Hooks(1 << 5);

    const NAMES: [(Hooks, &'static str); 6] = [
        (Hooks::REQUEST_ERROR, "agent/request-error"),
        (Hooks::SESSION_START, "agent/session-start"),
        (Hooks::CHECKER, "session/check"),
        (Hooks::REQUEST_SUCCESS, "agent/request-success"),
        (Hooks::COUNTERS, "counters"),
        (Hooks::ROUTES, "agent/route"),
    ];

    pub const fn union(self, other: Hooks) -> Hooks {
        Hooks(self.0 | other.0)
    }

    pub const fn contains(self, other: Hooks) -> bool {
        self.0 & other.0 == other.0
    }

    /// The event names of the hooks in this set, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES.iter().filter(|(hook, _)| self.contains(*hook)).map(|(_, name)| *name).collect()
    }
}

/// What a plugin says about itself.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct Manifest {
    pub name: RString,
    pub version: RString,
    /// Must equal the host's [`crate::ABI_VERSION`].
    pub abi_version: u32,
    pub hooks: Hooks,
    pub description: RString,
    pub config_keys: RVec<ConfigKey>,
}

/// One key of a plugin's row config, for `dsh plugin inspect`.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct ConfigKey {
    pub name: RString,
    /// Type, default and meaning in one line.
    pub summary: RString,
}

/// One problem with a row's config: `path` is the key path inside the config (`schedule[2]`,
/// empty for the config as a whole), `message` the plugin's exact text.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: RString,
    pub message: RString,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { path: RString::from(path.into()), message: RString::from(message.into()) }
    }
}

/// A plugin call that did not produce an answer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PluginError {
    /// True when the plugin panicked (the export guard caught it); false for an error it returned.
    pub panicked: bool,
    pub message: RString,
}

impl PluginError {
    pub fn failed(message: impl Into<String>) -> Self {
        PluginError { panicked: false, message: RString::from(message.into()) }
    }

    pub fn panicked(message: impl Into<String>) -> Self {
        PluginError { panicked: true, message: RString::from(message.into()) }
    }
}

/// Why a plugin could not be instantiated for a row.
#[repr(u8)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub enum InstantiateError {
    /// The row's config is invalid; every problem found.
    Config(RVec<ConfigError>),
    /// The plugin failed or panicked while building the instance.
    Failed(PluginError),
}

/// `normal`: bounded, code-filtered; `always`: unbounded, every code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyMode {
    Normal,
    Always,
}

impl PolicyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Normal => "normal",
            PolicyMode::Always => "always",
        }
    }
}

/// A provider route's resolved (flat) retry policy. In `always` mode `max_retries` is 0 and
/// `retryable_codes` is empty: they do not apply.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    pub mode: PolicyMode,
    pub max_retries: u64,
    pub retryable_codes: RVec<RString>,
    pub initial_delay_ms: f64,
    pub max_delay_ms: f64,
    pub jitter_ratio: f64,
}

/// A classified request failure. Written as JSON with the keys `message, code, status?,
/// providerRetryAfterMs?, requestId?`, in this order ([`Failure::fields`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub message: RString,
    pub code: RString,
    pub status: ROption<u32>,
    pub provider_retry_after_ms: ROption<f64>,
    pub request_id: ROption<RString>,
}

impl Failure {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure {
            message: RString::from(message.into()),
            code: RString::from(code.into()),
            status: ROption::RNone,
            provider_retry_after_ms: ROption::RNone,
            request_id: ROption::RNone,
        }
    }

    /// The provider's retry-after hint, when it is usable (finite and positive).
    pub fn retry_after_hint(&self) -> Option<f64> {
        self.provider_retry_after_ms.into_option().filter(|hint| hint.is_finite() && *hint > 0.0)
    }
}

impl Failure {
    /// Its JSON fields, in the order they are written.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, Field<'_>)> {
        [
            Some(("message", Field::Text(self.message.as_str()))),
            Some(("code", Field::Text(self.code.as_str()))),
            self.status.into_option().map(|status| ("status", Field::Unsigned(u64::from(status)))),
            self.provider_retry_after_ms.into_option().map(|hint| ("providerRetryAfterMs", Field::Number(hint))),
            self.request_id.as_ref().into_option().map(|id| ("requestId", Field::Text(id.as_str()))),
        ]
        .into_iter()
        .flatten()
    }
}

impl Serialize for Failure {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.fields() {
            match value {
                Field::Text(text) => map.serialize_entry(key, text)?,
                Field::Unsigned(number) => map.serialize_entry(key, &number)?,
                Field::Number(number) => map.serialize_entry(key, &number)?,
            }
        }
        map.end()
    }
}

/// The payload of `agent/request-error`.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestErrorPayload {
    pub turn: u64,
    pub step: u64,
    /// The route that served the failed request.
    pub provider: RString,
    /// The model of the failed request.
    pub model: RString,
    /// The host of the route's endpoint (`relay.example`), to key things by relay.
    pub endpoint_host: RString,
    pub failure: Failure,
    /// The route's resolved policy; absent when no route could be chosen (`NO_ADAPTER`).
    pub retry_policy: ROption<RetryPolicy>,
    /// The host's estimate of the request's size in tokens (its text's UTF-8 bytes / 4, rounded
    /// up), to match against a route's `contextWindow`.
    pub request_tokens: u64,
}

impl RequestErrorPayload {
    /// A payload for `turn`/`step` on route `provider`, its model not named.
    pub fn new(
        turn: u64,
        step: u64,
        provider: &str,
        failure: Failure,
        retry_policy: Option<RetryPolicy>,
    ) -> RequestErrorPayload {
        RequestErrorPayload {
            turn,
            step,
            provider: provider.into(),
            model: RString::new(),
            endpoint_host: RString::new(),
            failure,
            retry_policy: retry_policy.into(),
            request_tokens: 0,
        }
    }
}

/// Send the failed step to another route right away (a failover hop), instead of retrying the
/// route it failed on. The host records the hop (`route/switch`) and a new `request/header`
/// before the request goes out. (Added after ABI version 2.)
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct RouteSwitch {
    /// The provider name of the route to send the step to.
    pub route: RString,
    /// Why, in a few words, for the log and the screen.
    pub reason: RString,
}

/// A scheduled retry: wait `delay_ms`, with `record` (the `llm/retry` payload as JSON text, keys
/// in the plugin's order) appended by the host byte for byte before the wait.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct RetryDecision {
    pub delay_ms: f64,
    pub record: RString,
}

/// The final answer to a request failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    NoRetry,
    Retry(RetryDecision),
    /// No retry, and the host must say why: it writes the reason to the log (an ignorable
    /// `llm/retry-refused` event) and to stderr. (Added after ABI version 2.)
    Refuse(RString),
    /// Send the step to another route now. (Added after ABI version 2.)
    Switch(RouteSwitch),
}

/// A request that was answered, as `agent/request-success` listeners are told of it.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSuccess {
    pub turn: u64,
    pub step: u64,
    /// The route that served it.
    pub provider: RString,
    /// The host of the route's endpoint.
    pub endpoint_host: RString,
}

/// What a listener answers when it is offered a request failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Not mine: the host asks the next listener and uses its answer.
    Pass,
    /// Final: listeners after this one are not asked.
    Decide(Decision),
    /// Ask the rest of the chain first, then call `after_downstream` with what it answered.
    DelegateFirst,
}

/// What the rest of the chain answered, given to a delegate-first listener.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum DownstreamOutcome {
    Retried(RetryDecision),
    /// A later listener switched the step to another route. (Added after ABI version 2.)
    Switched(RouteSwitch),
    /// Nobody retried.
    Declined,
    /// A later listener failed or panicked; the message says which and why.
    Failed(RString),
    /// The turn was cancelled while the rest of the chain was asked; whatever it decided will
    /// not be carried out.
    Cancelled,
}

/// Why `agent/session-start` is raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStartSource {
    /// A new session was created.
    New,
    /// An existing session continues in a live process (`dsh run --session`).
    Continue,
    /// A cold session is reattached after crash repair (`dsh session resume`).
    Resume,
}

/// A user message a session-start listener asks the host to enqueue.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct Continuation {
    /// Deterministic message id; the host never enqueues an id already in the log.
    pub id: RString,
    pub text: RString,
    /// The `source.form` of the message, e.g. `notice`.
    pub form: RString,
    pub summary: RString,
}

/// The key of a retry chain.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ChainKey<'a> {
    pub turn: u64,
    pub step: u64,
    pub provider: RStr<'a>,
    pub policy_key: RStr<'a>,
}

impl<'a> ChainKey<'a> {
    /// The chain of `payload`'s failure under `policy_key`.
    pub fn new(payload: &'a RequestErrorPayload, policy_key: &'a str) -> Self {
        ChainKey {
            turn: payload.turn,
            step: payload.step,
            provider: payload.provider.as_rstr(),
            policy_key: policy_key.into(),
        }
    }
}

/// The last `llm/retry` of a chain, as the host's history index knows it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq)]
pub struct ChainRecord {
    pub retry_id: RString,
    pub retry: u64,
}

/// One session event as a checker sees it; `data` stays raw JSON until a rule needs it.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct EventRef<'a> {
    pub event_type: RStr<'a>,
    pub seq: u64,
    pub time: f64,
    pub data: RStr<'a>,
}

/// A checker's verdict on one event.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Accept,
    /// The event breaks a rule and must not be appended.
    Refuse(RString),
    /// The event breaks a rule; the checker only reports it (report mode).
    Warn(RString),
}

/// Severity of a plugin log line.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}
