//! The session-log event vocabulary both the writer and the verifier read: which event types are
//! known, which are model-visible, and the text of a message.

use serde_json::Value;

/// Event types of the session vocabulary. An ignorable event of another type only counts for seq
/// and time; a required one of another type is a violation.
pub const KNOWN_EVENT_TYPES: [&str; 14] = [
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "request/header",
    "request/context",
    "assistant/chunk",
    "assistant/attempt",
    "assistant/message",
    "tool/call",
    "tool/result",
    "llm/retry",
    "llm/retry-started",
];

/// Surface (model-visible) event types; every other event is log-only.
pub const SURFACE_EVENT_TYPES: [&str; 3] = ["user/message", "assistant/message", "tool/result"];

pub fn is_known(event_type: &str) -> bool {
    KNOWN_EVENT_TYPES.contains(&event_type)
}

pub fn is_surface(event_type: &str) -> bool {
    SURFACE_EVENT_TYPES.contains(&event_type)
}

/// The text of a message's `text` blocks, joined.
pub fn message_text(message: &Value) -> String {
    message
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text")?.as_str())
                .collect()
        })
        .unwrap_or_default()
}
