//! How the types that may grow cross the boundary, so that a plugin built against an older
//! version of this interface keeps loading and working when it gains variants, fields and
//! methods (the compatibility policy is in the README).
//!
//! - The enums a call returns or receives — answer, decision, downstream outcome, session-start
//!   source, checker verdict — travel as abi_stable non-exhaustive enums (`*_NE`): new variants
//!   can be added; a side that meets a variant it does not know says so instead of misreading it.
//! - The request-error payload (with its failure and retry policy) travels as
//!   [`RequestError`], an accessor trait object the host implements: new accessors are appended
//!   after its last prefix method.
//!
//! The host loads a plugin when the interface the plugin was built against is a prefix of its
//! own (see the host's loader), so a plugin only ever meets a host that knows at least what it
//! knows, and the host meets variants and methods the plugin does not know only where it sends
//! them: an old plugin given a newer variant answers with a clear failure.
//!
//! Plugin code never sees these: the guards of [`crate::plugin`] and the host's instance
//! wrapper convert between them and the plain types of [`crate::types`].

use abi_stable::sabi_trait;
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{ROption, RSlice, RStr, RString};
use abi_stable::StableAbi;

use crate::types::{
    Answer, Decision, DownstreamOutcome, Failure, PolicyMode, RequestErrorPayload, RetryDecision, RetryPolicy,
    RouteSwitch, SessionStartSource, Verdict,
};

/// A listener's answer across the boundary ([`Answer`], its decision inlined).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 10], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum AnswerRepr {
    Pass,
    NoRetry,
    Retry(RetryDecision),
    DelegateFirst,
    Refuse(RString),
    Switch(RouteSwitch),
}

/// A final decision across the boundary ([`Decision`]).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 10], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum DecisionRepr {
    NoRetry,
    Retry(RetryDecision),
    Refuse(RString),
    Switch(RouteSwitch),
}

/// What the rest of the chain answered, across the boundary ([`DownstreamOutcome`]).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 10], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum DownstreamRepr {
    Retried(RetryDecision),
    Declined,
    Failed(RString),
    Cancelled,
    Switched(RouteSwitch),
}

/// Why a session starts, across the boundary ([`SessionStartSource`]).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 2], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum SessionStartRepr {
    New,
    Continue,
    Resume,
}

/// A checker's verdict across the boundary ([`Verdict`]).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
#[sabi(kind(WithNonExhaustive(size = [usize; 8], traits(Debug, Clone, PartialEq))))]
#[non_exhaustive]
pub enum VerdictRepr {
    Accept,
    Refuse(RString),
    Warn(RString),
}

/// What a side says of a non-exhaustive value it cannot read: a variant added by a newer
/// version of the interface.
pub fn unknown_variant(what: &str, discriminant: impl std::fmt::Debug) -> String {
    format!("{what} #{discriminant:?} is unknown to this build (it comes from a newer dsh interface)")
}

impl From<Answer> for AnswerRepr_NE {
    fn from(answer: Answer) -> Self {
        AnswerRepr_NE::new(match answer {
            Answer::Pass => AnswerRepr::Pass,
            Answer::Decide(Decision::NoRetry) => AnswerRepr::NoRetry,
            Answer::Decide(Decision::Retry(retry)) => AnswerRepr::Retry(retry),
            Answer::Decide(Decision::Refuse(reason)) => AnswerRepr::Refuse(reason),
            Answer::Decide(Decision::Switch(switch)) => AnswerRepr::Switch(switch),
            Answer::DelegateFirst => AnswerRepr::DelegateFirst,
        })
    }
}

impl TryFrom<AnswerRepr_NE> for Answer {
    type Error = String;

