//! The `mcp` row: one MCP server, started as a child process speaking MCP over stdio, and which
//! of its tools the model is offered.

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_abi::config::{Key, Kind, Row, Schema, MAX_SAFE_INTEGER};
use dsh_abi::ConfigError;
use serde_json::Value;

/// How long a tool call may take when the row does not say.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The row's keys.
pub const MCP: Schema = Schema::row(
    "mcp",
    &[
        Key::new("command", Kind::List, "", "the server's program and arguments, e.g. [npx, -y, PACKAGE, ARG]")
            .refused_as("must be a non-empty list of strings (the program, then its arguments)"),
        Key::new("env", Kind::Mapping, "{}", "the server's environment: exactly these variables, plus PATH and HOME")
            .refused_as("must be a mapping of variable names to strings"),
        Key::new("url", Kind::Misplaced(HTTP_LATER), "", ""),
        Key::new("tools", Kind::Mapping, "{}", "{allow: [NAME…], deny: [NAME…]}: which of its tools are offered")
            .refused_as("must be a mapping with allow and/or deny"),
        Key::new("callTimeoutMs", Kind::integer(1, MAX_SAFE_INTEGER), "60000", "the longest a call may take")
            .refused_as("must be a whole number of milliseconds, at least 1"),
    ],
);

const HTTP_LATER: &str = "servers over streamable HTTP are not supported yet; start the server with `command`";

/// A server row, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// The row id: the server's name.
    pub row_id: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Only these tools (`None`: every tool).
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
    pub call_timeout: Duration,
}

impl McpConfig {
    /// Whether the row offers the server's tool `name`.
    pub fn offers(&self, name: &str) -> bool {
        let allowed = self.allow.as_ref().is_none_or(|allow| allow.iter().any(|allowed| allowed == name));
        allowed && !self.deny.iter().any(|denied| denied == name)
    }
}

/// `{command, env?, tools?: {allow?, deny?}, callTimeoutMs?}`; every problem is reported.
pub fn parse_mcp(row_id: &str, config: &Value) -> Result<McpConfig, Vec<ConfigError>> {
    let mut row = MCP.read(config)?;
    let command = strings(&mut row, "command").unwrap_or_default();
    if command.is_empty() && !row.problems().iter().any(|problem| problem.path.as_str() == "command") {
        row.refuse("command", "is required: the server's program and arguments");
    }
    let env = environment(&mut row);
    let (allow, deny) = filters(&mut row);
    let call_timeout = Duration::from_millis(row.integer("callTimeoutMs"));
    row.finish(McpConfig { row_id: row_id.to_owned(), command, env, allow, deny, call_timeout })
}

/// A list of strings under `key`, or `None` (refused) when it is something else.
fn strings(row: &mut Row<'_>, key: &str) -> Option<Vec<String>> {
    let given = row.given(key)?.clone();
    let list: Option<Vec<String>> =
        given.as_array().and_then(|items| items.iter().map(|item| item.as_str().map(str::to_owned)).collect());
    if list.is_none() && given.is_array() {
        row.refuse(key, "must list strings only");
    }
    list
}

fn environment(row: &mut Row<'_>) -> BTreeMap<String, String> {
    let Some(Value::Object(given)) = row.value("env") else { return BTreeMap::new() };
    let mut env = BTreeMap::new();
    for (name, value) in given {
        match value {
            Value::String(text) if crate::llm::config::is_env_name(&name) => {
                env.insert(name, text);
            }
            Value::String(_) => row.refuse(&format!("env.{name}"), "is not a variable name (letters, digits, _)"),
            _ => row.refuse(&format!("env.{name}"), "must be a string"),
        }
    }
    env
}

fn filters(row: &mut Row<'_>) -> (Option<Vec<String>>, Vec<String>) {
    let Some(Value::Object(given)) = row.value("tools") else { return (None, Vec::new()) };
    let mut list = |key: &str| -> Option<Vec<String>> {
        let value = given.get(key)?;
        let names = value.as_array().and_then(|items| items.iter().map(|i| i.as_str().map(str::to_owned)).collect());
        if names.is_none() {
            row.refuse(&format!("tools.{key}"), "must be a list of tool names");
        }
        names
    };
    let (allow, deny) = (list("allow"), list("deny").unwrap_or_default());
    for key in given.keys().filter(|key| !matches!(key.as_str(), "allow" | "deny")) {
        row.refuse(&format!("tools.{key}"), "unknown key (tools takes allow and deny)");
    }
    (allow, deny)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(config: Value) -> Vec<String> {
        parse_mcp("files", &config)
            .err()
            .unwrap_or_default()
            .iter()
            .map(|error| format!("{}: {}", error.path, error.message))
            .collect()
    }

    #[test]
    fn a_server_row_reads_its_command_environment_filters_and_timeout() {
        let config = json!({
            "command": ["python3", "server.py"], "env": {"TOKEN": "x"},
            "tools": {"allow": ["read", "write"], "deny": ["write"]}, "callTimeoutMs": 500,
        });
        let parsed = parse_mcp("files", &config).unwrap();
        assert_eq!(parsed.command, ["python3", "server.py"]);
        assert_eq!(parsed.env.get("TOKEN").map(String::as_str), Some("x"));
        assert!(parsed.offers("read") && !parsed.offers("write") && !parsed.offers("other"));
        assert_eq!(parsed.call_timeout, Duration::from_millis(500));
        assert_eq!(parse_mcp("s", &json!({"command": ["x"]})).unwrap().call_timeout, DEFAULT_CALL_TIMEOUT);
    }

    #[test]
    fn every_bad_key_is_named() {
        assert_eq!(problems(json!({})), ["command: is required: the server's program and arguments"]);
        assert_eq!(
            problems(
                json!({"command": [1], "env": {"A B": "x", "N": 1}, "tools": {"allow": "x", "only": []}, "callTimeoutMs": 0})
            ),
            [
                "command: must list strings only",
                "env.A B: is not a variable name (letters, digits, _)",
                "env.N: must be a string",
                "tools.allow: must be a list of tool names",
                "tools.only: unknown key (tools takes allow and deny)",
                "callTimeoutMs: must be a whole number of milliseconds, at least 1",
            ]
        );
        assert_eq!(problems(json!({"url": "http://127.0.0.1:1/mcp"}))[0], format!("url: {HTTP_LATER}"));
    }
}
