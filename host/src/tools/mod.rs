//! Tools: the servers of the `mcp` rows, the tools they offer the model (under names unique
//! across servers), running one call under its key, and the rule that resolves a call whose
//! answer was lost ([`Rule`]). The host owns the servers' processes, the deadlines and the size of
//! what comes back; whatever goes wrong with a call becomes an error result the model reads, or a
//! lost answer the turn resolves — never a panic or a hang. Recording calls, tasks, resolutions
//! and results is the turn's ([`crate::agent::turn`]); this module never touches the log.

pub mod config;
pub mod guard;
mod names;
mod server;

pub use names::OfferedTool;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

use crate::llm::openai::ToolCall;
use crate::problem::Problem;
use config::McpConfig;
use server::{CallError, Server};
pub use server::{Notice, DEDUP_CAPABILITY};

/// What a call came to: an outcome to record, or an answer lost (dsh cannot know whether the
/// tool ran) for the turn to resolve by its [`Rule`].
#[derive(Debug, Clone, PartialEq)]
pub enum Called {
    Outcome(ToolOutcome),
    Lost(String),
}

/// How a call whose answer was lost is resolved, first that applies: its recorded task polled;
/// sent again with its key to a server that deduplicates by it; run again when read-only, or
/// idempotent by a hint the row trusts; else left unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Task,
    Dedup,
    ReadOnly,
    Idempotent,
    Unknown,
}

impl Rule {
    /// The rule's name in `tool/resolution` and `config tools`.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Task => "task",
            Rule::Dedup => "dedup",
            Rule::ReadOnly => "read-only",
            Rule::Idempotent => "idempotent",
            Rule::Unknown => "unknown",
        }
    }
}

/// The key of one logical call: derived from the session id and the call's turn, step and id
/// (a provider may number call ids per answer, so the id alone could repeat in a session), as
/// `dsh-` and 32 hex digits of their sha256.
pub fn idempotency_key(session_id: &str, turn: u64, step: u64, call_id: &str) -> String {
    let digest = dsh_session::fsutil::sha256_hex(format!("{session_id}\n{turn}\n{step}\n{call_id}").as_bytes());
    format!("dsh-{}", &digest[..32])
}

/// The result of a call whose answer is lost for good: the key is in the text, so a tool that
/// can be asked about its calls can be asked about this one.
pub fn unknown_outcome(why: &str, key: &str) -> ToolOutcome {
    ToolOutcome::failed(
        "TOOL_OUTCOME_UNKNOWN",
        &format!("{why}; whether the tool ran is unknown, and dsh does not call it again (its idempotency key: {key})"),
    )
}

/// The most text of one tool result kept for the model and the log; a longer result is cut
/// here, and the model is told.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// What a call came to: the `tool-result` content the model reads, the binary parts of it the
/// session keeps beside its log (images, audio, binary resources, each named in the content by
/// its sha256), and for a call that failed the error the log records (`{name, code}`, as DeepSeek
/// Harness records it).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub content: Vec<Value>,
    pub attachments: Vec<Attachment>,
    pub is_error: bool,
    pub error: Option<Value>,
}

/// Binary content of a tool result, kept durably with the session (its id is its sha256).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub id: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
}

/// The code a result the server flagged `isError` is recorded with.
pub const TOOL_ERROR: &str = "TOOL_ERROR";

impl ToolOutcome {
    /// A call that produced no result from its tool, with the code that says why.
    pub fn failed(code: &str, message: &str) -> ToolOutcome {
        ToolOutcome {
            content: vec![json!({"type": "text", "text": format!("Error: {message}")})],
            attachments: Vec::new(),
            is_error: true,
            error: Some(error_of(code)),
        }
    }
}

fn error_of(code: &str) -> Value {
    json!({"name": "ToolCallError", "code": code})
}

/// The servers of a profile's `mcp` rows and their tools.
#[derive(Default)]
pub struct Tools {
    servers: Vec<Server>,
    offered: Vec<OfferedTool>,
}