    fn try_from(answer: AnswerRepr_NE) -> Result<Self, String> {
        match answer.into_enum() {
            Ok(AnswerRepr::Pass) => Ok(Answer::Pass),
            Ok(AnswerRepr::NoRetry) => Ok(Answer::Decide(Decision::NoRetry)),
            Ok(AnswerRepr::Retry(retry)) => Ok(Answer::Decide(Decision::Retry(retry))),
            Ok(AnswerRepr::DelegateFirst) => Ok(Answer::DelegateFirst),
            Ok(AnswerRepr::Refuse(reason)) => Ok(Answer::Decide(Decision::Refuse(reason))),
            Ok(AnswerRepr::Switch(switch)) => Ok(Answer::Decide(Decision::Switch(switch))),
            Err(unknown) => Err(unknown_variant("answer", unknown.into_inner().get_discriminant())),
        }
    }
}

impl From<Decision> for DecisionRepr_NE {
    fn from(decision: Decision) -> Self {
        DecisionRepr_NE::new(match decision {
            Decision::NoRetry => DecisionRepr::NoRetry,
            Decision::Retry(retry) => DecisionRepr::Retry(retry),
            Decision::Refuse(reason) => DecisionRepr::Refuse(reason),
            Decision::Switch(switch) => DecisionRepr::Switch(switch),
        })
    }
}

impl TryFrom<DecisionRepr_NE> for Decision {
    type Error = String;

    fn try_from(decision: DecisionRepr_NE) -> Result<Self, String> {
        match decision.into_enum() {
            Ok(DecisionRepr::NoRetry) => Ok(Decision::NoRetry),
            Ok(DecisionRepr::Retry(retry)) => Ok(Decision::Retry(retry)),
            Ok(DecisionRepr::Refuse(reason)) => Ok(Decision::Refuse(reason)),
            Ok(DecisionRepr::Switch(switch)) => Ok(Decision::Switch(switch)),
            Err(unknown) => Err(unknown_variant("decision", unknown.into_inner().get_discriminant())),
        }
    }
}

impl From<DownstreamOutcome> for DownstreamRepr_NE {
    fn from(outcome: DownstreamOutcome) -> Self {
        DownstreamRepr_NE::new(match outcome {
            DownstreamOutcome::Retried(retry) => DownstreamRepr::Retried(retry),
            DownstreamOutcome::Declined => DownstreamRepr::Declined,
            DownstreamOutcome::Failed(message) => DownstreamRepr::Failed(message),
            DownstreamOutcome::Cancelled => DownstreamRepr::Cancelled,
            DownstreamOutcome::Switched(switch) => DownstreamRepr::Switched(switch),
        })
    }
}

impl TryFrom<DownstreamRepr_NE> for DownstreamOutcome {
    type Error = String;

    fn try_from(outcome: DownstreamRepr_NE) -> Result<Self, String> {
        match outcome.into_enum() {
            Ok(DownstreamRepr::Retried(retry)) => Ok(DownstreamOutcome::Retried(retry)),
            Ok(DownstreamRepr::Declined) => Ok(DownstreamOutcome::Declined),
            Ok(DownstreamRepr::Failed(message)) => Ok(DownstreamOutcome::Failed(message)),
            Ok(DownstreamRepr::Cancelled) => Ok(DownstreamOutcome::Cancelled),
            Ok(DownstreamRepr::Switched(switch)) => Ok(DownstreamOutcome::Switched(switch)),
            Err(unknown) => Err(unknown_variant("downstream outcome", unknown.into_inner().get_discriminant())),
        }
    }
}

impl From<SessionStartSource> for SessionStartRepr_NE {
    fn from(source: SessionStartSource) -> Self {
        SessionStartRepr_NE::new(match source {
            SessionStartSource::New => SessionStartRepr::New,
            SessionStartSource::Continue => SessionStartRepr::Continue,
            SessionStartSource::Resume => SessionStartRepr::Resume,
        })
    }
}

impl TryFrom<SessionStartRepr_NE> for SessionStartSource {
    type Error = String;

