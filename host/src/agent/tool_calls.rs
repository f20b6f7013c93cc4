//! A step's tool calls as the turn runs them. Every `tool/call`, with the call's key, is durable
//! before any call is sent; the calls run at most `maxParallelTools` at once; the id of a task a
//! call became is durable as soon as the server names it; a lost answer is resolved by its
//! tool's rule ([`crate::tools::Rule`]) — a `tool/resolution` durable before anything is sent
//! again, once per call in a process; and each `tool/result` is durable as soon as it and the
//! results before it (the model's order) are in, citing its call. After a crash, the calls the
//! log left open are resolved the same way before the turn is closed.

use std::sync::Arc;

use dsh_abi::events::{self, ToolResolution, ToolTask};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::turn::Agent;
use crate::llm::openai::ToolCall;
use crate::tools::{idempotency_key, unknown_outcome, Called, Notice, Rule, ToolOutcome, Tools};
use dsh_session::log::{AppendError, NewEvent};

/// The result of a call that had not finished when the turn was cancelled.
const CANCELLED_CALL: &str = "the turn was cancelled before this call finished";

/// The result of a call the turn was cancelled before sending.
const UNSENT_CALL: &str = "the turn was cancelled before this call was sent; the tool did not run";

/// Why a call the log left open is resolved.
const STOPPED: &str = "dsh stopped before the call's answer was recorded";

/// What a running call does: send the call, or poll the task it became.
enum Work {
    Call,
    Poll(String),
}

/// A step's calls as they run, at most `limit` at once: started in the model's order, their
/// outcomes kept by position as they come back, in any order.
struct ToolBatch<'a> {
    calls: &'a [ToolCall],
    keys: Vec<String>,
    limit: usize,
    /// How many calls were started (the first `started` of `calls`).
    started: usize,
    running: futures_util::stream::FuturesUnordered<futures_util::future::BoxFuture<'a, (usize, Called)>>,
    outcomes: Vec<Option<ToolOutcome>>,
    /// The task each call became, once the server named it.
    tasks: Vec<Option<String>>,
    /// Whether a lost answer of the call was resolved in this process already.
    resolved: Vec<bool>,
    tools: Arc<Tools>,
    notices: UnboundedSender<(usize, Notice)>,
}

impl<'a> ToolBatch<'a> {
    fn new(calls: &'a [ToolCall], keys: Vec<String>, limit: usize, tools: Arc<Tools>) -> (Self, Receiver) {
        let (notices, receiver) = unbounded_channel();
        let batch = ToolBatch {
            calls,
            keys,
            limit: limit.max(1),
            started: 0,
            running: Default::default(),
            outcomes: calls.iter().map(|_| None).collect(),
            tasks: vec![None; calls.len()],
            resolved: vec![false; calls.len()],
            tools,
            notices,
        };
        (batch, receiver)
    }

    /// Starts calls, in order, until `limit` run.
    fn start_more(&mut self) {
        while self.running.len() < self.limit && self.started < self.calls.len() {
            self.launch(self.started, Work::Call);
            self.started += 1;
        }
    }

    fn launch(&mut self, index: usize, work: Work) {
        let (call, key, tools) = (&self.calls[index], self.keys[index].clone(), Arc::clone(&self.tools));
        let notices = self.notices.clone();
        self.running.push(Box::pin(async move {
            let notify = move |notice| {
                let _ = notices.send((index, notice));
            };
            let called = match work {
                Work::Call => tools.call(call, &key, &notify).await,
                Work::Poll(task) => tools.poll(call, &task, &notify).await,
            };
            (index, called)
        }));
    }

    /// The next call to come back (forever when none runs).
    async fn next_done(&mut self) -> (usize, Called) {
        match self.running.next().await {
            Some(done) => done,
            None => std::future::pending().await,
        }
    }

    /// Keeps the outcomes of calls that have already come back, without waiting for any; a lost
    /// answer found now is not resolved (the turn was cancelled).
    fn take_finished(&mut self) {
        use futures_util::FutureExt;
        while let Some(Some((index, called))) = self.running.next().now_or_never() {
            self.outcomes[index] = Some(match called {
                Called::Outcome(outcome) => outcome,
                Called::Lost(why) => unknown_outcome(&why, &self.keys[index]),
            });
        }
    }
}

type Receiver = UnboundedReceiver<(usize, Notice)>;

