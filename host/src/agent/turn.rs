//! The turn loop: turns and steps, streaming requests, recording failed attempts; the
//! [`retry`](super::retry) step decides and waits.
//!
//! ```text
//! v4: agent/inbox/spliced (the message received; durable) → turn/start → v4: agent/inbox/spliced
//! → step/start → user/message → request/header (first time, or when it changed)
//! loop: commit, send the request built from surface history, stream the text
//!   success → assistant/message → step/end → turn/end completed
//!   failure → assistant/attempt → retry step: again on the SAME step, or
//!           → switch: route/switch → request/header (the new route) → the SAME step, now
//!           → no retry: step/end → turn/end error
//! ```
//!
//! A turn starts on the route the first `agent/route` row names (else the agent row's); a
//! resumed turn on the route the log's last `request/header` names.
//!
//! Cancellation beats any decision: during streaming, the waterfall or a wait, the turn ends
//! `aborted/user`.

use std::sync::Arc;

use abi_stable::std_types::ROption;
use dsh_abi::events::{
    self, AbortedBy, AssistantAttempt, EndReason, EventData, FirstToken, InboxSpliced, RequestHeader, RouteSwitched,
    StepEnd, StepStart, TurnStart,
};
use dsh_abi::{js, Continuation, Failure, RequestErrorPayload, RequestSuccess, RouteSwitch, SessionStartSource};
use serde_json::{json, Map, Value};

use super::assembly::Assembly;
use super::cancel::Cancel;
use super::config::AgentConfig;
use super::retry::{retry_step, RetryParts, RetryStep};
use super::route::Route;
use super::view::TurnView;
use crate::context::{call_context, Services};
use crate::llm::openai::{AttemptFailure, ChatMessage, ChatRequest, Completion, Finish, ToolCall};
use dsh_session::format::Format;
use dsh_session::log::{check_line_fits, AppendError, NewEvent, SessionLog};

/// How a step ended: the turn with it, or with tool results the next step sends.
enum StepOutcome {
    TurnEnded(TurnEnd),
    ToolsRan,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    Completed,
    MaxTokens,
    Error(Failure),
    /// Cancelled by the user.
    Aborted,
}

/// A user message to run as a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct UserInput {
    pub id: String,
    pub text: String,
    /// The message's `source`, e.g. `{kind: user}`.
    pub source: Value,
}

impl UserInput {
    /// The `user/message` data this input is recorded as; `Err` when it cannot be one log line,
    /// before anything of the turn is written.
    pub fn message_data(&self) -> Result<String, AppendError> {
        let message = events::UserMessage {
            id: self.id.clone(),
            role: "user",
            content: vec![json!({"type": "text", "text": self.text})],
            source: self.source.clone(),
        };
        let data = js::to_string(&message);
        check_line_fits(events::USER_MESSAGE, &data)?;
        Ok(data)
    }
}

/// `request/header`'s `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderReason {
    Initial,
    Resume,
    Change,
}

/// A session being run: its log, its routes and listeners, the clock and cancellation.
pub struct Agent {
    pub log: SessionLog,
    pub assembly: Assembly,
    pub services: Arc<dyn Services>,
    pub cancel: Cancel,
    pub view: Box<dyn TurnView>,
    /// The route the running turn is on, when it is not the agent row's.
    pub turn_route: Option<String>,
}

/// The most failover hops a step makes in a row without a retry wait between them: enough to try
/// every route of a large failover list, far from a storm. Rows that send a step back and forth
/// between dead routes end it with `FAILOVER_LOOP` when it is reached.
pub const MAX_HOPS_IN_A_ROW: u32 = 8;

/// One hop a row asked for: the failure that moved the step, the row, the request's size and how
/// many hops in a row this is.
struct Hop<'a> {
    code: &'a str,
    row_id: &'a str,
    tokens: u64,
    in_a_row: u32,
}

/// The most of a failed attempt's text its record keeps.
pub const ATTEMPT_TEXT_LIMIT: usize = 64 * 1024;

impl Agent {
    pub(super) fn now_ms(&self) -> u64 {
        self.services.now_ms() as u64
    }

    pub(super) fn append_typed<T: EventData>(&mut self, data: &T) -> Result<(), AppendError> {
        let now = self.now_ms();
        self.log.append(NewEvent::typed(data), now).map(|_| ())
    }