    fn try_from(source: SessionStartRepr_NE) -> Result<Self, String> {
        match source.as_enum() {
            Ok(SessionStartRepr::New) => Ok(SessionStartSource::New),
            Ok(SessionStartRepr::Continue) => Ok(SessionStartSource::Continue),
            Ok(SessionStartRepr::Resume) => Ok(SessionStartSource::Resume),
            Err(unknown) => Err(unknown_variant("session-start source", unknown.into_inner().get_discriminant())),
        }
    }
}

impl From<Verdict> for VerdictRepr_NE {
    fn from(verdict: Verdict) -> Self {
        VerdictRepr_NE::new(match verdict {
            Verdict::Accept => VerdictRepr::Accept,
            Verdict::Refuse(message) => VerdictRepr::Refuse(message),
            Verdict::Warn(message) => VerdictRepr::Warn(message),
        })
    }
}

impl TryFrom<VerdictRepr_NE> for Verdict {
    type Error = String;

    fn try_from(verdict: VerdictRepr_NE) -> Result<Self, String> {
        match verdict.into_enum() {
            Ok(VerdictRepr::Accept) => Ok(Verdict::Accept),
            Ok(VerdictRepr::Refuse(message)) => Ok(Verdict::Refuse(message)),
            Ok(VerdictRepr::Warn(message)) => Ok(Verdict::Warn(message)),
            Err(unknown) => Err(unknown_variant("verdict", unknown.into_inner().get_discriminant())),
        }
    }
}

/// The request-error payload, read through accessors. The host implements it over its
/// [`RequestErrorPayload`]; accessors added later have a default body, the answer a plugin gets
/// from a host built before them.
#[sabi_trait]
pub trait RequestError {
    fn turn(&self) -> u64;

    fn step(&self) -> u64;

    fn provider(&self) -> RStr<'_>;

    fn failure_message(&self) -> RStr<'_>;

    fn failure_code(&self) -> RStr<'_>;

    fn failure_status(&self) -> ROption<u32>;

    fn failure_retry_after_ms(&self) -> ROption<f64>;

    fn failure_request_id(&self) -> ROption<RStr<'_>>;

    /// `normal`, `always` (or a mode added later); empty when the payload has no policy.
    fn policy_mode(&self) -> RStr<'_>;

    fn policy_max_retries(&self) -> u64;

    fn policy_retryable_codes(&self) -> RSlice<'_, RString>;

    fn policy_initial_delay_ms(&self) -> f64;

    fn policy_max_delay_ms(&self) -> f64;

    #[sabi(last_prefix_field)]
    fn policy_jitter_ratio(&self) -> f64;

    /// The model of the failed request (added after ABI version 2).
    fn model(&self) -> RStr<'_>;

    /// The host of the route's endpoint (added after ABI version 2).
    fn endpoint_host(&self) -> RStr<'_>;

    /// The host's estimate of the request's size in tokens (added after ABI version 2).
    fn request_tokens(&self) -> u64;
}

/// The borrowed form in which the host hands a payload to a plugin call.
pub type RequestErrorRef<'a> = RequestError_TO<'a, RRef<'a, ()>>;

impl RequestError for RequestErrorPayload {
    fn turn(&self) -> u64 {
        self.turn
    }

    fn step(&self) -> u64 {
        self.step
    }

