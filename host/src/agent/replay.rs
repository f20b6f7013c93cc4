//! What-if replay: a recorded turn's failures run through a candidate configuration's real
//! waterfall, on a virtual clock, in a scratch history that is never written anywhere.
//!
//! Reading ([`read_session`]): each turn of a log (ours or DeepSeek Harness's) becomes its steps'
//! attempts — when each was sent and when it ended, and how (a failure, with its code, status and
//! hint, or the answer) — with the waits recorded between them and how the turn ended. A first
//! attempt is sent at the latest of the step's start, its user message and its request header; a
//! retry at its `llm/retry` record's time plus `delayMs`.
//!
//! Replaying ([`replay_turn`]) assumes the provider would have answered the same way at the same
//! moments: a request sent at time t gets the answer of the session's recorded attempt to that
//! provider with the latest send time ≤ t (a later turn's answer included), after that attempt's
//! duration. Turns are replayed one by one, each from its own first request. The candidate's
//! listeners decide on each failure as they would in a run (the clock at the failure's time,
//! random samples at the middle of their range); each retry they schedule is taken into the
//! scratch history, so chains continue. A candidate still retrying after the session's last
//! recorded attempt meets that attempt's failure for ever, and is "still retrying" once it has
//! sent [`MAX_ATTEMPTS`] requests.

use dsh_abi::events;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use abi_stable::std_types::RString;
use dsh_abi::retry::CheckedRetry;
use dsh_abi::{Failure, LogLevel, RequestErrorPayload, RetryPolicy};
use serde_json::Value;

use crate::context::{call_context, Services};
use crate::plugin::RowInstance;
use crate::waterfall::{self, Outcome as WaterfallOutcome};
use dsh_session::index::HistoryIndex;
use dsh_session::reader::{LogReader, ReadError};

/// A candidate chain still retrying after this many attempts is "still retrying".
pub const MAX_ATTEMPTS: usize = 1000;

/// How a turn ended, recorded or replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcome {
    Completed,
    /// The turn ended with the failure (recorded).
    Failed,
    /// The candidate would have stopped retrying.
    GaveUp,
    /// The candidate would still be retrying when the recorded turn had ended.
    StillRetrying,
    /// The user cancelled (or the host crashed) before the turn could end.
    Aborted,
}

impl TurnOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Completed => "completed",
            TurnOutcome::Failed => "failed",
            TurnOutcome::GaveUp => "gave-up",
            TurnOutcome::StillRetrying => "still-retrying",
            TurnOutcome::Aborted => "aborted",
        }
    }
}

/// One recorded attempt: sent at `sent_ms`, ended at `ended_ms`, with a failure (`None`: the
/// answer).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAttempt {
    pub sent_ms: f64,
    pub ended_ms: f64,
    pub failure: Option<Failure>,
    /// The route it went to (a failover hop moves a step's later attempts to another).
    pub provider: String,
}

/// The attempts of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStep {
    pub step: u64,
    pub provider: String,
    pub attempts: Vec<RecordedAttempt>,
    pub waits_ms: Vec<f64>,
    /// The `policyKey` of each recorded wait's retry record (when it has one).
    pub wait_policies: Vec<Option<String>>,
}

/// One recorded turn.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTurn {
    pub session: String,
    pub turn: u64,
    pub steps: Vec<RecordedStep>,
    pub outcome: TurnOutcome,
    pub ended_ms: f64,
}

/// What a turn came to: attempts sent, waits, outcome, time from the first send to the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnResult {
    pub attempts: usize,
    pub waits_ms: Vec<f64>,
    pub outcome: TurnOutcome,
    pub answer_after_ms: Option<f64>,
    /// Requests a failover sent to a route the log never sent to, assumed answered at once.
    pub assumed_answers: usize,
    /// Failover hops.
    pub hops: usize,
    /// Waits taken from the recording: the candidate decided the recorded retry under the
    /// recorded policy, so it waits what the recording waited (its random sample included).
    pub recorded_waits: usize,
    /// Waits the candidate sampled anew (at the middle of their range): its policy is not the
    /// one that produced the recorded wait, or none was recorded there.
    pub sampled_waits: usize,
}

impl RecordedTurn {
    /// Whether any attempt of the turn failed.
    pub fn had_failures(&self) -> bool {
        self.steps.iter().flat_map(|step| &step.attempts).any(|attempt| attempt.failure.is_some())
    }