    /// Closes the step and the turn with `reason`.
    fn end_turn(&mut self, turn: u64, step: u64, reason: EndReason) -> Result<(), AppendError> {
        self.append_typed(&StepEnd { turn, step })?;
        self.append_typed(&events::TurnEnd { turn, reason })
    }

    fn route(&self) -> &Route {
        &self.assembly.routes[self.route_name()]
    }

    fn route_name(&self) -> &str {
        route_name(&self.assembly, &self.turn_route)
    }

    pub(super) fn agent(&self) -> &AgentConfig {
        &self.assembly.agent
    }

    /// The agent's model, or else its route's; on another route than the agent row's, that
    /// route's.
    fn model(&self) -> &str {
        match &self.turn_route {
            Some(route) if *route != self.assembly.agent.provider => &self.assembly.routes[route].model,
            _ => self.assembly.model(),
        }
    }

    /// The route a turn starts on: for a resume, the one the log's last header names; else the
    /// first an `agent/route` row chooses (a row that fails, names no known route, or one whose
    /// `contextWindow` is below the turn's first request of about `tokens` tokens, is passed).
    fn starting_route(&self, turn: u64, reason: HeaderReason, tokens: u64) -> Option<String> {
        let known = |route: &String| self.assembly.routes.contains_key(route);
        let fits = |route: &String| {
            let window = self.assembly.routes.get(route).and_then(|route| route.context_window);
            let fits = window.is_none_or(|window| window >= tokens);
            if !fits {
                tracing::info!(
                    "not starting the turn on {route}: its contextWindow is below the request ({tokens} tokens)"
                );
            }
            fits
        };
        if reason == HeaderReason::Resume {
            let header: Option<Value> = self.log.last_request_header().and_then(|last| serde_json::from_str(last).ok());
            let logged = header.as_ref().and_then(|header| header["header"]["config"]["provider"].as_str());
            if let Some(route) = logged.map(str::to_owned).filter(known) {
                return Some(route);
            }
        }
        let mut context = call_context(self.log.index(), self.cancel.flag(), false, self.services.as_ref());
        context.session.routes = Some(&self.assembly.routes);
        crate::plugin::instance::call_rows(self.assembly.may_wait, || {
            self.assembly.route_rows.iter().find_map(|row| match row.choose_route(turn, &context) {
                Ok(route) => route.filter(known).filter(fits),
                Err(err) => {
                    tracing::warn!("row \"{}\": {}", row.row_id(), err.message);
                    None
                }
            })
        })
    }

    /// Raises `agent/session-start` and returns the continuations listeners ask for, each with
    /// the package of the row that asked.
    pub fn session_start(&self, source: SessionStartSource, pending_input: bool) -> Vec<(String, Continuation)> {
        let context = call_context(self.log.index(), self.cancel.flag(), pending_input, self.services.as_ref());
        let mut continuations = Vec::new();
        for row in &self.assembly.session_start {
            match row.on_session_start(source, &context) {
                Ok(Some(continuation)) => continuations.push((row.package().to_owned(), continuation)),
                Ok(None) => {}
                Err(err) => tracing::warn!("row \"{}\": {}", row.row_id(), err.message),
            }
        }
        continuations
    }

    fn request(&self) -> ChatRequest {
        let mut messages = Vec::new();
        if let Some(system) = &self.agent().system {
            messages.push(ChatMessage::text("system", system.clone()));
        }
        messages.extend(self.log.surface().iter().map(|message| ChatMessage {
            role: message.role,
            content: message.text.clone(),
            tool_calls: message.tool_calls.clone(),
            tool_call_id: message.tool_call_id.clone(),
        }));
        ChatRequest {
            model: self.model().to_owned(),
            messages,
            tools: self.assembly.tools.definitions(),
            session_id: Some(self.log.id().to_owned()),
        }
    }

    /// What `request/header` records of the requests this turn sends: `{config: {provider,
    /// model, maxTokens?, reasoningEffort?}, adapterDefaults?, system?}`, as the reference does.
    fn request_header(&self) -> Value {
        let route = self.route();
        let mut config = Map::new();
        config.insert("provider".into(), Value::from(route.provider.as_str()));
        config.insert("model".into(), Value::from(self.model()));
        let adapter_defaults = route.wire.extend_header_config(&mut config);
        let mut header = Map::new();
        header.insert("config".into(), Value::Object(config));
        if let Some(defaults) = adapter_defaults {
            header.insert("adapterDefaults".into(), defaults);
        }
        if let Some(system) = &self.agent().system {
            header.insert("system".into(), Value::from(system.as_str()));
        }
        Value::Object(header)
    }