impl Tools {
    /// Starts every server and lists its tools; a server that does not start or answer
    /// `tools/list` is a problem naming its row.
    pub async fn start(configs: &[McpConfig]) -> (Tools, Vec<Problem>) {
        let started = futures_util::future::join_all(configs.iter().map(Server::start)).await;
        let mut tools = Tools::default();
        let mut problems = Vec::new();
        let mut listed = Vec::new();
        for (config, outcome) in configs.iter().zip(started) {
            match outcome {
                Ok((server, server_tools)) => {
                    listed.extend(
                        server_tools
                            .into_iter()
                            .filter(|tool| config.offers(&tool.name))
                            .map(|tool| (tools.servers.len(), tool)),
                    );
                    tools.servers.push(server);
                }
                Err(why) => problems.push(
                    Problem::row(None, &config.row_id, format!("the MCP server cannot be used: {why}"))
                        .with_hint(start_hint(config)),
                ),
            }
        }
        let started: Vec<&McpConfig> = tools.servers.iter().map(|server| &server.config).collect();
        let (offered, clashes) = names::offered(&started, listed);
        tools.offered = offered;
        problems.extend(clashes);
        (tools, problems)
    }

    /// Closes every server's connection in order: at exit, so no transport is cut off by the
    /// runtime shutting down (rmcp reports that as an error).
    pub async fn close(&self) {
        futures_util::future::join_all(self.servers.iter().map(Server::close)).await;
    }

    pub fn offered(&self) -> &[OfferedTool] {
        &self.offered
    }

    /// The `tools` of a chat-completion request.
    pub fn definitions(&self) -> Vec<Value> {
        let function = |tool: &OfferedTool| json!({"name": tool.name, "description": tool.description, "parameters": tool.input_schema});
        self.offered.iter().map(|tool| json!({"type": "function", "function": function(tool)})).collect()
    }

    /// Runs one call under `key`; every way it can go wrong is an error outcome, but an answer
    /// lost after the call was sent, which the turn resolves.
    pub async fn call(&self, call: &ToolCall, key: &str, notify: &(dyn Fn(Notice) + Send + Sync)) -> Called {
        let (tool, server) = match self.holder(call) {
            Ok(found) => found,
            Err(why) => return Called::Outcome(ToolOutcome::failed("TOOL_NOT_FOUND", &why)),
        };
        let arguments = match arguments_of(&call.arguments) {
            Ok(arguments) => arguments,
            Err(why) => return Called::Outcome(ToolOutcome::failed("TOOL_INVALID_ARGUMENTS", &why)),
        };
        called(tool, server.call(&tool.remote_name, arguments, key, notify).await)
    }

    /// Polls the task a call became to its end.
    pub async fn poll(&self, call: &ToolCall, task_id: &str, notify: &(dyn Fn(Notice) + Send + Sync)) -> Called {
        match self.holder(call) {
            Ok((tool, server)) => called(tool, server.poll(task_id, notify).await),
            Err(why) => Called::Outcome(ToolOutcome::failed("TOOL_NOT_FOUND", &why)),
        }
    }

    /// The rule that resolves `call` when its answer was lost, and why it applies; `task` is the
    /// MCP task the call was recorded as, if any.
    pub fn rule(&self, call_name: &str, task: Option<&str>) -> (Rule, String) {
        match self.offered.iter().find(|tool| tool.name == call_name) {
            Some(tool) => self.rule_of(tool, task),
            None => (Rule::Unknown, format!("no tool named {} is offered now", json!(call_name))),
        }
    }

    /// The rule for a call of `tool` whose answer was lost ([`Rule`]), and why.
    pub fn rule_of(&self, tool: &OfferedTool, task: Option<&str>) -> (Rule, String) {
        let server = self.server_of(tool);
        let (row, resolve) = (&tool.row_id, &server.config.resolve);
        if let Some(task) = task.filter(|_| resolve.tasks) {
            return (Rule::Task, format!("the call became MCP task {task}, which is polled for its result"));
        }
        if resolve.dedup && server.deduplicates() {
            let why = format!(
                "server \"{row}\" advertises {DEDUP_CAPABILITY}: the call is sent again with its key, and runs once"
            );
            return (Rule::Dedup, why);
        }
        if resolve.read_only && tool.read_only_hint {
            return (Rule::ReadOnly, "the tool is annotated readOnlyHint: true, so it runs again".to_owned());
        }
        if resolve.idempotent && tool.idempotent_hint {
            let why = format!("the tool is annotated idempotentHint: true, and row \"{row}\" trusts its hints (resolve.idempotent), so it runs again");
            return (Rule::Idempotent, why);
        }
        (Rule::Unknown, unresolved_why(tool, server))
    }

    /// Whether calls of `tool` may become MCP tasks (its row's `resolve.tasks`).
    pub fn tasks_on(&self, tool: &OfferedTool) -> bool {
        self.server_of(tool).config.resolve.tasks
    }