    fn provider(&self) -> RStr<'_> {
        self.provider.as_rstr()
    }

    fn failure_message(&self) -> RStr<'_> {
        self.failure.message.as_rstr()
    }

    fn failure_code(&self) -> RStr<'_> {
        self.failure.code.as_rstr()
    }

    fn failure_status(&self) -> ROption<u32> {
        self.failure.status
    }

    fn failure_retry_after_ms(&self) -> ROption<f64> {
        self.failure.provider_retry_after_ms
    }

    fn failure_request_id(&self) -> ROption<RStr<'_>> {
        self.failure.request_id.as_ref().map(RString::as_rstr)
    }

    fn policy_mode(&self) -> RStr<'_> {
        self.retry_policy.as_ref().map_or("", |policy| policy.mode.as_str()).into()
    }

    fn policy_max_retries(&self) -> u64 {
        self.retry_policy.as_ref().map_or(0, |policy| policy.max_retries)
    }

    fn policy_retryable_codes(&self) -> RSlice<'_, RString> {
        self.retry_policy.as_ref().map_or(RSlice::EMPTY, |policy| policy.retryable_codes.as_rslice())
    }

    fn policy_initial_delay_ms(&self) -> f64 {
        self.retry_policy.as_ref().map_or(0.0, |policy| policy.initial_delay_ms)
    }

    fn policy_max_delay_ms(&self) -> f64 {
        self.retry_policy.as_ref().map_or(0.0, |policy| policy.max_delay_ms)
    }

    fn policy_jitter_ratio(&self) -> f64 {
        self.retry_policy.as_ref().map_or(0.0, |policy| policy.jitter_ratio)
    }

    fn model(&self) -> RStr<'_> {
        self.model.as_rstr()
    }

    fn endpoint_host(&self) -> RStr<'_> {
        self.endpoint_host.as_rstr()
    }

    fn request_tokens(&self) -> u64 {
        self.request_tokens
    }
}

impl RequestErrorPayload {
    /// The payload as a plugin's guard reads it. A policy mode this build does not know leaves
    /// the policy out (the plugin cannot apply it).
    pub fn from_view(view: &RequestErrorRef<'_>) -> RequestErrorPayload {
        let mut payload = RequestErrorPayload::new(0, 0, "", Failure::new("", ""), None);
        payload.read_view(view);
        payload
    }

    /// Overwrites this payload with `view`'s, reusing its strings' memory: a guard that keeps
    /// one payload per thread reads every later payload without allocating.
    pub fn read_view(&mut self, view: &RequestErrorRef<'_>) {
        fn set(target: &mut RString, text: RStr<'_>) {
            target.clear();
            target.push_str(text.as_str());
        }
        self.turn = view.turn();
        self.step = view.step();
        self.request_tokens = view.request_tokens();
        set(&mut self.provider, view.provider());
        set(&mut self.model, view.model());
        set(&mut self.endpoint_host, view.endpoint_host());
        set(&mut self.failure.message, view.failure_message());
        set(&mut self.failure.code, view.failure_code());
        self.failure.status = view.failure_status();
        self.failure.provider_retry_after_ms = view.failure_retry_after_ms();
        match (view.failure_request_id(), &mut self.failure.request_id) {
            (ROption::RSome(id), ROption::RSome(kept)) => set(kept, id),
            (id, kept) => *kept = id.map(RString::from),
        }
        let mode = match view.policy_mode().as_str() {
            "normal" => Some(PolicyMode::Normal),
            "always" => Some(PolicyMode::Always),
            _ => None,
        };
        let Some(mode) = mode else {
            self.retry_policy = ROption::RNone;
            return;
        };
        if self.retry_policy.is_none() {
            self.retry_policy = ROption::RSome(RetryPolicy {
                mode,
                max_retries: 0,
                retryable_codes: Default::default(),
                initial_delay_ms: 0.0,
                max_delay_ms: 0.0,
                jitter_ratio: 0.0,
            });
        }
        let ROption::RSome(policy) = &mut self.retry_policy else { unreachable!("set above") };
        policy.mode = mode;
        policy.max_retries = view.policy_max_retries();
        let codes = view.policy_retryable_codes();
        policy.retryable_codes.truncate(codes.len());
        for (index, code) in codes.iter().enumerate() {
            match policy.retryable_codes.get_mut(index) {
                Some(kept) => set(kept, code.as_rstr()),
                None => policy.retryable_codes.push(code.clone()),
            }
        }
        policy.initial_delay_ms = view.policy_initial_delay_ms();
        policy.max_delay_ms = view.policy_max_delay_ms();
        policy.jitter_ratio = view.policy_jitter_ratio();
    }
}