    /// Runs one turn for `input`. `Err` only when the log can no longer be written (or the host
    /// built an invalid event); every other ending is a [`TurnEnd`].
    pub async fn run_turn(&mut self, input: UserInput, reason: HeaderReason) -> Result<TurnEnd, AppendError> {
        let end = self.run_steps(input, reason).await?;
        self.view.turn_ended(matches!(end, TurnEnd::Completed | TurnEnd::MaxTokens));
        Ok(end)
    }

    async fn run_steps(&mut self, input: UserInput, reason: HeaderReason) -> Result<TurnEnd, AppendError> {
        let turn = self.log.rules().last_turn() + 1;
        let message = input.message_data()?;
        self.assembly.counters.begin_turn();
        let tokens = match self.assembly.route_rows.is_empty() {
            true => 0,
            false => request_tokens(&self.request()) + (input.text.len() as u64).div_ceil(4),
        };
        self.turn_route = self.starting_route(turn, reason, tokens);
        self.receive(&input, &message)?;
        self.append_typed(&TurnStart { turn })?;
        if self.log.rules().format() == Format::V4 {
            self.append_typed(&InboxSpliced::taken())?;
        }
        self.append_typed(&StepStart { turn, step: 1 })?;
        let now = self.now_ms();
        self.log.append(NewEvent::raw(events::USER_MESSAGE, message), now)?;
        self.append_header(reason)?;
        let mut step = 1;
        loop {
            if let StepOutcome::TurnEnded(end) = self.run_step(turn, step).await? {
                return Ok(end);
            }
            self.append_typed(&StepEnd { turn, step })?;
            if self.cancel.is_cancelled() {
                return self.end_between_steps(turn, EndReason::Aborted { reason: AbortedBy::User }, TurnEnd::Aborted);
            }
            if step >= self.agent().max_steps {
                let failure = Failure::new(
                    "MAX_STEPS",
                    format!("the turn took {step} steps, the most the agent row allows (maxSteps); its tool results are in the log"),
                );
                return self.end_between_steps(
                    turn,
                    EndReason::Error { error: failure.clone() },
                    TurnEnd::Error(failure),
                );
            }
            step += 1;
            self.append_typed(&StepStart { turn, step })?;
        }
    }

    /// Records the turn's message as received — in a v4 log as DeepSeek Harness 0.2 does, an
    /// `agent/inbox/spliced` made durable before the turn starts, which a program waiting for
    /// its message (the SDK) looks for — and tells the view.
    fn receive(&mut self, input: &UserInput, message: &str) -> Result<(), AppendError> {
        if self.log.rules().format() == Format::V4 {
            let data: Value = serde_json::from_str(message).expect("a user message's data is JSON");
            self.append_typed(&InboxSpliced::received(data))?;
            self.log.commit()?;
        }
        self.view.input_received(&input.id);
        Ok(())
    }

    /// Ends the turn after its last step closed.
    fn end_between_steps(&mut self, turn: u64, reason: EndReason, end: TurnEnd) -> Result<TurnEnd, AppendError> {
        self.append_typed(&events::TurnEnd { turn, reason })?;
        self.log.commit()?;
        Ok(end)
    }

