//! The durable session log: the single source of truth from which retry budgets, resume
//! decisions and verification are derived.

pub mod index;
pub mod log;
pub mod read_ahead;
pub mod reader;
pub mod structure;
pub mod timeline;
pub mod verify;

use serde_json::Value;

/// The text of a message's `text` blocks, joined.
pub(crate) fn message_text(message: &Value) -> String {
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
