//! The session-log vocabulary, named once: every event type dsh writes, the data of each as a
//! type (its fields in the order DeepSeek Harness writes the keys), and what plugins read in it.
//! Writers serialise these types; readers compare against these names.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::Failure;

pub const TURN_START: &str = "turn/start";
pub const TURN_END: &str = "turn/end";
pub const STEP_START: &str = "step/start";
pub const STEP_END: &str = "step/end";
pub const USER_MESSAGE: &str = "user/message";
pub const REQUEST_HEADER: &str = "request/header";
pub const REQUEST_CONTEXT: &str = "request/context";
pub const ASSISTANT_CHUNK: &str = "assistant/chunk";
pub const ASSISTANT_ATTEMPT: &str = "assistant/attempt";
pub const ASSISTANT_MESSAGE: &str = "assistant/message";
pub const TOOL_CALL: &str = "tool/call";
pub const TOOL_RESULT: &str = "tool/result";
pub const LLM_RETRY: &str = "llm/retry";
pub const LLM_RETRY_STARTED: &str = "llm/retry-started";
pub const LLM_RETRY_REFUSED: &str = "llm/retry-refused";
pub const ROUTE_SWITCH: &str = "route/switch";
/// dsh's own (ignorable): the attempt's first text arrived; its `time` is when.
pub const LLM_FIRST_TOKEN: &str = "llm/first-token";
/// Format v4's system prompt, a surface event of its own (v0 kept it in `request/header`).
pub const SYSTEM_MESSAGE: &str = "system/message";
/// Format v4's developer notices, such as a changed tool set.
pub const DEVELOPER_MESSAGE: &str = "developer/message";
/// Where the history a process restored ends and its own events begin.
pub const SESSION_END_SEED: &str = "session/end-seed";
/// Format v4's inbox: a message received for the next turn, then taken into it.
pub const AGENT_INBOX_SPLICED: &str = "agent/inbox/spliced";
/// Format v4: the session's working directory changed.
pub const WORKING_DIRECTORY_CHANGE: &str = "working-directory/change";
/// dsh: the server took a call as an MCP task, and the task's id.
pub const TOOL_TASK: &str = "tool/task";
/// dsh: how a call whose answer was lost (a crash, a server gone, a deadline) is resolved.
pub const TOOL_RESOLUTION: &str = "tool/resolution";

/// Event types dsh reads and writes itself; the structure rules concern these.
pub const DSH_EVENT_TYPES: [&str; 19] = [
    TURN_START,
    TURN_END,
    STEP_START,
    STEP_END,
    USER_MESSAGE,
    REQUEST_HEADER,
    REQUEST_CONTEXT,
    ASSISTANT_CHUNK,
    ASSISTANT_ATTEMPT,
    ASSISTANT_MESSAGE,
    TOOL_CALL,
    TOOL_RESULT,
    LLM_RETRY,
    LLM_RETRY_STARTED,
    LLM_RETRY_REFUSED,
    ROUTE_SWITCH,
    LLM_FIRST_TOKEN,
    TOOL_TASK,
    TOOL_RESOLUTION,
];

/// The data of one event type.
pub trait EventData: Serialize {
    const TYPE: &'static str;
    /// Written with `"ignorable":true`: a reader that does not know the type skips it.
    const IGNORABLE: bool = false;
}

/// `turn/start`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnStart {
    pub turn: u64,
}

/// `step/start`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepStart {
    pub turn: u64,
    pub step: u64,
}

/// `step/end`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepEnd {
    pub turn: u64,
    pub step: u64,
}

/// `turn/end`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub turn: u64,
    pub reason: EndReason,
}

/// How a turn ended: `{"kind":"completed"}`, `{"kind":"max-tokens"}`, `{"kind":"error","error":…}`
/// or `{"kind":"aborted","reason":{"kind":"user"}}`.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EndReason {
    Completed,
    MaxTokens,
    Error { error: Failure },
    Aborted { reason: AbortedBy },
}

/// Who aborted a turn.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AbortedBy {
    User,
}

/// `request/header`: the request configuration of the turn's requests, and why it was written.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct RequestHeader {
    pub header: Value,
    /// `initial`, `change` or `resume`.
    pub reason: &'static str,
}

/// `assistant/attempt` (ignorable): a failed attempt, with the text it streamed (at most a limit,
/// `textBytes` saying how long it was).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AssistantAttempt {
    pub turn: u64,
    pub step: u64,
    pub failure: Failure,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_bytes: Option<u64>,
}

/// `llm/first-token` (ignorable): the running attempt of `turn`/`step` streamed its first text
/// now, so a trajectory tells the wait for the first token from the decoding.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstToken {
    pub turn: u64,
    pub step: u64,
}

/// `llm/retry-started`: the wait of a scheduled retry is over and the request goes again.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RetryStarted {
    pub retry_id: String,
    pub turn: u64,
    pub step: u64,
    /// The scheduled record's `retry`, copied as written.
    pub retry: Value,
}

