//! Writing format v4: the agent loop appends events in one vocabulary whatever the log's format
//! (v0's, as dsh has always written them), and on their way into a v4 log they take v4's shape,
//! as DeepSeek Harness 0.2 writes it:
//!
//! - the system prompt leaves `request/header` for a `system/message` surface event: an empty
//!   protected head right after a log's first `step/start` (as 0.2's own migration writes it),
//!   replaced by the prompt's text wherever the prompt first shows or changes;
//! - a failed attempt is `assistant/attempt {turn, step, stream}`, its partial text and failure
//!   in the embedded stream; an answer embeds its stream too (`stream: []`: dsh keeps no chunks);
//! - a tool result is a `role: "tool"` message, citing its `tool/call`;
//! - a plugin's message source names the plugin's producer kind (`plugin:dsh-retry`);
//! - dsh's own records 0.2 does not know (`route/switch`, `llm/retry-refused`) are written
//!   `"ignorable": true`, so 0.2 keeps and skips them.

use dsh_abi::events;
use serde_json::{json, Map, Value};

use super::new_event::{NewEvent, Replacement};
use super::rules_v4::V4Rules;
use super::structure::StructureRules;
use super::vocabulary;

/// The events `event` is written as in a v4 log whose rules are `rules`, in order.
pub fn encode<'a>(event: NewEvent<'a>, rules: &StructureRules, now_ms: u64) -> Vec<NewEvent<'a>> {
    let (Some(v4), Ok(mut data)) = (rules.v4(), serde_json::from_str::<Value>(&event.data)) else {
        return vec![event];
    };
    let open = (rules.open_turn(), rules.open_step());
    match event.event_type {
        events::STEP_START if v4.system_head().is_none() && v4.surface_is_empty() => {
            let turn_step = (data["turn"].as_u64(), data["step"].as_u64());
            vec![event, system_message(turn_step, "", None, rules.next_seq() + 1)]
        }
        events::REQUEST_HEADER => with_system_prompt(event, data, v4, open, rules.next_seq()),
        events::ASSISTANT_ATTEMPT => vec![NewEvent { ignorable: false, ..reshaped(event, attempt(&data, now_ms)) }],
        events::ASSISTANT_MESSAGE => {
            if let Value::Object(fields) = &mut data {
                fields.insert("stream".into(), Value::Array(Vec::new()));
            }
            vec![reshaped(event, data)]
        }
        events::TOOL_RESULT => vec![tool_result(event, data)],
        events::USER_MESSAGE if data["source"]["kind"] == "plugin" => {
            vec![reshaped(event, with_producer_sources(events::USER_MESSAGE, data))]
        }
        kind if vocabulary::DSH_ONLY_V4_TYPES.contains(&kind) => vec![NewEvent { ignorable: true, ..event }],
        _ => vec![event],
    }
}

fn reshaped(event: NewEvent<'_>, data: Value) -> NewEvent<'_> {
    NewEvent { data: dsh_abi::js::to_string(&data), ..event }
}

/// `system/message` with the prompt `text` (no blocks when empty), replacing the head at
/// `replaces` or appended as the head.
fn system_message(
    (turn, step): (Option<u64>, Option<u64>),
    text: &str,
    replaces: Option<u64>,
    seq: u64,
) -> NewEvent<'static> {
    let content: Vec<Value> = match text.is_empty() {
        true => Vec::new(),
        false => vec![json!({"type": "text", "text": text})],
    };
    let message = json!({
        "role": "system", "content": content, "source": {"kind": "system-prompt"}, "id": format!("system-prompt-{seq}"),
    });
    let data = json!({"turn": turn, "step": step, "message": message});
    NewEvent { replaces: replaces.map(Replacement::head), ..NewEvent::new(events::SYSTEM_MESSAGE, &data) }
}

/// The header without `system`, after a `system/message` when the prompt differs from the head's.
fn with_system_prompt<'a>(
    event: NewEvent<'a>,
    mut data: Value,
    v4: &V4Rules,
    open: (Option<u64>, Option<u64>),
    next_seq: u64,
) -> Vec<NewEvent<'a>> {
    let header = data.get_mut("header").and_then(Value::as_object_mut);
    let prompt = header.and_then(|header| header.remove("system"));
    let prompt = prompt.as_ref().and_then(Value::as_str).unwrap_or_default().to_owned();
    let header_event = reshaped(event, data);
    match v4.system_head() {
        Some((head, text)) if text != prompt => {
            vec![system_message(open, &prompt, Some(head), next_seq), header_event]
        }
        _ => vec![header_event],
    }
}

/// v4's failed attempt: the partial text dsh kept, then the failure, as stream records.
pub(crate) fn attempt(data: &Value, now_ms: u64) -> Value {
    let chunk = |chunk: Value| json!({"type": "chunk", "time": now_ms, "chunk": chunk});
    let mut stream = Vec::new();
    if let Some(text) = data.get("text").and_then(Value::as_str).filter(|text| !text.is_empty()) {
        stream.push(chunk(json!({"type": "block-start", "index": 0, "blockType": "text"})));
        stream.push(json!({"type": "text-chunks", "time0": now_ms, "index": 0, "dt": [], "texts": [text]}));
        stream.push(chunk(json!({"type": "block-end", "index": 0, "block": {"type": "text", "text": text}})));
    }
    let failure = data.get("failure").cloned().unwrap_or(Value::Null);
    stream.push(chunk(json!({"type": "finish", "reason": {"kind": "error", "failure": failure}})));
    json!({"turn": data.get("turn"), "step": data.get("step"), "stream": stream})
}

