//! The conversation as the log holds it, in no provider's format: the model-visible messages and
//! the tool calls the model asked for. Provider adapters turn these into their requests.

use dsh_abi::events;
use serde_json::Value;

use crate::vocabulary::{message_text, tool_result_text};

/// A tool call the model asked for: its id, the tool's name and the arguments exactly as the
/// model wrote them (JSON text, or not).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A model-visible message of the conversation: a user's or the model's text, the tool calls
/// the model asked for, or a tool's result (role `tool`, naming its call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceMessage {
    pub role: &'static str,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
}

impl SurfaceMessage {
    pub(crate) fn text(role: &'static str, text: String) -> SurfaceMessage {
        SurfaceMessage { role, text, tool_calls: Vec::new(), tool_call_id: None }
    }

    /// An `assistant/message`'s message: its text and its `tool-call` blocks (arguments as
    /// written, or as JSON text when a log holds them parsed).
    pub(crate) fn assistant(message: &Value) -> SurfaceMessage {
        let tool_calls = events::tool_calls(message)
            .map(|block| {
                let arguments = match block.get("arguments") {
                    Some(Value::String(arguments)) => arguments.clone(),
                    Some(other) => dsh_abi::js::to_string(other),
                    None => String::new(),
                };
                let name = block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
                ToolCall { id: events::call_id(block).unwrap_or_default().to_owned(), name, arguments }
            })
            .collect();
        SurfaceMessage { tool_calls, ..SurfaceMessage::text("assistant", message_text(message)) }
    }

    /// A `tool/result`: the text of its message ([`tool_result_text`]), answering the call
    /// [`events::answered_call`] names.
    pub(crate) fn tool_result(data: &Value) -> SurfaceMessage {
        let text = tool_result_text(data.get("message").unwrap_or(&Value::Null));
        let call_id = events::answered_call(data);
        SurfaceMessage { tool_call_id: call_id.map(str::to_owned), ..SurfaceMessage::text("tool", text) }
    }
}