    fn server_of(&self, tool: &OfferedTool) -> &Server {
        self.servers.iter().find(|server| server.config.row_id == tool.row_id).expect("offered by a server")
    }

    /// The offered tool a call names and its server; else why not, for the model.
    fn holder(&self, call: &ToolCall) -> Result<(&OfferedTool, &Server), String> {
        let Some(tool) = self.offered.iter().find(|tool| tool.name == call.name) else {
            let offered: Vec<&str> = self.offered.iter().map(|tool| tool.name.as_str()).collect();
            let names = if offered.is_empty() { "none".to_owned() } else { offered.join(", ") };
            return Err(format!("no tool named {} is offered (tools: {names})", json!(call.name)));
        };
        Ok((tool, self.server_of(tool)))
    }
}

/// Why no rule resolves a call of `tool`: which of them were off, and which did not apply.
fn unresolved_why(tool: &OfferedTool, server: &Server) -> String {
    let resolve = &server.config.resolve;
    let dedup = match server.deduplicates() {
        false => format!("server \"{}\" does not advertise {DEDUP_CAPABILITY}", tool.row_id),
        true => "its deduplication is turned off (resolve.dedup)".to_owned(),
    };
    let hints = match (tool.read_only_hint, tool.idempotent_hint) {
        (true, _) => "its readOnlyHint is not used (resolve.readOnly)",
        (false, true) if !resolve.idempotent => "its idempotentHint is not trusted (resolve.idempotent)",
        _ => "it is annotated neither read-only nor idempotent",
    };
    format!("{dedup}, and {hints}")
}

/// What a server's answer to a call comes to.
fn called(tool: &OfferedTool, answer: Result<CallToolResult, CallError>) -> Called {
    Called::Outcome(match answer {
        Ok(result) => outcome_of(result),
        Err(CallError::NotSent(why)) => ToolOutcome::failed("TOOL_SERVER_UNAVAILABLE", &why),
        Err(CallError::OutcomeUnknown(why)) => return Called::Lost(why),
        Err(CallError::Refused(why)) => {
            ToolOutcome::failed("TOOL_CALL_REFUSED", &format!("server \"{}\" refused the call: {why}", tool.row_id))
        }
    })
}

/// The arguments the model wrote: a JSON object, or nothing (`{}` for a tool without any).
fn arguments_of(text: &str) -> Result<Option<serde_json::Map<String, Value>>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(arguments)) => Ok(Some(arguments)),
        Ok(_) => Err("the arguments must be a JSON object".to_owned()),
        Err(err) => Err(format!("the arguments are not JSON ({err})")),
    }
}

/// What to look at when a server did not start: the endpoint an HTTP row names, or the command.
fn start_hint(config: &McpConfig) -> Option<String> {
    match &config.transport {
        config::Transport::Http { url, .. } => Some(format!(
            "is the MCP server at {} running and reachable? (the row's url)",
            dsh_session::redact::url(url)
        )),
        config::Transport::Stdio { .. } => None,
    }
}

/// A tool's answer as `tool-result` content, every block kept: text as it is; an embedded text
/// resource as its text, headed by its URI; a resource link as its name and URI; an image, audio
/// or binary resource as an attachment, with a block naming it and a line telling the model what
/// it is. Text is cut at [`MAX_RESULT_BYTES`] in all; a result the server flags `isError` is
/// recorded with [`TOOL_ERROR`].
fn outcome_of(result: CallToolResult) -> ToolOutcome {
    let mut texts = Vec::new();
    let mut attachments = Vec::new();
    for block in &result.content {
        texts.push(block_text(block, &mut attachments));
    }
    if texts.is_empty() {
        texts.extend(result.structured_content.as_ref().map(dsh_abi::js::to_string));
    }
    let mut content: Vec<Value> = capped(texts).into_iter().map(|text| json!({"type": "text", "text": text})).collect();
    content.extend(attachments.iter().map(attachment_block));
    let is_error = result.is_error == Some(true);
    ToolOutcome { content, attachments, is_error, error: is_error.then(|| error_of(TOOL_ERROR)) }
}

