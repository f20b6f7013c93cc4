//! A session as a trajectory, the spans `dsh web`'s Trajectory view draws on a time axis: each
//! turn and step, each model attempt (its time to first token apart from its decoding, where the
//! log says when the first token came: dsh's `llm/first-token`, a v4 stream's times, v0 chunks),
//! each retry wait with its code and delay, each tool call, the messages, route hops, refused
//! retries (budget and circuit decisions) and the marks of resumed, repaired and restored turns
//! and of resolved calls. Built in one pass over a log of either format, and fed what is appended
//! after (an event it has, by its `seq`, is skipped); a span still running has no end.

use std::borrow::Cow;
use std::collections::HashMap;

use dsh_abi::events;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::reader::ReadError;
use crate::store::LogRef;
use crate::timeline::{retry_count, seconds};
use crate::vocabulary::{message_text, tool_result_failed, tool_result_text};

/// The characters of a message or result a span's label shows.
const LABEL_CHARS: usize = 120;

/// The lane a span is drawn in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    Turn,
    Model,
    Wait,
    Tool,
    Message,
    Route,
    Mark,
}

/// One row of the trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    pub lane: Lane,
    /// `turn`, `step`, `attempt`, `wait`, `tool`, `user`, `assistant`, `hop`, `refused`,
    /// `resumed`, `restored`, `resolved`.
    pub kind: &'static str,
    /// The turn it belongs to (0 before the first).
    pub turn: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Epoch milliseconds.
    pub start: f64,
    /// `None` while it lasts.
    pub end: Option<f64>,
    pub label: String,
    /// When the attempt's first token came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_token: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<f64>,
    /// How it ended: `completed`, `failed`, `error`, `aborted`, `interrupted`, `ok`,
    /// `outcome unknown`, `not started`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The first and last `seq` of the events it covers.
    pub seqs: [u64; 2],
}

/// A whole session's spans, in the order they started, and the times its events span.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Trajectory {
    pub spans: Vec<Span>,
    pub start: f64,
    pub end: f64,
}

impl Trajectory {
    /// Where the session's time went, in `buckets` equal slices of it: per slice, the
    /// milliseconds spent in model attempts, in retry waits and in tool calls (a span still
    /// running counts up to the log's last event).
    pub fn overview(&self, buckets: usize) -> Vec<[f64; 3]> {
        let mut slices = vec![[0.0; 3]; buckets];
        let width = (self.end - self.start) / buckets.max(1) as f64;
        if buckets == 0 || width <= 0.0 {
            return slices;
        }
        for span in &self.spans {
            let column = match span.lane {
                Lane::Model => 0,
                Lane::Wait => 1,
                Lane::Tool => 2,
                _ => continue,
            };
            let (start, end) = (span.start.max(self.start), span.end.unwrap_or(self.end).min(self.end));
            let first = (((start - self.start) / width) as usize).min(buckets - 1);
            let last = (((end - self.start) / width) as usize).min(buckets - 1);
            for (index, slice) in slices.iter_mut().enumerate().take(last + 1).skip(first) {
                let (from, to) = (self.start + index as f64 * width, self.start + (index + 1) as f64 * width);
                slice[column] += (end.min(to) - start.max(from)).max(0.0);
            }
        }
        slices
    }
}

/// A builder fed every event of `log` (as its reader sees them), to be fed what is appended.
pub fn read(log: &LogRef) -> Result<Builder, ReadError> {
    let mut reader = log.reader()?;
    let mut builder = Builder::default();
    while let Some(next) = reader.next_event() {
        let Ok(event) = next? else { break };
        if let (Some(seq), Some(time)) = (event.seq, event.time) {
            builder.event(event.event_type, seq as u64, time, event.data);
        }
    }
    Ok(builder)
}

/// Spans built from events fed in log order.
#[derive(Default)]
pub struct Builder {
    trajectory: Trajectory,
    /// The `seq` of the last event fed.
    last_seq: Option<u64>,
    turn: u64,
    open_turn: Option<usize>,
    open_step: Option<usize>,
    open_attempt: Option<usize>,
    open_wait: Option<usize>,
    open_tools: HashMap<String, usize>,
    provider: String,
    attempts: u64,
}

