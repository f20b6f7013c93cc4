//! What a v4 event's `data` must hold, in the order DeepSeek Harness 0.2's reader asks: row
//! admission (developer roles, producer-owned sources, retired syntax, system and tool messages),
//! adoption (the message's identity, role and source) and restore (a request's provider, model
//! and reason; a settlement's stream). Only these members are checked: extra keys are admitted,
//! as the reference admits them.

use dsh_abi::events;
use serde_json::Value;

use super::fields::{count, nonempty, text};
use crate::format::Format;
use crate::vocabulary;

const TOOL_CHANGES: [&str; 2] = ["tool-addition", "tool-removal"];
const REQUEST_REASONS: [&str; 4] = ["initial", "resume", "change", "series"];

/// The message a surface event carries: a `user/message`'s data is its message.
fn message_of<'a>(event_type: &str, data: &'a Value) -> Option<&'a Value> {
    match event_type {
        events::USER_MESSAGE => Some(data),
        _ => data.get("message"),
    }
    .filter(|message| message.is_object())
}

fn blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message.get("content").and_then(Value::as_array).into_iter().flatten()
}

/// Row admission: checked on every row before anything else.
pub fn admission(event_type: &str, data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
    if event_type == events::DEVELOPER_MESSAGE {
        developer(data, violations);
    } else if let Some(message) =
        message_of(event_type, data).filter(|_| vocabulary::is_surface(Format::V4, event_type))
    {
        if text(message, "role") == Some("developer") {
            violations("format v4 developer/message and developer role must occur together".to_owned());
        }
        if let Some(kind) =
            blocks(message).filter_map(|block| text(block, "type")).find(|kind| TOOL_CHANGES.contains(kind))
        {
            violations(format!("format v4 {kind} requires developer role"));
        }
        if blocks(message).any(|block| text(block, "type") == Some("tool-result")) && event_type != events::TOOL_RESULT
        {
            violations(format!(
                "format v4 {event_type} at seq {seq} content must not contain a released tool-result wrapper"
            ));
        }
    }
    if let Some(message) = message_of(event_type, data) {
        if message.pointer("/source/kind").and_then(Value::as_str) == Some("plugin") {
            violations("format v4 message requires a producer-owned source kind".to_owned());
        }
    }
    match event_type {
        events::REQUEST_HEADER if !data.get("header").is_some_and(Value::is_object) => {
            violations("format v4 request/header requires data and header objects".to_owned());
        }
        events::REQUEST_HEADER if data.pointer("/header/system").is_some() => {
            violations("format v4 request/header rejects retired header.system".to_owned());
        }
        events::SYSTEM_MESSAGE => system_message(data, violations),
        events::TOOL_RESULT => tool_result(data, seq, violations),
        _ => {}
    }
}