    /// One step: model requests (retried through the waterfall on the same step, with the same
    /// history) until one is answered; an answer asking for tools runs them.
    async fn run_step(&mut self, turn: u64, step: u64) -> Result<StepOutcome, AppendError> {
        let mut hops_in_a_row = 0;
        loop {
            self.log.commit()?;
            if self.cancel.is_cancelled() {
                return self.abort(turn, step, None).map(StepOutcome::TurnEnded);
            }
            let request = self.request();
            let shown = format!("{} ({})", self.route_name(), self.model());
            self.view.attempt_started(&shown);
            let route = &self.assembly.routes[route_name(&self.assembly, &self.turn_route)];
            let (view, log, services) = (&mut self.view, &mut self.log, &self.services);
            let mut first_token = None;
            let mut on_text = |delta: &str| {
                if first_token.is_none() {
                    let now = services.now_ms() as u64;
                    first_token = Some(log.append(NewEvent::typed(&FirstToken { turn, step }), now).map(drop));
                }
                view.text(delta)
            };
            let attempt = tokio::select! {
                attempt = route.client.stream(&request, &mut on_text) => attempt,
                () = self.cancel.cancelled() => return self.abort(turn, step, Some(String::new())).map(StepOutcome::TurnEnded),
            };
            first_token.transpose()?;
            self.view.attempt_ended(attempt.is_ok());
            let attempt_failure = match attempt {
                Ok(completion) => match self.complete(turn, step, completion).await? {
                    Ok(outcome) => return Ok(outcome),
                    Err(failure) => AttemptFailure { failure, partial_text: String::new() },
                },
                Err(attempt) => attempt,
            };
            let failure = attempt_failure.failure;
            self.append_attempt(turn, step, &failure, attempt_failure.partial_text)?;
            let code = failure.code.to_string();
            let tokens = request_tokens(&request);
            match self.decide_retry(turn, step, failure, tokens).await? {
                RetryStep::Again => hops_in_a_row = 0,
                RetryStep::Switch { switch, row_id } => {
                    hops_in_a_row += 1;
                    let hop = Hop { code: &code, row_id: &row_id, tokens, in_a_row: hops_in_a_row };
                    if let Err(failure) = self.switch_route(turn, step, switch, hop)? {
                        return self.fail(turn, step, failure).map(StepOutcome::TurnEnded);
                    }
                }
                RetryStep::GiveUp(failure) => return self.fail(turn, step, failure).map(StepOutcome::TurnEnded),
                RetryStep::Cancelled => return self.abort(turn, step, None).map(StepOutcome::TurnEnded),
            }
        }
    }

    /// Runs the waterfall for a failed request of `turn`/`step`.
    async fn decide_retry(
        &mut self,
        turn: u64,
        step: u64,
        failure: Failure,
        request_tokens: u64,
    ) -> Result<RetryStep, AppendError> {
        let payload = RequestErrorPayload {
            model: self.model().into(),
            endpoint_host: self.route().endpoint_host.as_str().into(),
            turn,
            step,
            provider: self.route().provider.as_str().into(),
            failure,
            retry_policy: ROption::RSome(self.route().policy.clone()),
            request_tokens,
        };
        let parts = RetryParts {
            log: &mut self.log,
            routes: &self.assembly.routes,
            listeners: &self.assembly.listeners,
            may_wait: self.assembly.may_wait,
            services: self.services.as_ref(),
            cancel: &self.cancel,
            view: self.view.as_mut(),
        };
        retry_step(parts, &payload).await
    }

    /// Carries out a row's failover hop: `route/switch`, then the new route's `request/header`;
    /// the step then goes out again at once. A hop the host refuses ([`Agent::refused_hop`]) ends
    /// the turn with the failure (`Ok(Err)`).
    fn switch_route(
        &mut self,
        turn: u64,
        step: u64,
        switch: RouteSwitch,
        hop: Hop<'_>,
    ) -> Result<Result<(), Failure>, AppendError> {
        let from = self.route_name().to_owned();
        let to = switch.route.into_string();
        if let Some(failure) = self.refused_hop(&from, &to, &hop) {
            tracing::warn!("{}", failure.message);
            return Ok(Err(failure));
        }
        let hop = RouteSwitched {
            turn,
            step,
            from,
            to,
            code: hop.code.to_owned(),
            row: hop.row_id.to_owned(),
            reason: switch.reason.into_string(),
        };
        self.append_typed(&hop)?;
        self.turn_route = Some(hop.to.clone());
        self.append_header(HeaderReason::Change)?;
        self.view.route_switched(&hop.from, &hop.to, &hop.code);
        Ok(Ok(()))
    }

