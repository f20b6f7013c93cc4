//! Tool lifecycles and retry chains in a v4 log. A call the model advertised is started by
//! exactly one matching `tool/call` and resolved by one `tool/result` within its step; a call that
//! never started is resolved only by crash repair's `TOOL_NOT_STARTED` result. An `llm/retry`
//! continues its chain (turn, step, provider and policy) one attempt at a time under one
//! `retryId`; each `llm/retry-started` pairs one scheduled retry, once.

use serde_json::{Map, Value};

use super::fields::{count, nonempty, text, OpenStep};

/// The code of crash repair's result for a call that never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
/// The only text DeepSeek Harness 0.2 admits in that result.
pub const NOT_STARTED_TEXT: &str =
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

/// A tool call an assistant message advertised and no result resolved yet.
#[derive(Debug, Clone)]
pub struct Advertised {
    pub call_id: String,
    name: Value,
    arguments: Value,
    /// The seq of its `tool/call`, once started.
    pub started: Option<u64>,
}

pub fn advertise(pending: &mut Vec<Advertised>, data: &Value, violations: &mut dyn FnMut(String)) {
    let Some(blocks) = data.pointer("/message/content").and_then(Value::as_array) else {
        return violations("assistant content requires an array".to_owned());
    };
    for block in blocks.iter().filter(|block| text(block, "type") == Some("tool-call")) {
        let Some(call_id) = nonempty(block, "id") else {
            return violations("tool call id requires a nonempty string".to_owned());
        };
        if pending.iter().any(|call| call.call_id == call_id) {
            return violations(format!("assistant/message repeats advertised tool call {call_id}"));
        }
        let field = |key: &str| block.get(key).cloned().unwrap_or(Value::Null);
        pending.push(Advertised {
            call_id: call_id.to_owned(),
            name: field("name"),
            arguments: field("arguments"),
            started: None,
        });
    }
}

/// A `tool/call` starts its advertised call, with the same name and the same raw arguments.
pub fn start(pending: &mut [Advertised], data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
    let Some(call_id) = nonempty(data, "callId") else {
        return violations("tool call id requires a nonempty string".to_owned());
    };
    let Some(call) = pending.iter_mut().find(|call| call.call_id == call_id) else {
        return violations(format!("tool/call {call_id} has no advertised tool lifecycle"));
    };
    let same = |key: &str, advertised: &Value| data.get(key).unwrap_or(&Value::Null) == advertised;
    if call.started.is_some() || !same("name", &call.name) || !same("arguments", &call.arguments) {
        return violations(format!("tool/call {call_id} does not match one advertised tool call"));
    }
    call.started = Some(seq);
}

/// An appended `tool/result` resolves its pending call.
pub fn resolve(
    pending: &mut Vec<Advertised>,
    envelope: &Map<String, Value>,
    data: &Value,
    violations: &mut dyn FnMut(String),
) {
    let message = data.get("message").unwrap_or(&Value::Null);
    let Some(call_id) = nonempty(message, "toolCallId") else {
        return violations("tool call id requires a nonempty string".to_owned());
    };
    let Some(index) = pending.iter().position(|call| call.call_id == call_id) else {
        return violations(format!("tool/result {call_id} has no advertised tool lifecycle"));
    };
    if pending[index].started.is_none() {
        if let Err(message) = not_started_repair(envelope, data, call_id) {
            return violations(message);
        }
    }
    pending.remove(index);
}

/// Whether a result for a call that never started is crash repair's, exactly.
fn not_started_repair(envelope: &Map<String, Value>, data: &Value, call_id: &str) -> Result<(), String> {
    let error = data.get("error").filter(|error| error.is_object()).ok_or("not-started error requires an object")?;
    let message = data.get("message").unwrap_or(&Value::Null);
    let id = nonempty(message, "id").ok_or("not-started message id requires a nonempty string")?;
    let inexact = || format!("tool/result {call_id} is not the exact {TOOL_NOT_STARTED} repair");
    let marked = text(error, "name") == Some("ToolNotStartedError")
        && text(error, "code") == Some(TOOL_NOT_STARTED)
        && message.get("isError") == Some(&Value::Bool(true))
        && !envelope.contains_key("sourceEventSeqs");
    if !marked {
        return Err(inexact());
    }
    if id.starts_with(&format!("forked-tool-result-{call_id}-")) {
        return Ok(());
    }
    let number = id.strip_prefix(&format!("interrupted-tool-result-{call_id}-")).ok_or_else(inexact)?;
    let canonical =
        number.parse::<u64>().is_ok_and(|n| n.to_string() == number && dsh_abi::js::is_safe_integer(n as f64));
    let content = message.get("content").and_then(Value::as_array).ok_or("not-started content requires an array")?;
    let exact_text = matches!(&content[..], [block] if text(block, "type") == Some("text") && text(block, "text") == Some(NOT_STARTED_TEXT));
    match canonical && exact_text {
        true => Ok(()),
        false => Err(inexact()),
    }
}