/// The text the model reads for one block; binary content goes to `attachments`.
fn block_text(block: &ContentBlock, attachments: &mut Vec<Attachment>) -> String {
    use rmcp::model::ResourceContents;
    let mut attach = |data: &str, mime_type: &str, what: &str| {
        let Ok(bytes) = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data.trim()) else {
            return format!("[{what} {mime_type}: its data is not base64]");
        };
        let attachment =
            Attachment { id: dsh_session::fsutil::sha256_hex(&bytes), mime_type: mime_type.to_owned(), bytes };
        let line =
            format!("[{what} {mime_type}, {} bytes, kept as attachment {}]", attachment.bytes.len(), attachment.id);
        attachments.push(attachment);
        line
    };
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => attach(&image.data, &image.mime_type, "image"),
        ContentBlock::Audio(audio) => attach(&audio.data, &audio.mime_type, "audio"),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                attach(blob, mime_type.as_deref().unwrap_or("application/octet-stream"), &format!("resource {uri}"))
            }
            other => unknown_block(other),
        },
        ContentBlock::ResourceLink(link) => {
            let title = link.title.as_deref().or(link.description.as_deref()).map(|title| format!(": {title}"));
            format!("[resource link {} {}{}]", link.name, link.uri, title.unwrap_or_default())
        }
        other => unknown_block(other),
    }
}

/// A kind of content this dsh does not know, kept whole as its JSON.
fn unknown_block(block: &impl serde::Serialize) -> String {
    let json = serde_json::to_value(block).unwrap_or_default();
    format!("[{} content] {}", json["type"].as_str().unwrap_or("unknown"), dsh_abi::js::to_string(&json))
}

/// The block a tool result's content names an attachment with (DeepSeek Harness's shape).
fn attachment_block(attachment: &Attachment) -> Value {
    let kind = if attachment.mime_type.starts_with("image/") { "image" } else { "file" };
    json!({"type": kind, "attachment": {
        "attachmentId": attachment.id, "mimeType": attachment.mime_type, "bytes": attachment.bytes.len(),
    }})
}

/// The texts, cut where their total passes [`MAX_RESULT_BYTES`], with a note saying so.
fn capped(texts: Vec<String>) -> Vec<String> {
    let total: usize = texts.iter().map(String::len).sum();
    if total <= MAX_RESULT_BYTES {
        return texts;
    }
    let mut left = MAX_RESULT_BYTES;
    let mut kept = Vec::new();
    for mut text in texts {
        if left == 0 {
            break;
        }
        if text.len() > left {
            let mut cut = left;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        left -= text.len();
        kept.push(text);
    }
    kept.push(format!("[dsh: the result was cut at {MAX_RESULT_BYTES} of its {total} bytes]"));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_opaque_string_per_logical_call() {
        let key = idempotency_key("s1", 1, 2, "call_1");
        assert_eq!(key, idempotency_key("s1", 1, 2, "call_1"));
        assert!(key.starts_with("dsh-") && key.len() == 36, "{key}");
        let others = [("s2", 1, 2, "call_1"), ("s1", 2, 2, "call_1"), ("s1", 1, 3, "call_1"), ("s1", 1, 2, "call_2")];
        for (session, turn, step, call) in others {
            assert_ne!(idempotency_key(session, turn, step, call), key);
        }
    }

    #[test]
    fn arguments_are_an_object_or_nothing() {
        assert_eq!(arguments_of(""), Ok(None));
        assert_eq!(arguments_of("{\"a\":1}").unwrap().unwrap()["a"], 1);
        assert_eq!(arguments_of("[1]"), Err("the arguments must be a JSON object".to_owned()));
        assert!(arguments_of("{not json").unwrap_err().starts_with("the arguments are not JSON ("));
    }

    #[test]
    fn a_result_one_byte_over_the_cap_is_cut_and_says_so() {
        assert_eq!(capped(vec!["a".repeat(MAX_RESULT_BYTES)]), vec!["a".repeat(MAX_RESULT_BYTES)]);
        let cut = capped(vec!["a".repeat(MAX_RESULT_BYTES - 1), "bc".to_owned()]);
        assert_eq!(cut[1], "b");
        assert_eq!(
            cut[2],
            format!("[dsh: the result was cut at {MAX_RESULT_BYTES} of its {} bytes]", MAX_RESULT_BYTES + 1)
        );
    }

    #[test]
    fn an_unknown_tool_is_an_error_the_model_reads() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let call = ToolCall { id: "c".into(), name: "nope".into(), arguments: "{}".into() };
        let Called::Outcome(outcome) = runtime.block_on(Tools::default().call(&call, "k", &|_| {})) else { panic!() };
        assert!(outcome.is_error);
        assert_eq!(outcome.content[0]["text"], "Error: no tool named \"nope\" is offered (tools: none)");
        assert_eq!(outcome.error, Some(json!({"name": "ToolCallError", "code": "TOOL_NOT_FOUND"})));
    }
}