    /// The turn as it was recorded.
    pub fn recorded(&self) -> TurnResult {
        let first = self.steps.first().and_then(|step| step.attempts.first()).map(|attempt| attempt.sent_ms);
        let last_answer =
            self.steps.last().and_then(|step| step.attempts.last()).filter(|attempt| attempt.failure.is_none());
        TurnResult {
            attempts: self.steps.iter().map(|step| step.attempts.len()).sum(),
            waits_ms: self.steps.iter().flat_map(|step| step.waits_ms.iter().copied()).collect(),
            outcome: self.outcome,
            answer_after_ms: match (self.outcome, first, last_answer) {
                (TurnOutcome::Completed, Some(first), Some(answer)) => Some(answer.ended_ms - first),
                _ => None,
            },
            assumed_answers: 0,
            hops: 0,
            recorded_waits: 0,
            sampled_waits: 0,
        }
    }
}
/// Totals over the turns replayed, for the recorded run or one candidate.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub turns: usize,
    pub requests: usize,
    pub waiting_ms: f64,
    pub completed: usize,
    pub lost: usize,
    pub saved: usize,
    /// Turns the recording did not complete (failed, or gave up).
    pub failed: usize,
    /// Requests a failover sent to a route the log never sent to, assumed answered.
    pub assumed_answers: usize,
    pub hops: usize,
    pub recorded_waits: usize,
    pub sampled_waits: usize,
}

impl Totals {
    /// Counts `result`, and whether it lost or saved a turn `recorded` completed or lost.
    pub fn add(&mut self, result: &TurnResult, recorded: &TurnResult) {
        self.turns += 1;
        self.requests += result.attempts;
        self.waiting_ms += result.waits_ms.iter().sum::<f64>();
        let completed = result.outcome == TurnOutcome::Completed;
        let recorded_completed = recorded.outcome == TurnOutcome::Completed;
        self.completed += usize::from(completed);
        self.lost += usize::from(recorded_completed && !completed);
        self.saved += usize::from(!recorded_completed && completed);
        self.failed += usize::from(!recorded_completed);
        self.assumed_answers += result.assumed_answers;
        self.hops += result.hops;
        self.recorded_waits += result.recorded_waits;
        self.sampled_waits += result.sampled_waits;
    }
}

/// What the candidate configuration runs: its request-error listeners, outermost first, and the
/// retry policy of each of its routes (`fallback`: the agent's route, for a provider it lacks).
pub struct Candidate {
    pub listeners: Vec<Arc<RowInstance>>,
    pub policies: HashMap<String, RetryPolicy>,
    pub fallback: Option<RetryPolicy>,
}

/// A virtual clock, random samples at the middle of their range, counting ids, no logging.
#[derive(Default)]
struct ReplayServices {
    now_bits: AtomicU64,
    next_id: AtomicU64,
}

impl ReplayServices {
    fn set_now(&self, ms: f64) {
        self.now_bits.store(ms.to_bits(), Ordering::Relaxed);
    }
}

impl Services for ReplayServices {
    fn now_ms(&self) -> f64 {
        f64::from_bits(self.now_bits.load(Ordering::Relaxed))
    }

    fn random(&self) -> f64 {
        0.5
    }