/// `llm/retry-refused` (ignorable): a row refused the retry another row decided.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RetryRefused {
    pub turn: u64,
    pub step: u64,
    pub row: String,
    pub reason: String,
}

/// `route/switch` (ignorable): a failover hop. The failed step goes to route `to` right away; a
/// `request/header` naming `to` follows before the request goes out.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RouteSwitched {
    pub turn: u64,
    pub step: u64,
    pub from: String,
    pub to: String,
    /// The failure code on `from`.
    pub code: String,
    /// The row that decided the hop.
    pub row: String,
    pub reason: String,
}

macro_rules! event_types {
    ($($data:ty => $name:expr, $ignorable:expr;)*) => {
        $(impl EventData for $data {
            const TYPE: &'static str = $name;
            const IGNORABLE: bool = $ignorable;
        })*
    };
}

event_types! {
    TurnStart => TURN_START, false;
    StepStart => STEP_START, false;
    StepEnd => STEP_END, false;
    TurnEnd => TURN_END, false;
    RequestHeader => REQUEST_HEADER, false;
    AssistantAttempt => ASSISTANT_ATTEMPT, true;
    RetryStarted => LLM_RETRY_STARTED, false;
    RetryRefused => LLM_RETRY_REFUSED, true;
    RouteSwitched => ROUTE_SWITCH, true;
    FirstToken => LLM_FIRST_TOKEN, true;
    UserMessage => USER_MESSAGE, false;
    AssistantMessage => ASSISTANT_MESSAGE, false;
    ToolCallEvent => TOOL_CALL, false;
    ToolResultEvent => TOOL_RESULT, false;
    ToolTask => TOOL_TASK, true;
    ToolResolution => TOOL_RESOLUTION, true;
    InboxSpliced => AGENT_INBOX_SPLICED, false;
    WorkingDirectoryChange => WORKING_DIRECTORY_CHANGE, false;
}

/// `agent/inbox/spliced` (v4): messages put into the inbox of the next turn (`inserted`), or
/// taken out of it as the turn starts (`removedCount`), as DeepSeek Harness 0.2 records them.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InboxSpliced {
    pub target: &'static str,
    pub start: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_count: Option<u64>,
    pub inserted: Vec<Value>,
}

impl InboxSpliced {
    /// The inbox of the next turn receives `message` (a `user/message`'s data).
    pub fn received(message: Value) -> InboxSpliced {
        InboxSpliced { target: "next-turn", start: 0, removed_count: None, inserted: vec![message] }
    }

    /// The turn that starts takes the message it received.
    pub fn taken() -> InboxSpliced {
        InboxSpliced { target: "next-turn", start: 0, removed_count: Some(1), inserted: Vec::new() }
    }
}

/// `working-directory/change` (v4): the directory the session works in from now on.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct WorkingDirectoryChange {
    pub cwd: String,
}

/// `user/message`: the user's (or a plugin's) message that starts a turn.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct UserMessage {
    pub id: String,
    pub role: &'static str,
    pub content: Vec<Value>,
    pub source: Value,
}

/// `assistant/message`: the model's answer to a step.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct AssistantMessage {
    pub turn: u64,
    pub step: u64,
    pub message: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

/// `tool/call`: a call the model asked for, durable before it is dispatched.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    pub turn: u64,
    pub step: u64,
    pub call_id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them.
    pub arguments: String,
    /// dsh's key for this logical call, sent with every `tools/call` of it (`_meta`), so a
    /// server that deduplicates runs it once however often it is re-issued. An extra member:
    /// DeepSeek Harness 0.2.1-rc.2's reader admits members it does not read in `tool/call`
    /// (it matches a call to its advertisement by `callId`, `name` and `arguments` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// `tool/task` (ignorable): the server took the call as an MCP task; made durable as soon as
/// the server names it, so a dsh started again polls the task instead of running the call again.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ToolTask {
    pub turn: u64,
    pub step: u64,
    pub call_id: String,
    pub task_id: String,
}

/// `tool/resolution` (ignorable): a call whose answer was lost — dsh stopped, or the server went
/// away or passed its deadline — and the rule that decides what happens to it (`dedup`,
/// `read-only`, `idempotent`, `task` or `unknown`), durable before anything is sent again; the
/// call's `tool/result` follows.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ToolResolution {
    pub turn: u64,
    pub step: u64,
    pub call_id: String,
    pub rule: String,
    /// Why the rule applies, in words.
    pub reason: String,
}

/// `tool/result`: what a call came to; `message` names its call (see [`answered_call`]) and
/// `error` says why a call has no result of its tool's (`{name, code}`).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ToolResultEvent {
    pub turn: u64,
    pub step: u64,
    pub message: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// The `tool-call` blocks of an assistant message.
