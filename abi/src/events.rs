//! Reading the session-log vocabulary that both the host and plugins look into.

use serde_json::Value;

/// Call ids of the `tool-call` blocks of an assistant message (`callId`, or `id` as DeepSeek
/// Harness writes them).
pub fn tool_call_ids(message: &Value) -> impl Iterator<Item = &str> {
    message.get("content").and_then(Value::as_array).into_iter().flatten().filter_map(|block| {
        if block.get("type")? != "tool-call" {
            return None;
        }
        block.get("callId").or_else(|| block.get("id"))?.as_str()
    })
}