    /// Why the host does not carry out a hop from `from` to `to`: the route the step is on, a
    /// route no provider row serves, one whose `contextWindow` is below the request, or one hop
    /// too many in a row ([`MAX_HOPS_IN_A_ROW`], rows that send a step back and forth).
    fn refused_hop(&self, from: &str, to: &str, hop: &Hop<'_>) -> Option<Failure> {
        let row = hop.row_id;
        let window = self.assembly.routes.get(to).and_then(|route| route.context_window);
        let (code, why) = match () {
            () if to == from => (hop.code, "the route the step is on".to_owned()),
            () if !self.assembly.routes.contains_key(to) => (hop.code, "a route no provider row serves".to_owned()),
            () if window.is_some_and(|window| window < hop.tokens) => (
                hop.code,
                format!("whose contextWindow ({}) is below the request (about {} tokens)", window.unwrap_or(0), hop.tokens),
            ),
            () if hop.in_a_row > MAX_HOPS_IN_A_ROW => (
                "FAILOVER_LOOP",
                format!("hop {} in a row without a retry wait, more than a step may make ({MAX_HOPS_IN_A_ROW}); the failover rows send it back and forth (last failure: {})", hop.in_a_row, hop.code),
            ),
            () => return None,
        };
        Some(Failure::new(code, format!("row \"{row}\" switched the step to {to:?}, {why}")))
    }

    /// Appends `request/header` when the header changed since the last one, or on a resume.
    fn append_header(&mut self, reason: HeaderReason) -> Result<(), AppendError> {
        let header = self.request_header();
        if !self.header_unchanged(&header) || reason == HeaderReason::Resume {
            let reason = match (reason, self.log.last_request_header()) {
                (HeaderReason::Resume, _) => "resume",
                (_, None) => "initial",
                _ => "change",
            };
            self.append_typed(&RequestHeader { header, reason })?;
        }
        Ok(())
    }

    /// Whether the last `request/header` already says `header`. A v4 log keeps the system prompt
    /// out of it, as its surface's head, so there the two are compared apart.
    fn header_unchanged(&self, header: &Value) -> bool {
        let last = self.log.last_request_header().and_then(|last| serde_json::from_str::<Value>(last).ok());
        let Some(last) = last.and_then(|mut last| last.get_mut("header").map(Value::take)) else { return false };
        let Some(v4) = self.log.rules().v4() else { return last == *header };
        let mut header = header.clone();
        let prompt = header.as_object_mut().and_then(|header| header.remove("system"));
        let head = v4.system_head().map(|(_, text)| text);
        last == header && head == Some(prompt.as_ref().and_then(Value::as_str).unwrap_or_default())
    }

    /// Records a successful answer; an answer asking for tools runs them (the step goes on),
    /// any other ends the turn. An answer too long to be logged as one line is a failed attempt
    /// instead (`Ok(Err(failure))`), retried like any other.
    async fn complete(
        &mut self,
        turn: u64,
        step: u64,
        mut completion: Completion,
    ) -> Result<Result<StepOutcome, Failure>, AppendError> {
        unique_call_ids(&mut completion.tool_calls);
        let mut content = Vec::new();
        if !completion.reasoning.is_empty() {
            content.push(json!({"type": "reasoning", "text": completion.reasoning}));
        }
        if !completion.text.is_empty() || completion.tool_calls.is_empty() {
            content.push(json!({"type": "text", "text": completion.text}));
        }
        content.extend(
            completion.tool_calls.iter().map(
                |call| json!({"type": "tool-call", "id": call.id, "name": call.name, "arguments": call.arguments}),
            ),
        );
        let source = json!({"kind": "model", "provider": self.route().provider, "model": self.model()});
        let message = json!({"role": "assistant", "content": content, "source": source, "id": self.services.new_id()});
        let answer = events::AssistantMessage { turn, step, message, usage: completion.usage };
        match self.append_typed(&answer) {
            Err(AppendError::TooLong { bytes, .. }) => {
                let message =
                    format!("the answer would take a log line of {bytes} bytes, more than a session log line may hold");
                return Ok(Err(Failure::new("UNKNOWN", message)));
            }
            appended => appended?,
        }
        self.tell_success(turn, step);
        if !completion.tool_calls.is_empty() {
            self.run_tools(turn, step, &completion.tool_calls).await?;
            return Ok(Ok(StepOutcome::ToolsRan));
        }
        let (reason, end) = match completion.finish {
            Finish::Stop => (EndReason::Completed, TurnEnd::Completed),
            Finish::Length => (EndReason::MaxTokens, TurnEnd::MaxTokens),
        };
        self.end_turn(turn, step, reason)?;
        self.log.commit()?;
        Ok(Ok(StepOutcome::TurnEnded(end)))
    }