impl Agent {
    /// Runs a step's tool calls (see the module's doc). A cancelled turn keeps every result that
    /// had come back; a call still running is recorded as outcome unknown, one never sent as not
    /// run.
    pub(super) async fn run_tools(&mut self, turn: u64, step: u64, calls: &[ToolCall]) -> Result<(), AppendError> {
        let mut call_seqs = Vec::with_capacity(calls.len());
        let mut keys = Vec::with_capacity(calls.len());
        for call in calls {
            let key = idempotency_key(self.log.id(), turn, step, &call.id);
            let event = events::ToolCallEvent {
                turn,
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                idempotency_key: Some(key.clone()),
            };
            let now = self.now_ms();
            call_seqs.push(self.log.append(NewEvent::typed(&event), now)?.seq);
            keys.push(key);
            self.view.tool_started(call);
        }
        self.log.commit()?;
        let tools = Arc::clone(&self.assembly.tools);
        let (mut batch, mut notices) = ToolBatch::new(calls, keys, self.agent().max_parallel_tools, tools);
        self.drive(turn, step, &mut batch, &mut notices, &call_seqs).await
    }

    /// Resolves the tool calls a crash left open in the log's open step, each by its tool's rule,
    /// and records their results; the turn is still open after.
    pub async fn resolve_open_calls(&mut self) -> Result<(), AppendError> {
        let open = self.log.open_calls().to_vec();
        let (Some(turn), Some(step)) = (self.log.rules().open_turn(), self.log.rules().open_step()) else {
            return Ok(());
        };
        if open.is_empty() {
            return Ok(());
        }
        let calls: Vec<ToolCall> = open
            .iter()
            .map(|open| ToolCall {
                id: open.call.call_id.clone(),
                name: open.call.name.clone(),
                arguments: open.call.arguments.clone(),
            })
            .collect();
        // A call recorded without a key (an older dsh) never sent one: it gets none to dedup by.
        let keys = open.iter().map(|open| open.call.idempotency_key.clone().unwrap_or_default()).collect();
        let call_seqs: Vec<u64> = open.iter().map(|open| open.seq).collect();
        let tools = Arc::clone(&self.assembly.tools);
        let (mut batch, mut notices) = ToolBatch::new(&calls, keys, calls.len(), tools);
        batch.started = calls.len();
        for (index, open) in open.iter().enumerate() {
            batch.tasks[index] = open.task_id.clone();
            self.resolve_lost(turn, step, &mut batch, index, STOPPED)?;
        }
        self.drive(turn, step, &mut batch, &mut notices, &call_seqs).await
    }

    /// Runs the batch to its end, recording each result in the model's order.
    async fn drive(
        &mut self,
        turn: u64,
        step: u64,
        batch: &mut ToolBatch<'_>,
        notices: &mut Receiver,
        call_seqs: &[u64],
    ) -> Result<(), AppendError> {
        let calls = batch.calls;
        let mut recorded = 0;
        while recorded < calls.len() {
            while let Some(outcome) = batch.outcomes[recorded].take() {
                self.record_tool_result(turn, step, &calls[recorded], outcome, call_seqs[recorded])?;
                recorded += 1;
                if recorded == calls.len() {
                    return Ok(());
                }
            }
            if self.cancel.is_cancelled() {
                break;
            }
            batch.start_more();
            tokio::select! {
                biased;
                Some((index, notice)) = notices.recv() => self.take_notice(turn, step, batch, index, notice)?,
                (index, called) = batch.next_done() => {
                    tracing::debug!("tool call {} ({}) came back", calls[index].id, calls[index].name);
                    match called {
                        Called::Outcome(outcome) => batch.outcomes[index] = Some(outcome),
                        Called::Lost(why) => self.resolve_lost(turn, step, batch, index, &why)?,
                    }
                }
                () = self.cancel.cancelled() => break,
            }
        }
        batch.take_finished();
        for index in recorded..calls.len() {
            let outcome = batch.outcomes[index].take().unwrap_or_else(|| match index < batch.started {
                true => unknown_outcome(CANCELLED_CALL, &batch.keys[index]),
                false => ToolOutcome::failed("TOOL_CANCELLED", UNSENT_CALL),
            });
            self.record_tool_result(turn, step, &calls[index], outcome, call_seqs[index])?;
        }
        Ok(())
    }