pub fn tool_calls(message: &Value) -> impl Iterator<Item = &Value> {
    let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
    blocks.filter(|block| block.get("type").and_then(Value::as_str) == Some("tool-call"))
}

/// The failure an `assistant/attempt` (its `data`) ended in: dsh's v0 record names it
/// (`failure`); a v4 attempt's stream ends in a `finish` chunk whose reason holds it.
pub fn attempt_failure(data: &Value) -> Option<&Value> {
    data.get("failure").or_else(|| data.get("stream")?.as_array()?.last()?.pointer("/chunk/reason/failure"))
}

/// The id of a `tool-call` block: `id`, as DeepSeek Harness writes it (and dsh), else `callId`.
pub fn call_id(block: &Value) -> Option<&str> {
    block.get("id").or_else(|| block.get("callId"))?.as_str()
}

/// Call ids of the `tool-call` blocks of an assistant message ([`call_id`]).
pub fn tool_call_ids(message: &Value) -> impl Iterator<Item = &str> {
    tool_calls(message).filter_map(call_id)
}

/// The call a `tool/result` (its `data`) answers — the one answer every reader gives: the
/// message's `source.callId`, where every DeepSeek Harness format names it; else the V4
/// message's `toolCallId`; else the event's own `callId` (older repair closers); else the
/// `tool-result` block's `toolCallId`.
pub fn answered_call(data: &Value) -> Option<&str> {
    let message = data.get("message");
    let block = message.and_then(|message| message.get("content")?.as_array()?.first());
    message
        .and_then(|message| message.pointer("/source/callId"))
        .or_else(|| message.and_then(|message| message.get("toolCallId")))
        .or_else(|| data.get("callId"))
        .or_else(|| {
            block.filter(|block| block.get("type").and_then(Value::as_str) == Some("tool-result"))?.get("toolCallId")
        })
        .and_then(Value::as_str)
}

/// What is open of a step's calls: the ids of `calls`, in order, that none of `results` (the
/// `data` of its `tool/result`s) answers.
pub fn open_calls<'a>(calls: impl IntoIterator<Item = &'a str>, results: &[&'a Value]) -> Vec<&'a str> {
    let answered: Vec<&str> = results.iter().filter_map(|result| answered_call(result)).collect();
    calls.into_iter().filter(|call| !answered.contains(call)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::js;

    #[test]
    fn event_data_keeps_the_reference_key_order_and_shapes() {
        let failure = Failure::new("SERVER", "HTTP 503");
        let end = TurnEnd { turn: 2, reason: EndReason::Error { error: failure.clone() } };
        assert_eq!(
            js::to_string(&end),
            r#"{"turn":2,"reason":{"kind":"error","error":{"message":"HTTP 503","code":"SERVER"}}}"#
        );
        let aborted = TurnEnd { turn: 1, reason: EndReason::Aborted { reason: AbortedBy::User } };
        assert_eq!(js::to_string(&aborted), r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"user"}}}"#);
        let max = TurnEnd { turn: 1, reason: EndReason::MaxTokens };
        assert_eq!(js::to_string(&max), r#"{"turn":1,"reason":{"kind":"max-tokens"}}"#);
        let attempt = AssistantAttempt { turn: 1, step: 1, failure, text: Some("pa".into()), text_bytes: Some(9) };
        assert_eq!(
            js::to_string(&attempt),
            r#"{"turn":1,"step":1,"failure":{"message":"HTTP 503","code":"SERVER"},"text":"pa","textBytes":9}"#
        );
        let started = RetryStarted { retry_id: "r".into(), turn: 1, step: 2, retry: 3.into() };
        assert_eq!(js::to_string(&started), r#"{"retryId":"r","turn":1,"step":2,"retry":3}"#);
        assert_eq!((RetryRefused::TYPE, RetryRefused::IGNORABLE), ("llm/retry-refused", true));
    }

    #[test]
    fn every_form_of_a_result_names_the_call_it_answers_the_same_way() {
        let forms = [
            serde_json::json!({"message": {"source": {"kind": "tool", "callId": "c1"}, "content": []}, "callId": "other"}),
            serde_json::json!({"message": {"role": "tool", "toolCallId": "c1", "content": []}}),
            serde_json::json!({"callId": "c1", "message": {"role": "user"}}),
            serde_json::json!({"message": {"content": [{"type": "tool-result", "toolCallId": "c1", "content": []}]}}),
        ];
        assert!(forms.iter().all(|form| answered_call(form) == Some("c1")), "{forms:?}");
        let message = serde_json::json!({"content": [
            {"type": "tool-call", "id": "c1", "callId": "stale"}, {"type": "text"}, {"type": "tool-call", "callId": "c2"},
        ]});
        assert_eq!(tool_call_ids(&message).collect::<Vec<_>>(), ["c1", "c2"]);
        assert_eq!(open_calls(tool_call_ids(&message), &[&forms[0]]), ["c2"]);
    }
}