    /// Tells the `agent/request-success` listeners the request of `turn`/`step` was answered (a
    /// listener that fails is logged, and changes nothing).
    fn tell_success(&self, turn: u64, step: u64) {
        if self.assembly.request_success.is_empty() {
            return;
        }
        let route = self.route();
        let success = RequestSuccess {
            turn,
            step,
            provider: route.provider.as_str().into(),
            endpoint_host: route.endpoint_host.as_str().into(),
        };
        let mut context = call_context(self.log.index(), self.cancel.flag(), false, self.services.as_ref());
        context.session.routes = Some(&self.assembly.routes);
        crate::plugin::instance::call_rows(self.assembly.may_wait, || {
            for row in &self.assembly.request_success {
                if let Err(err) = row.on_request_success(&success, &context) {
                    tracing::warn!("row \"{}\": {}", row.row_id(), err.message);
                }
            }
        });
    }

    /// Records a failed attempt (`assistant/attempt`, ignorable) with the text it streamed — at
    /// most its first [`ATTEMPT_TEXT_LIMIT`] bytes, with `textBytes` saying how long it was.
    fn append_attempt(&mut self, turn: u64, step: u64, failure: &Failure, text: String) -> Result<(), AppendError> {
        let text_bytes = text.len();
        let mut attempt = AssistantAttempt { turn, step, failure: failure.clone(), text: Some(text), text_bytes: None };
        if let Some(text) = attempt.text.as_mut().filter(|text| text.len() > ATTEMPT_TEXT_LIMIT) {
            let mut cut = ATTEMPT_TEXT_LIMIT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            attempt.text_bytes = Some(text_bytes as u64);
        }
        attempt.text = attempt.text.filter(|text| !text.is_empty());
        self.append_typed(&attempt)
    }

    /// Ends the turn with an error.
    fn fail(&mut self, turn: u64, step: u64, failure: Failure) -> Result<TurnEnd, AppendError> {
        self.end_turn(turn, step, EndReason::Error { error: failure.clone() })?;
        self.log.commit()?;
        Ok(TurnEnd::Error(failure))
    }

    /// Ends the turn as cancelled by the user; `streamed` holds the text of a request that was
    /// cut off (recorded as an `ABORTED` attempt).
    fn abort(&mut self, turn: u64, step: u64, streamed: Option<String>) -> Result<TurnEnd, AppendError> {
        if let Some(text) = streamed {
            self.append_attempt(turn, step, &Failure::new("ABORTED", "the request was cancelled"), text)?;
        }
        self.end_turn(turn, step, EndReason::Aborted { reason: AbortedBy::User })?;
        self.log.commit()?;
        Ok(TurnEnd::Aborted)
    }
}

/// The route a turn is on: the one it moved to, else the agent row's. (A function of the two
/// fields, so the turn loop can hold the route while it lends the view out.)
fn route_name<'a>(assembly: &'a Assembly, turn_route: &'a Option<String>) -> &'a str {
    turn_route.as_deref().unwrap_or(&assembly.agent.provider)
}

/// Gives every call of a step an id of its own before anything is recorded: a later call whose
/// id an earlier one has (a provider that sends one id twice, or an id equal to the `call-N` a
/// call without one is given) is renamed `<id>-2` (`-3`, …), with a warning. Each call and its
/// result are then recorded under one id, and no result can answer the wrong call.
fn unique_call_ids(calls: &mut [ToolCall]) {
    let mut taken: Vec<String> = Vec::with_capacity(calls.len());
    for call in calls.iter_mut() {
        if taken.contains(&call.id) {
            let renamed = (2..).map(|n| format!("{}-{n}", call.id)).find(|id| !taken.contains(id)).expect("unbounded");
            tracing::warn!(
                "the provider gave two tool calls of one step the id {}; the later one ({}) is recorded as {}",
                json!(call.id),
                call.name,
                json!(renamed)
            );
            call.id = renamed;
        }
        taken.push(call.id.clone());
    }
}

/// The host's estimate of a request's size in tokens: the UTF-8 bytes of its text, tool calls
/// and tool definitions over 4, rounded up (about 4 bytes a token in English; a route's
/// `contextWindow` is matched against it).
fn request_tokens(request: &ChatRequest) -> u64 {
    let calls = |message: &ChatMessage| -> usize {
        message.tool_calls.iter().map(|call| call.name.len() + call.arguments.len()).sum()
    };
    let text: usize = request.messages.iter().map(|message| message.content.len() + calls(message)).sum();
    let tools: usize = request.tools.iter().map(|tool| tool.to_string().len()).sum();
    (text + tools).div_ceil(4) as u64
}
