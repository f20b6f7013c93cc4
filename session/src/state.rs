//! What the host knows of a session without rereading its log: the history index plugins query,
//! the model-visible (surface) history, the ids of the user messages, and the last request
//! header, the tool calls of the open step still without a result. Fed every event as it is read
//! or appended.

use dsh_abi::events;
use std::collections::HashSet;

use serde_json::Value;

use super::index::HistoryIndex;
use super::vocabulary::message_text;
use crate::conversation::SurfaceMessage;

pub struct SessionState {
    index: HistoryIndex,
    surface: Vec<SurfaceMessage>,
    message_ids: HashSet<String>,
    last_request_header: Option<String>,
    open_calls: Vec<OpenCall>,
}

/// A `tool/call` of the open step that no `tool/result` answers yet: what a process started
/// after a crash resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCall {
    /// The seq of its `tool/call`.
    pub seq: u64,
    pub call: events::ToolCallEvent,
    /// The MCP task the server took it as (`tool/task`), when one was recorded.
    pub task_id: Option<String>,
}

impl SessionState {
    pub fn new(header: String) -> Self {
        SessionState {
            index: HistoryIndex::new(header),
            surface: Vec::new(),
            message_ids: HashSet::new(),
            last_request_header: None,
            open_calls: Vec::new(),
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

    /// The tool calls of the open step without a result, in the order they were recorded.
    pub fn open_calls(&self) -> &[OpenCall] {
        &self.open_calls
    }

    /// Takes in one event of the log: its type, its seq, its whole line and its raw `data`.
    pub fn take_in(&mut self, event_type: &str, seq: Option<u64>, line: &str, data: &str) {
        self.index.observe(event_type, line, data);
        self.track_calls(event_type, seq, data);
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
                let Ok(value) = serde_json::from_str::<Value>(data) else { return };
                if let Some(answered) = events::answered_call(&value) {
                    self.open_calls.retain(|open| open.call.call_id != answered);
                }
                self.surface.push(SurfaceMessage::tool_result(&value));
            }
            events::REQUEST_HEADER => self.last_request_header = Some(data.to_owned()),
            _ => {}
        }
    }

    /// The calls of the open step and their tasks (a result, read once in [`Self::take_in`],
    /// closes its call).
    fn track_calls(&mut self, event_type: &str, seq: Option<u64>, data: &str) {
        match event_type {
            events::TURN_START | events::TURN_END | events::STEP_START | events::STEP_END => self.open_calls.clear(),
            events::TOOL_CALL => {
                if let (Some(seq), Ok(call)) = (seq, serde_json::from_str::<events::ToolCallEvent>(data)) {
                    self.open_calls.push(OpenCall { seq, call, task_id: None });
                }
            }
            events::TOOL_TASK => {
                let Ok(task) = serde_json::from_str::<events::ToolTask>(data) else { return };
                if let Some(open) = self.open_calls.iter_mut().find(|open| open.call.call_id == task.call_id) {
                    open.task_id = Some(task.task_id);
                }
            }
            _ => {}
        }
    }
}
