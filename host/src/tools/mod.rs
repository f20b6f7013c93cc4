//! Tools: the servers of the `mcp` rows, the tools they offer the model (under names unique
//! across servers), and running one call. The host owns the servers' processes, the deadlines
//! and the size of what comes back; whatever goes wrong with a call becomes an error result the
//! model reads, never a panic or a hang. Recording calls and results is the turn's
//! ([`crate::agent::turn`]); this module never touches the log.

pub mod config;
mod server;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{json, Value};

use crate::llm::openai::ToolCall;
use crate::problem::Problem;
use config::McpConfig;
use server::{CallError, Server};

/// The most text of one tool result kept for the model and the log; a longer result is cut
/// here, and the model is told.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// Tool names as OpenAI takes them: `^[a-zA-Z0-9_-]{1,64}$`.
const MAX_NAME_CHARS: usize = 64;

/// A tool the model is offered.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The `mcp` row of its server.
    pub row_id: String,
    /// The name the model calls it by: the server's, or `<row>__<name>` when several servers
    /// offer that name.
    pub name: String,
    /// The name its server knows it by.
    pub remote_name: String,
    pub description: String,
    pub input_schema: Value,
}

/// What a call came to: the `tool-result` content the model reads, and for a call that failed
/// the error the log records (`{name, code}`, as DeepSeek Harness records it).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub content: Vec<Value>,
    pub is_error: bool,
    pub error: Option<Value>,
}

impl ToolOutcome {
    /// A call that produced no result from its tool, with the code that says why.
    pub fn failed(code: &str, message: &str) -> ToolOutcome {
        ToolOutcome {
            content: vec![json!({"type": "text", "text": format!("Error: {message}")})],
            is_error: true,
            error: Some(json!({"name": "ToolCallError", "code": code})),
        }
    }
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
                Err(why) => {
                    problems.push(Problem::row(None, &config.row_id, format!("the MCP server cannot be used: {why}")))
                }
            }
        }
        tools.offered = offered_names(&tools.servers, listed);
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

    /// Runs one call; every way it can go wrong is an error outcome.
    pub async fn call(&self, call: &ToolCall) -> ToolOutcome {
        let Some(tool) = self.offered.iter().find(|tool| tool.name == call.name) else {
            let offered: Vec<&str> = self.offered.iter().map(|tool| tool.name.as_str()).collect();
            let names = if offered.is_empty() { "none".to_owned() } else { offered.join(", ") };
            let message = format!("no tool named {} is offered (tools: {names})", json!(call.name));
            return ToolOutcome::failed("TOOL_NOT_FOUND", &message);
        };
        let arguments = match arguments_of(&call.arguments) {
            Ok(arguments) => arguments,
            Err(why) => return ToolOutcome::failed("TOOL_INVALID_ARGUMENTS", &why),
        };
        let server =
            self.servers.iter().find(|server| server.config.row_id == tool.row_id).expect("offered by a server");
        match server.call(&tool.remote_name, arguments).await {
            Ok(result) => outcome_of(result),
            Err(CallError::NotSent(why)) => ToolOutcome::failed("TOOL_SERVER_UNAVAILABLE", &why),
            Err(CallError::OutcomeUnknown(why)) => ToolOutcome::failed(
                "TOOL_OUTCOME_UNKNOWN",
                &format!("{why}; whether the tool ran is unknown, and dsh does not call it again"),
            ),
            Err(CallError::Refused(why)) => {
                ToolOutcome::failed("TOOL_CALL_REFUSED", &format!("server \"{}\" refused the call: {why}", tool.row_id))
            }
        }
    }
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

/// Names unique across servers: a name only one server offers is kept; a name several offer
/// becomes `<row>__<name>` for each of them.
fn offered_names(servers: &[Server], listed: Vec<(usize, Tool)>) -> Vec<OfferedTool> {
    let count = |name: &str| listed.iter().filter(|(_, tool)| tool.name == name).count();
    listed
        .iter()
        .map(|(server, tool)| {
            let row_id = servers[*server].config.row_id.clone();
            let name = match count(&tool.name) {
                1 => tool.name.to_string(),
                _ => format!("{row_id}__{}", tool.name),
            };
            OfferedTool {
                name: model_name(&name),
                remote_name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object(tool.input_schema.as_ref().clone()),
                row_id,
            }
        })
        .collect()
}

/// `name` with every character OpenAI refuses replaced by `_`, at most 64 characters.
fn model_name(name: &str) -> String {
    let kept = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    name.chars().map(|c| if kept(c) { c } else { '_' }).take(MAX_NAME_CHARS).collect()
}

/// A tool's answer as `tool-result` content: its text blocks, other blocks described, the whole
/// cut at [`MAX_RESULT_BYTES`].
fn outcome_of(result: CallToolResult) -> ToolOutcome {
    let mut texts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            other => format!(
                "[{} content]",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v["type"].as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        })
        .collect();
    if texts.is_empty() {
        texts.extend(result.structured_content.as_ref().map(dsh_abi::js::to_string));
    }
    let content = capped(texts).into_iter().map(|text| json!({"type": "text", "text": text})).collect();
    ToolOutcome { content, is_error: result.is_error == Some(true), error: None }
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
    fn arguments_are_an_object_or_nothing() {
        assert_eq!(arguments_of(""), Ok(None));
        assert_eq!(arguments_of("{\"a\":1}").unwrap().unwrap()["a"], 1);
        assert_eq!(arguments_of("[1]"), Err("the arguments must be a JSON object".to_owned()));
        assert!(arguments_of("{not json").unwrap_err().starts_with("the arguments are not JSON ("));
    }

    #[test]
    fn model_names_keep_what_openai_accepts() {
        assert_eq!(model_name("files__read.file"), "files__read_file");
        assert_eq!(model_name(&"x".repeat(80)).len(), 64);
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
        let outcome = runtime.block_on(Tools::default().call(&call));
        assert!(outcome.is_error);
        assert_eq!(outcome.content[0]["text"], "Error: no tool named \"nope\" is offered (tools: none)");
        assert_eq!(outcome.error, Some(json!({"name": "ToolCallError", "code": "TOOL_NOT_FOUND"})));
    }
}
