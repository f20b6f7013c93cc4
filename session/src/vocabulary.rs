//! The session-log event vocabulary both the writer and the verifier read: which event types are
//! known, which are model-visible, and the text of a message.

use serde_json::Value;

use dsh_abi::events;
pub use dsh_abi::events::DSH_EVENT_TYPES;

/// The rest of DeepSeek Harness 0.1.0-rc.8's vocabulary: events its logs hold that dsh passes
/// over. A type in neither list is refused unless the event is marked `"ignorable":true`, as the
/// reference refuses it (a log written by a newer harness).
pub const HARNESS_EVENT_TYPES: [&str; 35] = [
    "agent-preset/selected",
    "agent/inbox/spliced",
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

/// Surface (model-visible) event types; every other event is log-only.
pub const SURFACE_EVENT_TYPES: [&str; 3] = [events::USER_MESSAGE, events::ASSISTANT_MESSAGE, events::TOOL_RESULT];

/// Whether a type is in the vocabulary (ours or DeepSeek Harness's).
pub fn is_known(event_type: &str) -> bool {
    DSH_EVENT_TYPES.contains(&event_type) || HARNESS_EVENT_TYPES.contains(&event_type)
}

pub fn is_surface(event_type: &str) -> bool {
    SURFACE_EVENT_TYPES.contains(&event_type)
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

fn texts(message: &Value) -> impl Iterator<Item = &str> {
    let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
    blocks
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text")?.as_str())
}
