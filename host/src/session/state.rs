//! What the host knows of a session without rereading its log: the history index plugins query,
//! the model-visible (surface) history, the ids of the user messages, and the last request
//! header. Fed every event as it is read or appended.

use dsh_abi::events;
use std::collections::HashSet;

use serde_json::Value;

use super::index::HistoryIndex;
use super::vocabulary::{message_text, result_text};
use crate::llm::openai::ToolCall;

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
    fn text(role: &'static str, text: String) -> SurfaceMessage {
        SurfaceMessage { role, text, tool_calls: Vec::new(), tool_call_id: None }
    }

    /// An `assistant/message`'s message: its text and its `tool-call` blocks (`id`, or
    /// `callId`; arguments as written, or as JSON text when a log holds them parsed).
    fn assistant(message: &Value) -> SurfaceMessage {
        let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
        let tool_calls = blocks
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool-call"))
            .map(|block| {
                let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                let arguments = match block.get("arguments") {
                    Some(Value::String(arguments)) => arguments.clone(),
                    Some(other) => dsh_abi::js::to_string(other),
                    None => String::new(),
                };
                let id = block.get("id").or_else(|| block.get("callId")).and_then(Value::as_str).unwrap_or_default();
                ToolCall { id: id.to_owned(), name: text("name"), arguments }
            })
            .collect();
        SurfaceMessage { tool_calls, ..SurfaceMessage::text("assistant", message_text(message)) }
    }

    /// A `tool/result`: the text of its `tool-result` block, answering `message.source.callId`
    /// (or the event's `callId`).
    fn tool_result(data: &Value) -> SurfaceMessage {
        let message = data.get("message").unwrap_or(&Value::Null);
        let call_id = message.pointer("/source/callId").or_else(|| data.get("callId")).and_then(Value::as_str);
        let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
        let text: String = blocks
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool-result"))
            .map(result_text)
            .collect();
        SurfaceMessage { tool_call_id: call_id.map(str::to_owned), ..SurfaceMessage::text("tool", text) }
    }
}

pub struct SessionState {
    index: HistoryIndex,
    surface: Vec<SurfaceMessage>,
    message_ids: HashSet<String>,
    last_request_header: Option<String>,
}

impl SessionState {
    pub fn new(header: String) -> Self {
        SessionState {
            index: HistoryIndex::new(header),
            surface: Vec::new(),
            message_ids: HashSet::new(),
            last_request_header: None,
        }
    }

    pub fn index(&self) -> &HistoryIndex {
        &self.index
    }

    /// The model-visible history, in order.
    pub fn surface(&self) -> &[SurfaceMessage] {
        &self.surface
    }

    /// Whether a `user/message` with this id is in the log.
    pub fn has_message(&self, id: &str) -> bool {
        self.message_ids.contains(id)
    }

    /// The `data` of the last `request/header`.
    pub fn last_request_header(&self) -> Option<&str> {
        self.last_request_header.as_deref()
    }

    /// Takes in one event of the log: its type, its whole line and its raw `data`.
    pub fn take_in(&mut self, event_type: &str, line: &str, data: &str) {
        self.index.observe(event_type, line, data);
        match event_type {
            events::USER_MESSAGE | events::ASSISTANT_MESSAGE => {
                let Ok(value) = serde_json::from_str::<Value>(data) else { return };
                if event_type == events::USER_MESSAGE {
                    if let Some(id) = value.get("id").and_then(Value::as_str) {
                        self.message_ids.insert(id.to_owned());
                    }
                    self.surface.push(SurfaceMessage::text("user", message_text(&value)));
                } else {
                    let message = value.get("message").unwrap_or(&Value::Null);
                    self.surface.push(SurfaceMessage::assistant(message));
                }
            }
            events::TOOL_RESULT => {
                if let Ok(value) = serde_json::from_str::<Value>(data) {
                    self.surface.push(SurfaceMessage::tool_result(&value));
                }
            }
            events::REQUEST_HEADER => self.last_request_header = Some(data.to_owned()),
            _ => {}
        }
    }
}