fn developer(data: &Value, violations: &mut dyn FnMut(String)) {
    let Some(message) = data.get("message").filter(|message| text(message, "role") == Some("developer")) else {
        return violations("format v4 developer/message requires turn, step, and a developer message".to_owned());
    };
    positive_coordinates(events::DEVELOPER_MESSAGE, data, "", violations);
    let mut additions = false;
    for block in blocks(message) {
        let Some(kind) = text(block, "type").filter(|kind| TOOL_CHANGES.contains(kind)) else { continue };
        if nonempty(block, "toolName").is_none() {
            violations(format!("format v4 {kind} requires a nonempty toolName"));
        }
        if kind == "tool-addition" {
            additions = true;
            if block.get("tool").is_some() {
                violations("format v4 tool-addition must omit inline tool definitions".to_owned());
            }
        }
    }
    let sourced = message
        .pointer("/source/kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| !kind.is_empty() && kind != "plugin");
    if nonempty(message, "id").is_none() || !message.get("content").is_some_and(Value::is_array) || !sourced {
        violations("format v4 developer message requires id, role, content, and a producer-owned source".to_owned());
    }
    match (additions, data.get("headerSeq")) {
        (true, header_seq) if count(header_seq).is_none() => {
            violations("developer/message headerSeq must be a non-negative safe integer".to_owned());
        }
        (false, Some(_)) => {
            violations("format v4 developer/message must omit headerSeq without tool additions".to_owned())
        }
        _ => {}
    }
}

/// `turn` and `step` of a step event are positive counts (`prefix` is the reference's, per type).
fn positive_coordinates(event_type: &str, data: &Value, prefix: &str, violations: &mut dyn FnMut(String)) {
    for key in ["turn", "step"] {
        match count(data.get(key)) {
            None => violations(format!("{event_type} {key} must be a non-negative safe integer")),
            Some(0) => violations(format!("{prefix}{event_type} {key} must be positive")),
            Some(_) => {}
        }
    }
}

fn system_message(data: &Value, violations: &mut dyn FnMut(String)) {
    positive_coordinates(events::SYSTEM_MESSAGE, data, "format v4 ", violations);
    let Some(message) = data.get("message").filter(|message| message.is_object()) else {
        return violations("format v4 system message requires an object".to_owned());
    };
    if nonempty(message, "id").is_none() {
        violations("format v4 system message id requires a string with content".to_owned());
    }
    if text(message, "role") != Some("system") {
        violations("format v4 system message requires system role".to_owned());
    }
    let Some(content) = message.get("content").and_then(Value::as_array) else {
        return violations("format v4 system message requires content array".to_owned());
    };
    for block in content {
        match nonempty(block, "type") {
            None if !block.is_object() => violations("format v4 system content block requires an object".to_owned()),
            None => violations("format v4 system content type requires a string with content".to_owned()),
            Some("text" | "reasoning") if text(block, "text").is_none() => {
                violations("format v4 system content text requires a string".to_owned());
            }
            Some("tool-result") => {
                violations("format v4 system content rejects retired tool-result wrappers".to_owned())
            }
            Some(_) => {}
        }
    }
}

fn tool_result(data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
    let subject = format!("format v4 tool/result at seq {seq}");
    let Some(message) = data.get("message").filter(|message| message.is_object()) else {
        return violations(format!("{subject} message must be an object"));
    };
    let call_id = nonempty(message, "toolCallId");
    let checks = [
        (nonempty(message, "id").is_some(), "requires a first-class message with a string id"),
        (text(message, "role") == Some("tool"), "requires a tool-role message"),
        (
            call_id.is_some() && call_id == message.pointer("/source/callId").and_then(Value::as_str),
            "requires toolCallId matching its tool source",
        ),
        (message.pointer("/source/kind").and_then(Value::as_str) == Some("tool"), "requires a tool source"),
        (message.get("content").is_some_and(Value::is_array), "requires array content"),
        (
            !blocks(message).any(|block| text(block, "type") == Some("tool-result")),
            "content must not contain a released tool-result wrapper",
        ),
        (message.get("isError").is_none_or(Value::is_boolean), "isError must be boolean when present"),
        (
            data.get("error").is_none() || message.get("isError") == Some(&Value::Bool(true)),
            "carries error metadata for a non-error tool result",
        ),
    ];
    if let Some((_, broken)) = checks.iter().find(|(holds, _)| !holds) {
        violations(format!("{subject} {broken}"));
    }
}

/// Adoption: a request header's emptiness rules and a surface message's identity.
pub fn adoption(event_type: &str, data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
    let subject = format!("session event at seq {seq}");
    if event_type == events::REQUEST_HEADER {
        if data.pointer("/header/tools").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            violations(format!("{subject} must omit empty tools"));
        }
        if data
            .pointer("/header/adapterDefaults")
            .and_then(Value::as_object)
            .is_some_and(|defaults| defaults.is_empty())
        {
            violations(format!("{subject} must omit empty adapterDefaults"));
        }
        return;
    }
    if !vocabulary::is_surface(Format::V4, event_type) {
        return;
    }
    let Some(message) = message_of(event_type, data).filter(|message| nonempty(message, "id").is_some()) else {
        return violations(format!("{subject} lacks an identified message"));
    };
    let role = event_type.split('/').next().unwrap_or_default();
    if text(message, "role") != Some(role) {
        violations(format!("{subject} message must have role \"{role}\""));
    }
    if message.pointer("/source/kind").and_then(Value::as_str).is_none_or(str::is_empty) {
        violations(format!("{subject} message has invalid source"));
    }
    if !message.get("content").is_some_and(Value::is_array) {
        violations(format!("{subject} message has invalid content"));
    }
    let source =
        |key: &str| message.pointer(&format!("/source/{key}")).and_then(Value::as_str).is_some_and(|v| !v.is_empty());
    let kind = message.pointer("/source/kind").and_then(Value::as_str);
    match event_type {
        events::SYSTEM_MESSAGE if kind != Some("system-prompt") => {
            violations(format!("{subject} message must have system-prompt source"));
        }
        events::ASSISTANT_MESSAGE if kind != Some("model") || !source("provider") || !source("model") => {
            violations(format!("{subject} message must have model source"));
        }
        _ => {}
    }
}

/// Restore: what a request and a settlement must name for the session to be rebuilt.
pub fn restore(event_type: &str, data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
    let subject = format!("seed {event_type} at index {seq}");
    match event_type {
        events::REQUEST_HEADER => {
            let config = data.pointer("/header/config").unwrap_or(&Value::Null);
            if nonempty(config, "provider").is_none() || nonempty(config, "model").is_none() {
                violations(format!("{subject} lacks provider/model"));
            }
            if !text(data, "reason").is_some_and(|reason| REQUEST_REASONS.contains(&reason)) {
                violations(format!("{subject} has an invalid reason"));
            }
            if data.get("startsSeries").is_some_and(|marker| marker != &Value::Bool(true)) {
                violations(format!("{subject} has an invalid startsSeries marker"));
            }
        }
        events::ASSISTANT_ATTEMPT | events::ASSISTANT_MESSAGE => {
            let coordinates = count(data.get("turn")).is_some() && count(data.get("step")).is_some();
            if !coordinates || !data.get("stream").is_some_and(Value::is_array) {
                violations(format!("{subject} has invalid settlement fields"));
            }
        }
        _ => {}
    }
}
