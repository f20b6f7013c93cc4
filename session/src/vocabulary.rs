//! The session-log event vocabulary both the writer and the verifier read: which event types are
//! known in each format, which are model-visible, and the text of a message.

use serde_json::Value;

use crate::format::Format;
use dsh_abi::events;
pub use dsh_abi::events::DSH_EVENT_TYPES;

/// The rest of DeepSeek Harness 0.1.0-rc.8's vocabulary: events its logs hold that dsh passes
/// over. A type in neither list is refused unless the event is marked `"ignorable":true`, as the
/// reference refuses it (a log written by a newer harness).
pub const HARNESS_EVENT_TYPES: [&str; 35] = [
    "agent-preset/selected",
    events::AGENT_INBOX_SPLICED,
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "permission/preset",
    "plan/mode",
    "sandbox/mode",
    "schedule/change",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "web/deepseek-search-llm-request",
];

/// The event types 0.2's reader of v3 knows (its `RELEASED_V3_EVENT_TYPES`).
pub const V3_EVENT_TYPES: [&str; 58] = [
    "agent-preset/selected",
    events::AGENT_INBOX_SPLICED,
    "approval/asked",
    "approval/decided",
    "approval/policy",
    events::ASSISTANT_ATTEMPT,
    events::ASSISTANT_MESSAGE,
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "deliverables/presented",
    "feedback/message-delete",
    "feedback/message-put",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "image/offload",
    events::LLM_RETRY,
    events::LLM_RETRY_STARTED,
    "model/selection",
    "permission/preset",
    "plan/mode",
    events::REQUEST_CONTEXT,
    events::REQUEST_HEADER,
    "sandbox/mode",
    "schedule/change",
    "session-log-deepseek/delivery-accepted",
    events::SESSION_END_SEED,
    "session/title",
    "session/title-llm-request",
    events::STEP_END,
    events::STEP_START,
    "subagent/catalog",
    "subagent/descriptor",
    "subagent/model-selection-policy",
    events::SYSTEM_MESSAGE,
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    events::TOOL_CALL,
    "tool/ptc-dispatch",
    "tool/ptc-dispatch-start",
    events::TOOL_RESULT,
    events::TURN_END,
    events::TURN_START,
    events::USER_MESSAGE,
    "web/deepseek-search-llm-request",
    "workspace/changes",
];

/// DeepSeek Harness 0.2.1-rc.2's vocabulary for format v4 (its `KNOWN_SESSION_EVENT_TYPES`).
/// v4 has no `assistant/chunk`: streams are inside the messages and attempts that made them.
pub const V4_EVENT_TYPES: [&str; 62] = [
    "agent-preset/selected",
    events::AGENT_INBOX_SPLICED,
    "approval/asked",
    "approval/decided",
    "approval/policy",
    events::ASSISTANT_ATTEMPT,
    events::ASSISTANT_MESSAGE,
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "deliverables/presented",
    events::DEVELOPER_MESSAGE,
    "feedback/message-delete",
    "feedback/message-put",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "image/offload",
    "job/registered",
    "job/settled",
    events::LLM_RETRY,
    events::LLM_RETRY_STARTED,
    "model/selection",
    "permission/preset",
    "plan/mode",
    events::REQUEST_CONTEXT,
    events::REQUEST_HEADER,
    "sandbox/mode",
    "schedule/change",
    "session-log-deepseek/delivery-accepted",
    events::SESSION_END_SEED,
    "session/title",
    "session/title-llm-request",
    events::STEP_END,
    events::STEP_START,
    "subagent/catalog",
    "subagent/descriptor",
    "subagent/model-selection-policy",
    events::SYSTEM_MESSAGE,
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    events::TOOL_CALL,
    "tool/ptc-dispatch",
    "tool/ptc-dispatch-start",
    events::TOOL_RESULT,
    events::TURN_END,
    events::TURN_START,
    events::USER_MESSAGE,
    "web/deepseek-search-llm-request",
    events::WORKING_DIRECTORY_CHANGE,
    "workspace/changes",
];

/// dsh's own event types that DeepSeek Harness 0.2 does not have; in a v4 log they are written
/// `"ignorable":true`, so its reader keeps and skips them.
pub const DSH_ONLY_V4_TYPES: [&str; 5] = [
    events::LLM_RETRY_REFUSED,
    events::ROUTE_SWITCH,
    events::LLM_FIRST_TOKEN,
    events::TOOL_TASK,
    events::TOOL_RESOLUTION,
];

/// Surface (model-visible) event types of v0; every other event is log-only.
pub const SURFACE_EVENT_TYPES: [&str; 3] = [events::USER_MESSAGE, events::ASSISTANT_MESSAGE, events::TOOL_RESULT];

/// Surface event types of v4, each carrying a `surfaceOp`.
pub const V4_SURFACE_EVENT_TYPES: [&str; 5] = [
    events::SYSTEM_MESSAGE,
    events::DEVELOPER_MESSAGE,
    events::USER_MESSAGE,
    events::ASSISTANT_MESSAGE,
    events::TOOL_RESULT,
];

/// Whether a type is in a format's vocabulary (ours or DeepSeek Harness's).
pub fn is_known(format: Format, event_type: &str) -> bool {
    match format {
        Format::V0 => DSH_EVENT_TYPES.contains(&event_type) || HARNESS_EVENT_TYPES.contains(&event_type),
        Format::V4 => V4_EVENT_TYPES.contains(&event_type) || DSH_ONLY_V4_TYPES.contains(&event_type),
    }
}

pub fn is_surface(format: Format, event_type: &str) -> bool {
    match format {
        Format::V0 => SURFACE_EVENT_TYPES.contains(&event_type),
        Format::V4 => V4_SURFACE_EVENT_TYPES.contains(&event_type),
    }
}

/// The text of a message's `text` blocks, joined (a streamed answer's blocks are one text).
pub fn message_text(message: &Value) -> String {
    texts(message).collect()
}

/// The text of a tool result's `text` blocks, each on its own lines: separate blocks, as MCP
/// means them.
pub fn result_text(result: &Value) -> String {
    texts(result).collect::<Vec<_>>().join("\n")
}

/// The text of a `tool/result`'s message: a v4 `role:"tool"` message holds its text blocks
/// directly, a v0 one in its `tool-result` block.
pub fn tool_result_text(message: &Value) -> String {
    if message.get("role").and_then(Value::as_str) == Some("tool") {
        return result_text(message);
    }
    wrapped_results(message).map(result_text).collect()
}

/// Whether a `tool/result`'s message says the call failed (`isError`, on a v4 message or on a
/// v0 `tool-result` block).
pub fn tool_result_failed(message: &Value) -> bool {
    let failed = |value: &Value| value.get("isError") == Some(&Value::Bool(true));
    failed(message) || wrapped_results(message).any(failed)
}

fn wrapped_results(message: &Value) -> impl Iterator<Item = &Value> {
    let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
    blocks.filter(|block| block.get("type").and_then(Value::as_str) == Some("tool-result"))
}

fn texts(message: &Value) -> impl Iterator<Item = &str> {
    let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
    blocks
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text")?.as_str())
}