    fn new_id(&self) -> String {
        format!("replay-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn log(&self, _: LogLevel, _: &str) {}
}

/// A scratch history for replaying one session's turns against one candidate.
pub struct Scratch {
    history: HistoryIndex,
    services: ReplayServices,
}

impl Scratch {
    pub fn new(session: &str) -> Scratch {
        let header = serde_json::json!({"type": "session", "version": 0, "id": session, "createdAt": 0}).to_string();
        Scratch { history: HistoryIndex::new(header), services: ReplayServices::default() }
    }
}

/// The recorded attempt that answers a request sent at `t`: the last one sent at or before it
/// (the first, for a request sent before any).
fn answer_at(attempts: &[RecordedAttempt], t: f64) -> &RecordedAttempt {
    let index = attempts.partition_point(|attempt| attempt.sent_ms <= t);
    &attempts[index.saturating_sub(1)]
}

/// The recorded turns of one log, and each provider's answers over time.
pub struct RecordedSession {
    pub turns: Vec<RecordedTurn>,
    timelines: HashMap<String, Vec<RecordedAttempt>>,
}

impl RecordedSession {
    fn new(turns: Vec<RecordedTurn>) -> RecordedSession {
        let mut timelines: HashMap<String, Vec<RecordedAttempt>> = HashMap::new();
        for attempt in turns.iter().flat_map(|turn| &turn.steps).flat_map(|step| &step.attempts) {
            timelines.entry(attempt.provider.clone()).or_default().push(attempt.clone());
        }
        for timeline in timelines.values_mut() {
            timeline.sort_by(|a, b| a.sent_ms.total_cmp(&b.sent_ms));
        }
        RecordedSession { turns, timelines }
    }

    /// Runs `turn` (one of this session's) through `candidate`.
    pub fn replay_turn(&self, turn: &RecordedTurn, candidate: &Candidate, scratch: &mut Scratch) -> TurnResult {
        replay_turn(turn, &self.timelines, candidate, scratch)
    }
}

/// Runs `turn` through `candidate`, the provider answering from `timelines`.
fn replay_turn(
    turn: &RecordedTurn,
    timelines: &HashMap<String, Vec<RecordedAttempt>>,
    candidate: &Candidate,
    scratch: &mut Scratch,
) -> TurnResult {
    let mut result = TurnResult {
        attempts: 0,
        waits_ms: Vec::new(),
        outcome: TurnOutcome::Completed,
        answer_after_ms: None,
        assumed_answers: 0,
        hops: 0,
        recorded_waits: 0,
        sampled_waits: 0,
    };
    let first_send = turn.steps.first().and_then(|step| step.attempts.first()).map(|attempt| attempt.sent_ms);
    let listeners: Vec<&RowInstance> = candidate.listeners.iter().map(Arc::as_ref).collect();
    for step in turn.steps.iter().filter(|step| !step.attempts.is_empty()) {
        let replayed = ReplayedStep { turn, step, timelines, candidate, listeners: &listeners, first_send };
        if let Some(outcome) = replayed.run(&mut result, scratch) {
            result.outcome = outcome;
            return result;
        }
    }
    result
}

/// One step of a turn being replayed.
struct ReplayedStep<'a> {
    turn: &'a RecordedTurn,
    step: &'a RecordedStep,
    timelines: &'a HashMap<String, Vec<RecordedAttempt>>,
    candidate: &'a Candidate,
    listeners: &'a [&'a RowInstance],
    first_send: Option<f64>,
}

impl ReplayedStep<'_> {
    /// Sends the step until it is answered (`None`) or the turn ends otherwise. A failover hop
    /// moves it to the route's recorded answers; a route the log never sent to is assumed to
    /// answer at once (counted in `assumed_answers`).
    fn run(&self, result: &mut TurnResult, scratch: &mut Scratch) -> Option<TurnOutcome> {
        let (turn, step, candidate) = (self.turn, self.step, self.candidate);
        let mut provider = step.provider.clone();
        let mut timeline = Some(self.timelines.get(&provider).map_or(&step.attempts[..], Vec::as_slice));
        let mut sent = step.attempts[0].sent_ms;
        let cancelled = AtomicBool::new(false);
        let mut retries = 0;
        loop {
            if turn.outcome == TurnOutcome::Aborted && sent > turn.ended_ms {
                return Some(TurnOutcome::Aborted);
            }
            if result.attempts >= MAX_ATTEMPTS {
                return Some(TurnOutcome::StillRetrying);
            }
            result.attempts += 1;
            let Some(attempts) = timeline else {
                result.assumed_answers += 1;
                result.answer_after_ms = self.first_send.map(|first| sent - first);
                return None;
            };
            let answer = answer_at(attempts, sent);
            let ended = sent + (answer.ended_ms - answer.sent_ms).max(0.0);
            let Some(failure) = &answer.failure else {
                result.answer_after_ms = self.first_send.map(|first| ended - first);
                return None;
            };
            let policy = candidate.policies.get(&provider).or(candidate.fallback.as_ref()).cloned();
            let payload = RequestErrorPayload::new(turn.turn, step.step, &provider, failure.clone(), policy);
            scratch.services.set_now(ended);
            let context = call_context(&scratch.history, &cancelled, false, &scratch.services);
            match waterfall::run(self.listeners, &payload, &context) {
                WaterfallOutcome::Retry { retry, .. } => {
                    let (delay_ms, record) = self.wait(retries, *retry, result);
                    retries += 1;
                    let line = format!(r#"{{"type":"llm/retry","seq":0,"time":{ended},"data":{record}}}"#);
                    scratch.history.observe(events::LLM_RETRY, &line, &record);
                    result.waits_ms.push(delay_ms);
                    sent = ended + delay_ms;
                }
                WaterfallOutcome::Switch { switch, .. } => {
                    result.hops += 1;
                    provider = switch.route.into_string();
                    timeline = self.timelines.get(&provider).map(Vec::as_slice);
                    sent = ended;
                }
                WaterfallOutcome::NoRetry { .. } | WaterfallOutcome::Cancelled => return Some(TurnOutcome::GaveUp),
            }
        }
    }
}