pub fn unresolved(pending: &[Advertised], event_type: &str, violations: &mut dyn FnMut(String)) {
    if let Some(call) = pending.first() {
        violations(format!("{event_type} leaves unresolved tool call {}", call.call_id));
    }
}

/// A scheduled retry: its chain and coordinates.
#[derive(Debug, Clone)]
struct Scheduled {
    retry_id: String,
    turn: Value,
    step: Value,
    provider: Value,
    policy: Value,
    retry: u64,
    started: bool,
}

/// Every retry the log scheduled, and the provider of the last request header.
#[derive(Debug, Clone, Default)]
pub struct Retries {
    provider: Option<Value>,
    scheduled: Vec<Scheduled>,
}

impl Retries {
    pub fn request_header(&mut self, data: &Value) {
        self.provider = data.pointer("/header/config/provider").cloned();
    }

    pub fn retry(&mut self, data: &Value, open: OpenStep, violations: &mut dyn FnMut(String)) {
        let Some((retry_id, retry)) = identity(data, violations) else { return };
        let field = |key: &str| data.get(key).cloned().unwrap_or(Value::Null);
        let step = open.step.unwrap_or(open.last_step);
        if open.turn.is_none() || count(data.get("turn")) != open.turn || count(data.get("step")) != Some(step) {
            return violations("llm/retry does not match the current turn and step".to_owned());
        }
        if self.provider.as_ref() != Some(&field("provider")) {
            return violations("llm/retry provider does not match the open request/header".to_owned());
        }
        let (turn, step, provider, policy) = (field("turn"), field("step"), field("provider"), field("policyKey"));
        let prior = self.scheduled.iter().rev().find(|earlier| {
            earlier.turn == turn && earlier.step == step && earlier.provider == provider && earlier.policy == policy
        });
        if retry != prior.map_or(1, |prior| prior.retry + 1) {
            return violations("llm/retry skips its policy attempt sequence".to_owned());
        }
        let keeps_id = match prior {
            Some(prior) => prior.retry_id == retry_id,
            None => self.scheduled.iter().all(|earlier| earlier.retry_id != retry_id),
        };
        if !keeps_id {
            return violations("llm/retry must keep one retryId per policy chain".to_owned());
        }
        let retry_id = retry_id.to_owned();
        self.scheduled.push(Scheduled { retry_id, turn, step, provider, policy, retry, started: false });
    }

    pub fn started(&mut self, data: &Value, violations: &mut dyn FnMut(String)) {
        let Some((retry_id, retry)) = identity(data, violations) else { return };
        let Some(scheduled) = self.scheduled.iter_mut().find(|s| s.retry_id == retry_id && s.retry == retry) else {
            return violations("llm/retry-started pairs no prior scheduled attempt".to_owned());
        };
        let field = |key: &str| data.get(key).unwrap_or(&Value::Null);
        if &scheduled.turn != field("turn") || &scheduled.step != field("step") {
            return violations("llm/retry-started changes scheduled coordinates".to_owned());
        }
        if scheduled.started {
            return violations("llm/retry-started repeats one scheduled attempt".to_owned());
        }
        scheduled.started = true;
    }
}

fn identity<'a>(data: &'a Value, violations: &mut dyn FnMut(String)) -> Option<(&'a str, u64)> {
    let Some(retry_id) = nonempty(data, "retryId") else {
        violations("retryId requires a nonempty string".to_owned());
        return None;
    };
    let Some(retry) = count(data.get("retry")) else {
        violations("retry must be a non-negative safe integer".to_owned());
        return None;
    };
    Some((retry_id, retry))
}