    /// A call's task id, durable at once; a task's progress, shown.
    fn take_notice(
        &mut self,
        turn: u64,
        step: u64,
        batch: &mut ToolBatch<'_>,
        index: usize,
        notice: Notice,
    ) -> Result<(), AppendError> {
        let call = &batch.calls[index];
        match notice {
            Notice::Task(task_id) => {
                let task = ToolTask { turn, step, call_id: call.id.clone(), task_id: task_id.clone() };
                self.append_typed(&task)?;
                self.log.commit()?;
                self.view.tool_progress(call, &format!("task {task_id}"));
                batch.tasks[index] = Some(task_id);
            }
            Notice::Progress(progress) => self.view.tool_progress(call, &progress),
        }
        Ok(())
    }

    /// Resolves a call whose answer was lost (`why`) by its tool's rule — once per call in this
    /// process; a second loss is unknown — recording the rule durably before anything is sent.
    fn resolve_lost(
        &mut self,
        turn: u64,
        step: u64,
        batch: &mut ToolBatch<'_>,
        index: usize,
        why: &str,
    ) -> Result<(), AppendError> {
        let call = &batch.calls[index];
        let key = batch.keys[index].as_str();
        let (rule, reason) = match (batch.resolved[index], key.is_empty()) {
            (true, _) => (Rule::Unknown, "its answer was already lost once in this process".to_owned()),
            (false, no_key) => match self.assembly.tools.rule(&call.name, batch.tasks[index].as_deref()) {
                (Rule::Dedup, _) if no_key => (Rule::Unknown, "it was recorded without a key to send again".to_owned()),
                rule => rule,
            },
        };
        let resolution = ToolResolution {
            turn,
            step,
            call_id: call.id.clone(),
            rule: rule.name().to_owned(),
            reason: format!("{why}; {reason}"),
        };
        self.append_typed(&resolution)?;
        self.log.commit()?;
        batch.resolved[index] = true;
        match (rule, batch.tasks[index].clone()) {
            (Rule::Unknown, _) => batch.outcomes[index] = Some(unknown_outcome(why, key)),
            (Rule::Task, Some(task)) => batch.launch(index, Work::Poll(task)),
            _ => batch.launch(index, Work::Call),
        }
        Ok(())
    }

    /// Shows and records one call's outcome, durably.
    fn record_tool_result(
        &mut self,
        turn: u64,
        step: u64,
        call: &ToolCall,
        outcome: ToolOutcome,
        call_seq: u64,
    ) -> Result<(), AppendError> {
        self.view.tool_ended(call, &outcome);
        self.append_tool_result(turn, step, call, outcome, call_seq)?;
        self.log.commit()
    }

    /// Records one `tool/result`, as DeepSeek Harness writes it: the message names its call in
    /// `source.callId` and its `tool-result` block; the event cites the call's seq.
    fn append_tool_result(
        &mut self,
        turn: u64,
        step: u64,
        call: &ToolCall,
        outcome: ToolOutcome,
        call_seq: u64,
    ) -> Result<(), AppendError> {
        if let Some(why) = self.keep_attachments(&outcome) {
            let failed = ToolOutcome::failed("TOOL_RESULT_NOT_KEPT", &why);
            return self.append_tool_result(turn, step, call, failed, call_seq);
        }
        let block = json!({"type": "tool-result", "toolCallId": call.id, "content": outcome.content, "isError": outcome.is_error});
        let message = json!({
            "source": {"kind": "tool", "callId": call.id}, "content": [block], "role": "user", "id": self.services.new_id(),
        });
        let result = events::ToolResultEvent { turn, step, message, error: outcome.error };
        let event = NewEvent { source_seqs: vec![call_seq], ..NewEvent::typed(&result) };
        let now = self.now_ms();
        match self.log.append(event, now) {
            Err(AppendError::TooLong { bytes, .. }) => {
                let why =
                    format!("the result would take a log line of {bytes} bytes, more than a session log line may hold");
                self.append_tool_result(turn, step, call, ToolOutcome::failed("TOOL_RESULT_TOO_LARGE", &why), call_seq)
            }
            appended => appended.map(|_| ()),
        }
    }

    /// Keeps a result's attachments with the session before the result names them; why not, when
    /// one cannot be kept (the result is then an error the model reads).
    fn keep_attachments(&self, outcome: &ToolOutcome) -> Option<String> {
        outcome.attachments.iter().find_map(|attachment| {
            let kept = self.log.location().keep_attachment(&attachment.id, &attachment.bytes);
            kept.err().map(|err| {
                format!("its attachment {} ({}) could not be kept: {err}", attachment.id, attachment.mime_type)
            })
        })
    }
}