impl ReplayedStep<'_> {
    /// The wait of the step's `index`-th retry and its record: the recorded wait when the
    /// candidate decided it under the policy that produced it (same `policyKey`, same retry
    /// number), else the candidate's own, sampled anew.
    fn wait(&self, index: usize, retry: CheckedRetry, result: &mut TurnResult) -> (f64, String) {
        let mut record: Value = serde_json::from_str(&retry.record).unwrap_or(Value::Null);
        let recorded = self.step.waits_ms.get(index).zip(self.step.wait_policies.get(index));
        let same = |key: &Option<String>| {
            key.is_some()
                && record.get("policyKey").and_then(Value::as_str) == key.as_deref()
                && record.get("retry").and_then(Value::as_u64) == Some(index as u64 + 1)
        };
        match recorded.filter(|(_, key)| same(key)) {
            Some((&delay_ms, _)) => {
                result.recorded_waits += 1;
                record["delayMs"] = serde_json::json!(delay_ms);
                (delay_ms, dsh_abi::js::to_string(&record))
            }
            None => {
                result.sampled_waits += 1;
                (retry.delay_ms, retry.record)
            }
        }
    }
}

/// A turn being read.
#[derive(Default)]
struct OpenTurn {
    turn: u64,
    steps: Vec<RecordedStep>,
    /// When the next request of the current step is sent, if one is due.
    pending_send: Option<f64>,
}

impl OpenTurn {
    fn step(&mut self, step: u64, provider: &str) -> &mut RecordedStep {
        if self.steps.last().is_none_or(|last| last.step != step) {
            self.steps.push(RecordedStep {
                step,
                provider: provider.to_owned(),
                attempts: Vec::new(),
                waits_ms: Vec::new(),
                wait_policies: Vec::new(),
            });
        }
        self.steps.last_mut().expect("pushed")
    }

    fn attempt(&mut self, step: u64, provider: &str, ended: f64, failure: Option<Failure>) {
        let sent = self.pending_send.take().unwrap_or(ended);
        let attempt = RecordedAttempt { sent_ms: sent, ended_ms: ended, failure, provider: provider.to_owned() };
        self.step(step, provider).attempts.push(attempt);
    }
}

/// A failure as a record or attempt writes it.
fn failure_of(value: &Value) -> Option<Failure> {
    let object = value.as_object()?;
    let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut failure = Failure::new(text("code")?, text("message").unwrap_or_default());
    failure.status = object.get("status").and_then(Value::as_u64).map(|status| status as u32).into();
    failure.provider_retry_after_ms = object.get("providerRetryAfterMs").and_then(Value::as_f64).into();
    failure.request_id = text("requestId").map(RString::from).into();
    Some(failure)
}

fn number(data: &Value, key: &str) -> Option<u64> {
    data.get(key).and_then(Value::as_u64)
}

/// Every turn of the log `reader` reads that reached a request, in order.
pub fn read_session(reader: LogReader) -> Result<RecordedSession, ReadError> {
    read_turns(reader).map(RecordedSession::new)
}

fn read_turns(mut reader: LogReader) -> Result<Vec<RecordedTurn>, ReadError> {
    let header: Value = serde_json::from_str(reader.header()).unwrap_or(Value::Null);
    let session = header.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut turns = TurnCollector { session, ..TurnCollector::default() };
    while let Some(next) = reader.next_event() {
        let Ok(event) = next? else { continue };
        if !shapes_replay(event.event_type, event.data) {
            continue;
        }
        let Ok(data) = serde_json::from_str::<Value>(event.data) else { continue };
        turns.take(event.event_type, event.time.unwrap_or(0.0), &data);
    }
    Ok(turns.turns)
}

/// Whether an event shapes a replay: the turn and step bounds, requests, attempts, retries, and
/// the chunk that ends an attempt in error (told by its text, before it is parsed).
fn shapes_replay(kind: &str, data: &str) -> bool {
    matches!(
        kind,
        events::TURN_START
            | events::TURN_END
            | events::STEP_START
            | events::USER_MESSAGE
            | events::REQUEST_HEADER
            | events::ASSISTANT_ATTEMPT
            | events::ASSISTANT_MESSAGE
            | events::LLM_RETRY
    ) || (kind == events::ASSISTANT_CHUNK && data.contains("\"finish\"") && data.contains("\"error\""))
}

/// The turns of one log as its events arrive.
#[derive(Default)]
struct TurnCollector {
    session: String,
    turns: Vec<RecordedTurn>,
    open: Option<OpenTurn>,
    /// The route requests go to, as the last header or retry named it.
    provider: String,
}