impl Builder {
    /// Whether events of `event_type` shape a span (the others only move the clock).
    pub fn wants(&self, event_type: &str) -> bool {
        const SHAPING: [&str; 18] = [
            events::TURN_START,
            events::TURN_END,
            events::STEP_START,
            events::STEP_END,
            events::USER_MESSAGE,
            events::REQUEST_HEADER,
            events::ASSISTANT_CHUNK,
            events::LLM_FIRST_TOKEN,
            events::ASSISTANT_ATTEMPT,
            events::ASSISTANT_MESSAGE,
            events::TOOL_CALL,
            events::TOOL_RESULT,
            events::TOOL_RESOLUTION,
            events::LLM_RETRY,
            events::LLM_RETRY_STARTED,
            events::LLM_RETRY_REFUSED,
            events::ROUTE_SWITCH,
            events::SESSION_END_SEED,
        ];
        SHAPING.contains(&event_type)
    }

    /// An event that shapes no span: it still extends the open spans' events and the clock.
    pub fn saw(&mut self, seq: u64, time: f64) {
        self.seen(seq, time);
    }

    /// Notes an event's seq and time; `false` for an event fed before.
    fn seen(&mut self, seq: u64, time: f64) -> bool {
        if self.last_seq.is_some_and(|last| seq <= last) {
            return false;
        }
        let trajectory = &mut self.trajectory;
        if self.last_seq.is_none() {
            (trajectory.start, trajectory.end) = (time, time);
        }
        (trajectory.start, trajectory.end) = (trajectory.start.min(time), trajectory.end.max(time));
        self.last_seq = Some(seq);
        for index in [self.open_turn, self.open_step].into_iter().flatten() {
            trajectory.spans[index].seqs[1] = seq;
        }
        true
    }

    /// Feeds one event whose `data` is JSON text (parsed only when it shapes a span).
    pub fn event(&mut self, event_type: &str, seq: u64, time: f64, data: &str) {
        if self.wants(event_type) {
            let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            self.push(event_type, seq, time, &data);
        } else {
            self.saw(seq, time);
        }
    }