/// v4's tool result: the `tool-result` block's content and `isError` on a `role: "tool"`
/// message naming its call, in 0.2's key order; the event keeps only v4's members.
pub(crate) fn tool_result(event: NewEvent<'_>, data: Value) -> NewEvent<'_> {
    let message = data.get("message").unwrap_or(&Value::Null);
    let call_id = events::answered_call(&data).unwrap_or_default().to_owned();
    let block = message.get("content").and_then(Value::as_array).and_then(|blocks| blocks.first());
    let content = block.and_then(|block| block.get("content")).cloned().unwrap_or_else(|| json!([]));
    let is_error = block.and_then(|block| block.get("isError")).cloned().unwrap_or(Value::Bool(false));
    let v4_message = json!({
        "role": "tool", "source": {"kind": "tool", "callId": call_id}, "toolCallId": call_id,
        "content": content, "isError": is_error, "id": message.get("id"),
    });
    let mut fields = Map::new();
    for key in ["turn", "step"] {
        fields.insert(key.into(), data.get(key).cloned().unwrap_or(Value::Null));
    }
    fields.insert("message".into(), v4_message);
    if let Some(error) = data.get("error") {
        fields.insert("error".into(), error.clone());
    }
    reshaped(event, Value::Object(fields))
}

/// v4's message sources: a plugin's (`{kind: "plugin", plugin, …}`, as dsh's agent loop and
/// v0–v3 write it) names its producer's kind, as 0.2 names it (and its v3→v4 migration does).
pub(crate) fn with_producer_sources(event_type: &str, mut data: Value) -> Value {
    let messages: Vec<&mut Value> = match event_type {
        events::USER_MESSAGE => vec![&mut data],
        events::DEVELOPER_MESSAGE | events::SYSTEM_MESSAGE | events::ASSISTANT_MESSAGE | events::TOOL_RESULT => {
            data.get_mut("message").into_iter().collect()
        }
        events::AGENT_INBOX_SPLICED => {
            data.get_mut("inserted").and_then(Value::as_array_mut).into_iter().flatten().collect()
        }
        "session/title-llm-request" => {
            data.get_mut("messages").and_then(Value::as_array_mut).into_iter().flatten().collect()
        }
        _ => Vec::new(),
    };
    for message in messages {
        let role = message["role"].as_str().unwrap_or_default().to_owned();
        if let Some(source) = message.get_mut("source").filter(|source| source["kind"] == "plugin") {
            *source = producer_source(source, &role);
        }
    }
    data
}

/// 0.2's producer kinds of the plugins whose kind is not their name.
const RENAMED_PRODUCERS: [(&str, &str); 5] = [
    ("compact", "compact-checkpoint"),
    ("tools-code-mode", "ptc-mode"),
    ("tools-ptc", "ptc-mode"),
    ("dsh-compaction-basic", "compact-basic"),
    ("@deepseek-ai/dsh-system-prompt", "runtime-context"),
];

/// 0.2's first-party plugins whose producer kind is their name; any other is `plugin:<name>`.
const SAME_NAME_PRODUCERS: [&str; 25] = [
    "agent-instructions",
    "session-reference",
    "team-message",
    "goal",
    "skill-invocation",
    "skill-catalog",
    "coordinator",
    "subagent-report",
    "subagent-settled",
    "webhook",
    "agent-message",
    "model-selection",
    "plan-mode",
    "time-context",
    "tmux-context",
    "user-approval",
    "repeat-tool-reminder",
    "tool-cordis",
    "cordis-host-runner",
    "tool-goal",
    "tool-jobs",
    "hooks-codex",
    "hooks-claude-code",
    "schedule",
    "dsh-session-title-llm",
];

/// The source `{kind: "plugin", plugin, …}` as its producer's `{kind, …}`.
fn producer_source(source: &Value, role: &str) -> Value {
    let plugin = source["plugin"].as_str().unwrap_or_default();
    let kind = match RENAMED_PRODUCERS.iter().find(|(name, _)| *name == plugin) {
        _ if plugin == "@deepseek-ai/dsh-system-prompt" && role == "system" => "system-prompt".to_owned(),
        Some((_, kind)) => (*kind).to_owned(),
        None if SAME_NAME_PRODUCERS.contains(&plugin) => plugin.to_owned(),
        None => format!("plugin:{plugin}"),
    };
    let fields = source.as_object().into_iter().flatten().filter(|(key, _)| *key != "plugin");
    Value::Object(
        fields
            .map(|(key, value)| (key.clone(), if key == "kind" { kind.clone().into() } else { value.clone() }))
            .collect(),
    )
}