impl TurnCollector {
    fn take(&mut self, kind: &str, time: f64, data: &Value) {
        let step = number(data, "step").unwrap_or(1);
        match kind {
            events::TURN_START => {
                self.open = Some(OpenTurn { turn: number(data, "turn").unwrap_or(0), ..OpenTurn::default() });
            }
            events::REQUEST_HEADER => {
                if let Some(name) = data.pointer("/header/config/provider").and_then(Value::as_str) {
                    self.provider = name.to_owned();
                }
                self.sending_at(time);
            }
            events::STEP_START | events::USER_MESSAGE => self.sending_at(time),
            events::ASSISTANT_ATTEMPT => self.attempt(step, time, events::attempt_failure(data).and_then(failure_of)),
            events::ASSISTANT_CHUNK => {
                self.attempt(step, time, data.pointer("/chunk/reason/failure").and_then(failure_of))
            }
            events::ASSISTANT_MESSAGE => {
                if let Some(turn) = self.open.as_mut() {
                    turn.attempt(step, &self.provider, time, None);
                }
            }
            events::LLM_RETRY => self.retry(step, time, data),
            events::TURN_END => self.end_turn(time, data),
            _ => {}
        }
    }

    fn sending_at(&mut self, time: f64) {
        if let Some(turn) = self.open.as_mut() {
            turn.pending_send = Some(time);
        }
    }

    /// A failed attempt (an attempt or chunk without a failure says nothing here).
    fn attempt(&mut self, step: u64, time: f64, failure: Option<Failure>) {
        if let (Some(turn), Some(failure)) = (self.open.as_mut(), failure) {
            turn.attempt(step, &self.provider, time, Some(failure));
        }
    }

    fn retry(&mut self, step: u64, time: f64, data: &Value) {
        let delay = data.get("delayMs").and_then(Value::as_f64).unwrap_or(0.0);
        if let Some(name) = data.get("provider").and_then(Value::as_str) {
            self.provider = name.to_owned();
        }
        let Some(turn) = self.open.as_mut() else { return };
        let step = turn.step(step, &self.provider);
        step.waits_ms.push(delay);
        step.wait_policies.push(data.get("policyKey").and_then(Value::as_str).map(str::to_owned));
        // The failed attempt ends when its retry is decided, so a candidate deciding the same
        // wait sends when the recorded retry was sent.
        if let Some(failed) = step.attempts.last_mut().filter(|attempt| attempt.failure.is_some()) {
            failed.ended_ms = failed.ended_ms.max(time);
        }
        turn.pending_send = Some(time + delay);
    }

    /// Closes the open turn; a turn that made no request is not replayed.
    fn end_turn(&mut self, time: f64, data: &Value) {
        let Some(turn) = self.open.take() else { return };
        let outcome = match data.pointer("/reason/kind").and_then(Value::as_str) {
            Some("completed" | "max-tokens") => TurnOutcome::Completed,
            Some("error") => TurnOutcome::Failed,
            _ => TurnOutcome::Aborted,
        };
        if turn.steps.iter().any(|step| !step.attempts.is_empty()) {
            let session = self.session.clone();
            self.turns.push(RecordedTurn { session, turn: turn.turn, steps: turn.steps, outcome, ended_ms: time });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(sent_ms: f64, ended_ms: f64, code: Option<&str>) -> RecordedAttempt {
        RecordedAttempt { sent_ms, ended_ms, failure: code.map(|code| Failure::new(code, "m")), provider: "p".into() }
    }

    #[test]
    fn a_request_gets_the_answer_of_the_last_attempt_sent_at_or_before_it() {
        let attempts =
            [attempt(0.0, 100.0, Some("SERVER")), attempt(600.0, 700.0, Some("SERVER")), attempt(1700.0, 1800.0, None)];
        assert_eq!(answer_at(&attempts, -5.0).sent_ms, 0.0);
        assert_eq!(answer_at(&attempts, 599.0).sent_ms, 0.0);
        assert_eq!(answer_at(&attempts, 600.0).sent_ms, 600.0);
        assert_eq!(answer_at(&attempts, 9999.0).sent_ms, 1700.0);
    }

    #[test]
    fn outcomes_read_as_the_json_says_them() {
        let names: Vec<&str> = [
            TurnOutcome::Completed,
            TurnOutcome::Failed,
            TurnOutcome::GaveUp,
            TurnOutcome::StillRetrying,
            TurnOutcome::Aborted,
        ]
        .iter()
        .map(|outcome| outcome.as_str())
        .collect();
        assert_eq!(names, ["completed", "failed", "gave-up", "still-retrying", "aborted"]);
    }
}