    /// Feeds one log line (an event as written; anything else is skipped).
    pub fn push_line(&mut self, line: &str) {
        #[derive(Deserialize)]
        struct Envelope<'a> {
            #[serde(rename = "type", borrow)]
            event_type: Cow<'a, str>,
            seq: Option<f64>,
            time: Option<f64>,
            #[serde(borrow)]
            data: Option<&'a RawValue>,
        }
        let Ok(envelope) = serde_json::from_str::<Envelope>(line) else { return };
        if let (Some(seq), Some(time)) = (envelope.seq, envelope.time) {
            let data = envelope.data.map_or("null", RawValue::get);
            self.event(&envelope.event_type, seq as u64, time, data);
        }
    }

    /// Feeds one event.
    pub fn push(&mut self, event_type: &str, seq: u64, time: f64, data: &Value) {
        if !self.seen(seq, time) {
            return;
        }
        match event_type {
            events::TURN_START => self.turn_started(seq, time, data),
            events::TURN_END => self.turn_ended(seq, time, data),
            events::STEP_START => self.step_started(seq, time, data),
            events::STEP_END => self.close(self.open_step, seq, time, None),
            events::REQUEST_HEADER => self.request(seq, time, data),
            events::ASSISTANT_CHUNK => self.chunk(time, &data["chunk"]),
            events::LLM_FIRST_TOKEN => self.first_token(time),
            events::ASSISTANT_ATTEMPT => self.attempt_failed(seq, time, data),
            events::ASSISTANT_MESSAGE => self.answered(seq, time, data),
            events::LLM_RETRY => self.wait_started(seq, time, data),
            events::LLM_RETRY_STARTED => self.wait_ended(seq, time),
            events::TOOL_CALL => self.tool_called(seq, time, data),
            events::TOOL_RESULT => self.tool_answered(seq, time, data),
            events::TOOL_RESOLUTION => self.tool_resolved(seq, time, data),
            events::USER_MESSAGE => self.user_message(seq, time, data),
            events::LLM_RETRY_REFUSED => self.refused(seq, time, data),
            events::ROUTE_SWITCH => self.hop(seq, time, data),
            events::SESSION_END_SEED => self.mark("restored", "the session was restored here and continued", seq, time),
            _ => {}
        }
    }

    /// The spans so far, those still open without an end.
    pub fn current(&self) -> &Trajectory {
        &self.trajectory
    }

    /// The spans, those still open left without an end.
    pub fn finish(self) -> Trajectory {
        self.trajectory
    }

    fn open(&mut self, lane: Lane, kind: &'static str, seq: u64, time: f64, label: String) -> usize {
        let step = self.open_step.map(|index| self.trajectory.spans[index].step.unwrap_or_default());
        self.trajectory.spans.push(Span {
            lane,
            kind,
            turn: self.turn,
            step,
            start: time,
            end: None,
            label,
            first_token: None,
            code: None,
            delay_ms: None,
            retry_after_ms: None,
            outcome: None,
            detail: None,
            seqs: [seq, seq],
        });
        self.trajectory.spans.len() - 1
    }

    fn close(&mut self, index: Option<usize>, seq: u64, time: f64, outcome: Option<String>) {
        let Some(span) = index.map(|index| &mut self.trajectory.spans[index]) else { return };
        if span.end.is_none() {
            span.end = Some(time);
            span.seqs[1] = seq;
            if span.outcome.is_none() {
                span.outcome = outcome;
            }
        }
        match span.kind {
            "turn" => self.open_turn = None,
            "step" => self.open_step = None,
            "attempt" => self.open_attempt = None,
            "wait" => self.open_wait = None,
            _ => {}
        }
    }

    fn turn_started(&mut self, seq: u64, time: f64, data: &Value) {
        self.close_all(seq, time, "no end (the log goes on with another turn)");
        self.turn = data["turn"].as_u64().unwrap_or(self.turn + 1);
        let index = self.open(Lane::Turn, "turn", seq, time, format!("turn {}", self.turn));
        self.trajectory.spans[index].step = None;
        self.open_turn = Some(index);
    }

    fn turn_ended(&mut self, seq: u64, time: f64, data: &Value) {
        let reason = &data["reason"];
        let kind = reason["kind"].as_str().unwrap_or("?").to_owned();
        let outcome = match kind.as_str() {
            "interrupted" => "interrupted (repaired)".to_owned(),
            "aborted" => format!("aborted ({})", reason["reason"]["kind"].as_str().unwrap_or("?")),
            _ => kind.clone(),
        };
        if let Some(index) = self.open_turn {
            let error = &reason["error"];
            self.trajectory.spans[index].code = error["code"].as_str().map(str::to_owned);
            self.trajectory.spans[index].detail = error["message"].as_str().map(str::to_owned);
            self.trajectory.spans[index].label = format!("turn {} · {outcome}", self.turn);
        }
        self.close_all(seq, time, &outcome);
    }

    /// Closes every span still open — waits, attempts, tools, the step and the turn — with
    /// `outcome`.
    fn close_all(&mut self, seq: u64, time: f64, outcome: &str) {
        for index in [self.open_wait, self.open_attempt, self.open_step] {
            self.close(index, seq, time, Some(outcome.to_owned()));
        }
        let tools: Vec<usize> = self.open_tools.drain().map(|(_, index)| index).collect();
        for index in tools {
            self.close(Some(index), seq, time, Some(outcome.to_owned()));
        }
        self.close(self.open_turn, seq, time, Some(outcome.to_owned()));
    }

    fn step_started(&mut self, seq: u64, time: f64, data: &Value) {
        self.close(self.open_step, seq, time, None);
        let step = data["step"].as_u64().unwrap_or_default();
        let index = self.open(Lane::Turn, "step", seq, time, format!("step {step}"));
        self.trajectory.spans[index].step = Some(step);
        self.open_step = Some(index);
        self.attempts = 0;
    }

    fn request(&mut self, seq: u64, time: f64, data: &Value) {
        if let Some(provider) = data.pointer("/header/config/provider").and_then(Value::as_str) {
            self.provider = provider.to_owned();
        }
        self.attempt_started(seq, time);
    }

    fn attempt_started(&mut self, seq: u64, time: f64) {
        if self.open_attempt.is_some() {
            return;
        }
        self.attempts += 1;
        let label = format!("attempt {} · {}", self.attempts, self.provider);
        self.open_attempt = Some(self.open(Lane::Model, "attempt", seq, time, label));
    }

    fn first_token(&mut self, time: f64) {
        if let Some(span) = self.open_attempt.map(|index| &mut self.trajectory.spans[index]) {
            span.first_token.get_or_insert(time);
        }
    }

    /// A v0 chunk: content marks the first token, an error `finish` says why the attempt failed.
    fn chunk(&mut self, time: f64, chunk: &Value) {
        match chunk["type"].as_str() {
            Some("finish") => self.attempt_failure(&chunk["reason"]["failure"]),
            Some("usage") | None => {}
            Some(_) => self.first_token(time),
        }
    }

    fn attempt_failure(&mut self, failure: &Value) {
        if let (Some(index), true) = (self.open_attempt, failure.is_object()) {
            self.trajectory.spans[index].code = failure["code"].as_str().map(str::to_owned);
            self.trajectory.spans[index].detail = failure["message"].as_str().map(str::to_owned);
        }
    }

    /// The first token's time in a v4 `stream`: its first content record's.
    fn stream_first_token(&mut self, data: &Value) {
        let mut records = data["stream"].as_array().into_iter().flatten();
        let first = records.find_map(|record| match record["type"].as_str() {
            Some(kind) if kind.ends_with("-chunks") => record["time0"].as_f64(),
            Some("chunk") if record["chunk"]["type"] == "block-start" => record["time"].as_f64(),
            _ => None,
        });
        if let Some(time) = first {
            self.first_token(time);
        }
    }

    fn attempt_failed(&mut self, seq: u64, time: f64, data: &Value) {
        self.stream_first_token(data);
        let failure = data.get("failure").filter(|failure| failure.is_object()).or_else(|| {
            let records = data["stream"].as_array()?;
            records.last().map(|last| &last["chunk"]["reason"]["failure"])
        });
        self.attempt_failure(failure.unwrap_or(&Value::Null));
        self.close(self.open_attempt, seq, time, Some("failed".to_owned()));
    }

    fn answered(&mut self, seq: u64, time: f64, data: &Value) {
        self.stream_first_token(data);
        self.close(self.open_attempt, seq, time, Some("completed".to_owned()));
        let message = &data["message"];
        let text = message_text(message);
        let calls: Vec<&str> = message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|block| block["type"] == "tool-call")
            .filter_map(|block| block["name"].as_str())
            .collect();
        let label = match (text.trim().is_empty(), calls.is_empty()) {
            (false, _) => crate::one_line(&text, LABEL_CHARS),
            (true, false) => format!("calls {}", calls.join(", ")),
            (true, true) => "(no text)".to_owned(),
        };
        let index = self.open(Lane::Message, "assistant", seq, time, label);
        self.close(Some(index), seq, time, None);
    }

    fn wait_started(&mut self, seq: u64, time: f64, data: &Value) {
        self.close(self.open_attempt, seq, time, Some("failed".to_owned()));
        let failure = &data["failure"];
        let code = failure["code"].as_str().unwrap_or("?").to_owned();
        let delay = data["delayMs"].as_f64();
        let label = format!("retry {} · {code} · {}", retry_count(data), delay.map(seconds).unwrap_or_default());
        let index = self.open(Lane::Wait, "wait", seq, time, label);
        let span = &mut self.trajectory.spans[index];
        span.code = Some(code);
        span.delay_ms = delay;
        span.retry_after_ms = failure["providerRetryAfterMs"].as_f64().or_else(|| failure["retryAfterMs"].as_f64());
        span.detail = failure["message"].as_str().map(str::to_owned);
        self.open_wait = Some(index);
    }

    fn wait_ended(&mut self, seq: u64, time: f64) {
        self.close(self.open_wait, seq, time, Some("waited".to_owned()));
        self.attempt_started(seq, time);
    }

    fn tool_called(&mut self, seq: u64, time: f64, data: &Value) {
        let name = data["name"].as_str().unwrap_or("?");
        let index = self.open(Lane::Tool, "tool", seq, time, name.to_owned());
        self.trajectory.spans[index].detail =
            data["arguments"].as_str().map(|arguments| crate::one_line(arguments, LABEL_CHARS));
        if let Some(call) = data["callId"].as_str() {
            self.open_tools.insert(call.to_owned(), index);
        }
    }

    fn tool_answered(&mut self, seq: u64, time: f64, data: &Value) {
        let Some(index) = events::answered_call(data).and_then(|call| self.open_tools.remove(call)) else { return };
        let message = &data["message"];
        let code = data["error"]["code"].as_str();
        let outcome = match code {
            Some("TOOL_OUTCOME_UNKNOWN") => "outcome unknown",
            Some("TOOL_NOT_STARTED") => "not started",
            _ if tool_result_failed(message) => "error",
            _ => "ok",
        };
        let span = &mut self.trajectory.spans[index];
        span.code = code.map(str::to_owned);
        span.detail = Some(crate::one_line(&tool_result_text(message), LABEL_CHARS));
        self.close(Some(index), seq, time, Some(outcome.to_owned()));
    }

    /// A call whose answer was lost, and the rule that resolves it: a mark, and its call's span
    /// says so.
    fn tool_resolved(&mut self, seq: u64, time: f64, data: &Value) {
        let (call, rule) = (data["callId"].as_str().unwrap_or("?"), data["rule"].as_str().unwrap_or("?"));
        let label = format!("the answer of {call} was lost; resolved by rule {rule}");
        self.mark("resolved", &label, seq, time);
        if let Some(index) = self.open_tools.get(call) {
            self.trajectory.spans[*index].detail = data["reason"].as_str().map(str::to_owned);
        }
    }

    fn user_message(&mut self, seq: u64, time: f64, data: &Value) {
        let source = &data["source"];
        let (kind, label) = match source["kind"].as_str() {
            Some("user") => ("user", crate::one_line(&message_text(data), LABEL_CHARS)),
            Some(kind) if kind == "plugin" || kind.starts_with("plugin:") => {
                let named = kind.strip_prefix("plugin:").filter(|name| !name.is_empty());
                let plugin = named.or(source["plugin"].as_str()).unwrap_or("?");
                ("resumed", format!("{plugin} continues the interrupted turn"))
            }
            _ => return,
        };
        let lane = if kind == "resumed" { Lane::Mark } else { Lane::Message };
        let index = self.open(lane, kind, seq, time, label);
        self.close(Some(index), seq, time, None);
    }

    fn refused(&mut self, seq: u64, time: f64, data: &Value) {
        let row = data["row"].as_str().unwrap_or("?");
        let label = format!("{row} refused the retry: {}", data["reason"].as_str().unwrap_or(""));
        let index = self.open(Lane::Route, "refused", seq, time, label);
        self.close(Some(index), seq, time, None);
    }

    fn hop(&mut self, seq: u64, time: f64, data: &Value) {
        self.close(self.open_attempt, seq, time, Some("failed".to_owned()));
        let (from, to) = (data["from"].as_str().unwrap_or("?"), data["to"].as_str().unwrap_or("?"));
        let code = data["code"].as_str().unwrap_or("?");
        let index = self.open(Lane::Route, "hop", seq, time, format!("{from} → {to} · {code}"));
        self.trajectory.spans[index].code = Some(code.to_owned());
        self.trajectory.spans[index].detail = data["reason"].as_str().map(str::to_owned);
        self.close(Some(index), seq, time, None);
        self.provider = to.to_owned();
        self.attempt_started(seq, time);
    }

    fn mark(&mut self, kind: &'static str, label: &str, seq: u64, time: f64) {
        let index = self.open(Lane::Mark, kind, seq, time, label.to_owned());
        self.close(Some(index), seq, time, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of_lines(text: &str) -> Trajectory {
        let mut builder = Builder::default();
        text.lines().for_each(|line| builder.push_line(line));
        builder.finish()
    }

    fn kinds(trajectory: &Trajectory) -> Vec<&str> {
        trajectory.spans.iter().map(|span| span.kind).collect()
    }

    #[test]
    fn each_retry_of_a_recorded_chain_is_a_wait_with_its_code_and_delay_between_failed_attempts() {
        let trajectory = of_lines(include_str!("../../tests/fixtures/v4/retry-503-429-success.jsonl"));
        assert_eq!(
            kinds(&trajectory),
            ["turn", "step", "user", "attempt", "wait", "attempt", "wait", "attempt", "assistant"]
        );
        let waits: Vec<&Span> = trajectory.spans.iter().filter(|span| span.lane == Lane::Wait).collect();
        assert_eq!(waits[0].code.as_deref(), Some("SERVER"));
        assert_eq!(waits[0].label, "retry 1/5 · SERVER · 0.5s");
        assert_eq!((waits[0].start, waits[0].end), (1796304313976.0, Some(1796304314469.0)));
        assert_eq!(waits[1].code.as_deref(), Some("RATE_LIMIT"));
        let attempts: Vec<&Span> = trajectory.spans.iter().filter(|span| span.kind == "attempt").collect();
        let outcomes: Vec<_> = attempts.iter().map(|span| span.outcome.as_deref()).collect();
        assert_eq!(outcomes, [Some("failed"), Some("failed"), Some("completed")]);
        assert_eq!(attempts[0].code.as_deref(), Some("SERVER"));
        assert_eq!(attempts[1].start, waits[0].end.unwrap(), "the next attempt starts when the wait ends");
        assert_eq!(trajectory.spans[0].label, "turn 1 · completed");
        assert_eq!(trajectory.spans[0].seqs, [4, 21]);
    }

    #[test]
    fn a_stream_s_first_content_record_is_the_attempt_s_first_token() {
        let trajectory = of_lines(include_str!("../../tests/fixtures/v4/plain-success.jsonl"));
        let attempt = trajectory.spans.iter().find(|span| span.kind == "attempt").unwrap();
        let first_token = attempt.first_token.unwrap();
        assert!(attempt.start < first_token && first_token < attempt.end.unwrap(), "{attempt:?}");
    }

    #[test]
    fn dsh_s_first_token_event_splits_its_attempt() {
        let mut builder = Builder::default();
        builder.push("turn/start", 0, 0.0, &json!({"turn": 1}));
        builder.push("step/start", 1, 0.0, &json!({"turn": 1, "step": 1}));
        builder.push("request/header", 2, 10.0, &json!({"header": {"config": {"provider": "p"}}}));
        builder.push("llm/first-token", 3, 250.0, &json!({"turn": 1, "step": 1}));
        builder.push("assistant/message", 4, 900.0, &json!({"turn": 1, "step": 1, "message": {"content": []}}));
        let attempt = builder.finish().spans.into_iter().find(|span| span.kind == "attempt").unwrap();
        assert_eq!((attempt.start, attempt.first_token, attempt.end), (10.0, Some(250.0), Some(900.0)));
    }

    #[test]
    fn a_tool_call_spans_from_its_call_to_its_result_and_a_repaired_one_is_outcome_unknown() {
        let trajectory = of_lines(include_str!("../../tests/fixtures/v4/tool-call-read.jsonl"));
        let tool = trajectory.spans.iter().find(|span| span.lane == Lane::Tool).unwrap();
        assert_eq!((tool.label.as_str(), tool.outcome.as_deref()), ("read", Some("ok")));
        assert_eq!(tool.seqs, [14, 15]);
        let mut builder = Builder::default();
        builder.push("turn/start", 0, 10.0, &json!({"turn": 1}));
        builder.push("step/start", 1, 10.0, &json!({"turn": 1, "step": 1}));
        builder.push("tool/call", 2, 11.0, &json!({"turn": 1, "step": 1, "callId": "c", "name": "pay"}));
        let result = json!({"message": {"role": "tool", "toolCallId": "c", "isError": true, "content": []},
            "error": {"code": "TOOL_OUTCOME_UNKNOWN"}});
        builder.push("tool/result", 3, 20.0, &result);
        builder.push("turn/end", 4, 20.0, &json!({"turn": 1, "reason": {"kind": "interrupted"}}));
        let trajectory = builder.finish();
        assert_eq!(trajectory.spans[2].outcome.as_deref(), Some("outcome unknown"));
        assert_eq!(trajectory.spans[0].label, "turn 1 · interrupted (repaired)");
    }

    #[test]
    fn a_wait_the_user_stopped_ends_with_the_turn_and_a_running_turn_has_no_end() {
        let mut builder = Builder::default();
        builder.push("turn/start", 0, 0.0, &json!({"turn": 1}));
        builder.push("step/start", 1, 0.0, &json!({"turn": 1, "step": 1}));
        builder.push("request/header", 2, 1.0, &json!({"header": {"config": {"provider": "p"}}}));
        let retry = json!({"retry": 1, "maxRetries": 2, "delayMs": 30000, "failure": {"code": "SERVER"}});
        builder.push("llm/retry", 3, 5.0, &retry);
        builder.push(
            "turn/end",
            4,
            9.0,
            &json!({"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "user"}}}),
        );
        builder.push("turn/start", 5, 10.0, &json!({"turn": 2}));
        let trajectory = builder.finish();
        let wait = trajectory.spans.iter().find(|span| span.kind == "wait").unwrap();
        assert_eq!((wait.end, wait.outcome.as_deref()), (Some(9.0), Some("aborted (user)")));
        assert_eq!(trajectory.spans.last().unwrap().end, None, "turn 2 is still running");
        assert_eq!((trajectory.start, trajectory.end), (0.0, 10.0));
    }

    #[test]
    fn the_overview_puts_each_span_s_time_in_the_slices_it_covers() {
        let trajectory = of_lines(include_str!("../../tests/fixtures/v4/retry-503-429-success.jsonl"));
        let overview = trajectory.overview(10);
        let total = |column: usize| overview.iter().map(|slice| slice[column]).sum::<f64>();
        let spent = |lane: Lane| -> f64 {
            let spans = trajectory.spans.iter().filter(|span| span.lane == lane);
            spans.map(|span| span.end.unwrap() - span.start).sum()
        };
        assert!((total(0) - spent(Lane::Model)).abs() < 1e-6, "{overview:?}");
        assert!((total(1) - spent(Lane::Wait)).abs() < 1e-6);
        assert_eq!(total(2), 0.0);
        assert_eq!(Trajectory::default().overview(4), vec![[0.0; 3]; 4]);
    }

    #[test]
    fn a_continuation_is_marked_resumed_in_either_format() {
        for source in [json!({"kind": "plugin", "plugin": "dsh-retry"}), json!({"kind": "plugin:dsh-retry"})] {
            let mut builder = Builder::default();
            builder.push("turn/start", 0, 0.0, &json!({"turn": 2}));
            builder.push("user/message", 1, 1.0, &json!({"content": [], "source": source}));
            let mark = builder.finish().spans.pop().unwrap();
            assert_eq!((mark.kind, mark.label.as_str()), ("resumed", "dsh-retry continues the interrupted turn"));
        }
    }

    #[test]
    fn a_turn_left_open_is_closed_when_the_next_starts_and_its_first_attempt_is_drawn() {
        let mut builder = Builder::default();
        let header = json!({"header": {"config": {"provider": "p"}}});
        builder.push("turn/start", 0, 0.0, &json!({"turn": 1}));
        builder.push("step/start", 1, 0.0, &json!({"turn": 1, "step": 1}));
        builder.push("request/header", 2, 1.0, &header);
        builder.push("turn/start", 3, 5.0, &json!({"turn": 2}));
        builder.push("step/start", 4, 5.0, &json!({"turn": 2, "step": 1}));
        builder.push("request/header", 5, 6.0, &header);
        let spans = builder.finish().spans;
        let attempts: Vec<&Span> = spans.iter().filter(|span| span.kind == "attempt").collect();
        assert_eq!(attempts.len(), 2);
        assert_eq!((attempts[0].end, attempts[1].turn), (Some(5.0), 2));
        assert!(attempts[0].outcome.as_deref().unwrap().starts_with("no end"));
    }

    #[test]
    fn lines_fed_again_change_nothing_and_new_ones_continue_the_spans() {
        let text = include_str!("../../tests/fixtures/v4/retry-503-429-success.jsonl");
        let whole = of_lines(text);
        let mut builder = Builder::default();
        let lines: Vec<&str> = text.lines().collect();
        lines[..12].iter().for_each(|line| builder.push_line(line));
        lines.iter().for_each(|line| builder.push_line(line));
        assert_eq!(builder.finish(), whole, "the first twelve lines fed twice are taken once");
    }

    #[test]
    fn a_hop_closes_the_failed_attempt_and_the_next_one_runs_on_the_new_route() {
        let mut builder = Builder::default();
        builder.push("turn/start", 0, 0.0, &json!({"turn": 1}));
        builder.push("step/start", 1, 0.0, &json!({"turn": 1, "step": 1}));
        builder.push("request/header", 2, 1.0, &json!({"header": {"config": {"provider": "primary"}}}));
        let hop = json!({"from": "primary", "to": "backup", "code": "SERVER", "reason": "circuit open"});
        builder.push("route/switch", 3, 2.0, &hop);
        let trajectory = builder.finish();
        assert_eq!(kinds(&trajectory), ["turn", "step", "attempt", "hop", "attempt"]);
        assert_eq!(trajectory.spans[3].label, "primary → backup · SERVER");
        assert_eq!(trajectory.spans[4].label, "attempt 2 · backup");
    }
}
