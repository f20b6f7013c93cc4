//! The `mcp` row: one MCP server, a child process speaking MCP over stdio or an endpoint over
//! streamable HTTP, and which of its tools the model is offered.

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_abi::config::{Key, Kind, Row, Schema, MAX_SAFE_INTEGER};
use dsh_abi::ConfigError;
use serde_json::Value;

use crate::llm::config::{ENV_NAME, HEADER_MAP};

/// How long a tool call may take when the row does not say.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The row's keys.
pub const MCP: Schema = Schema::row(
    "mcp",
    &[
        Key::new(
            "command",
            Kind::list_of(&Kind::String),
            "",
            "a server over stdio: its program and arguments, e.g. [npx, -y, PACKAGE]",
        )
        .refused_as("must be a non-empty list of strings (the program, then its arguments)")
        .items_refused_as("must list strings only"),
        Key::new(
            "env",
            Kind::map_of(&ENV_NAME, &Kind::String),
            "{}",
            "with command: the server's environment, exactly these plus PATH and HOME",
        )
        .items_refused_as("must be a string"),
        Key::new(
            "passEnv",
            Kind::list_of(&ENV_NAME),
            "[]",
            "with command: variables of dsh's own environment the server gets too, e.g. [GITHUB_TOKEN]",
        ),
        Key::new("url", Kind::Text, "", "a server over streamable HTTP: its endpoint, e.g. http://127.0.0.1:3001/mcp")
            .refused_as("must be an http or https URL"),
        Key::new("headers", HEADER_MAP, "{}", "with url: headers sent with every request"),
        crate::llm::config::HEADER_ENV,
        Key::new(
            "tokenEnv",
            Kind::Text,
            "",
            "with url: the environment variable whose value is sent as a bearer token",
        )
        .refused_as("must name an environment variable"),
        Key::new("tools", Kind::Nested(&TOOLS), "{}", "which of its tools are offered")
            .refused_as("must be a mapping with allow and/or deny"),
        Key::new(
            "rename",
            Kind::map_of(&Kind::String, &TOOL_NAME),
            "{}",
            "{SERVER_NAME: MODEL_NAME}: the names the model calls some of its tools by",
        ),
        Key::new("callTimeoutMs", Kind::integer(1, MAX_SAFE_INTEGER), "60000", "the longest a call may take")
            .refused_as("must be a whole number of milliseconds, at least 1"),
        Key::new(
            "startTimeoutMs",
            Kind::integer(1, MAX_SAFE_INTEGER),
            "60000",
            "the longest starting the server and listing its tools may take",
        )
        .refused_as("must be a whole number of milliseconds, at least 1"),
        Key::new(
            "resolve",
            Kind::Nested(&RESOLVE),
            "{}",
            "how a call whose answer was lost (dsh stopped, the server went, a deadline) is resolved; each rule may be turned off",
        )
        .refused_as("must be a mapping with dedup, readOnly, idempotent and/or tasks"),
    ],
);

/// The keys of `resolve`: one per rule that resolves a call whose answer was lost.
const RESOLVE: Schema = Schema::row(
    "resolve",
    &[
        Key::new(
            "dedup",
            Kind::Flag,
            "true",
            "send the call again with its key when the server advertises that it deduplicates by it",
        )
        .refused_as("must be true or false"),
        Key::new("readOnly", Kind::Flag, "true", "run a tool annotated readOnlyHint: true again")
            .refused_as("must be true or false"),
        Key::new(
            "idempotent",
            Kind::Flag,
            "false",
            "trust this server's idempotentHint: true and run such a tool again",
        )
        .refused_as("must be true or false"),
        Key::new(
            "tasks",
            Kind::Flag,
            "true",
            "call a tool that requires an MCP task as one, and poll a recorded task instead of calling again",
        )
        .refused_as("must be true or false"),
    ],
)
.unknown_keys_refused_as("unknown key (resolve takes dedup, readOnly, idempotent and tasks)");

/// Which rules may resolve a call of the row's server whose answer was lost (`resolve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolve {
    pub dedup: bool,
    pub read_only: bool,
    pub idempotent: bool,
    pub tasks: bool,
}

/// The keys of `tools`.
const TOOLS: Schema = Schema::row(
    "tools",
    &[
        Key::new("allow", Kind::list_of(&Kind::String), "", "only these tools are offered")
            .refused_as("must be a list of tool names"),
        Key::new("deny", Kind::list_of(&Kind::String), "[]", "these tools are never offered")
            .refused_as("must be a list of tool names"),
    ],
)
.unknown_keys_refused_as("unknown key (tools takes allow and deny)");

/// Tool names as OpenAI takes them: `^[a-zA-Z0-9_-]{1,64}$`.
pub const MAX_NAME_CHARS: usize = 64;

/// Whether the model accepts `name` as a tool name (`^[a-zA-Z0-9_-]{1,64}$`).
pub fn is_model_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// A name the model calls a tool by.
const TOOL_NAME: Kind = Kind::matching("a tool name the model accepts (1 to 64 of A-Z a-z 0-9 _ -)", is_model_name);

/// Headers the MCP transport sets itself.
const TRANSPORT_HEADERS: [&str; 4] = ["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// How dsh reaches the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on its stdin and stdout, with `env` and the variables named
    /// by `pass_env` (read from dsh's environment when it starts).
    Stdio { command: Vec<String>, env: BTreeMap<String, String>, pass_env: Vec<String> },
    /// An MCP endpoint over streamable HTTP; the token (`token_env`) and the `header_env` headers
    /// are read from the environment when connecting, never kept in the configuration.
    Http { url: String, headers: Vec<(String, String)>, header_env: Vec<(String, String)>, token_env: Option<String> },
}

/// A server row, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// The row id: the server's name.
    pub row_id: String,
    pub transport: Transport,
    /// Only these tools (`None`: every tool).
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
    /// The names the model calls some of the server's tools by, by their server names.
    pub rename: BTreeMap<String, String>,
    pub call_timeout: Duration,
    pub start_timeout: Duration,
    pub resolve: Resolve,
}

impl McpConfig {
    /// Whether the row offers the server's tool `name`.
    pub fn offers(&self, name: &str) -> bool {
        let allowed = self.allow.as_ref().is_none_or(|allow| allow.iter().any(|allowed| allowed == name));
        allowed && !self.deny.iter().any(|denied| denied == name)
    }
}

/// `{command, env?} | {url, headers?, tokenEnv?}`, then `{tools?, callTimeoutMs?,
/// startTimeoutMs?, resolve?}`; every problem is reported.
pub fn parse_mcp(row_id: &str, config: &Value) -> Result<McpConfig, Vec<ConfigError>> {
    let mut row = MCP.read(config)?;
    let transport = transport(&mut row);
    let (allow, deny) = filters(&mut row);
    let rename = row.string_entries("rename").into_iter().collect();
    let call_timeout = Duration::from_millis(row.integer("callTimeoutMs"));
    let start_timeout = Duration::from_millis(row.integer("startTimeoutMs"));
    let resolve = row.nested("resolve", |resolve| Resolve {
        dedup: resolve.flag("dedup"),
        read_only: resolve.flag("readOnly"),
        idempotent: resolve.flag("idempotent"),
        tasks: resolve.flag("tasks"),
    });
    let row_id = row_id.to_owned();
    row.finish(McpConfig { row_id, transport, allow, deny, rename, call_timeout, start_timeout, resolve })
}

/// Exactly one of `command` and `url`, and only the keys that go with it.
fn transport(row: &mut Row<'_>) -> Transport {
    let (has_command, has_url) = (row.given("command").is_some(), row.given("url").is_some());
    if has_command && has_url {
        row.refuse("url", "a server is either a command (stdio) or a url (streamable HTTP), not both");
    }
    if has_url {
        for key in ["env", "passEnv"] {
            if row.given(key).is_some() {
                row.refuse(key, "goes with command; a server at a url has its own environment");
            }
        }
        return http(row);
    }
    for key in ["headers", "headerEnv", "tokenEnv"] {
        if row.given(key).is_some() {
            row.refuse(key, "goes with url (a server over streamable HTTP)");
        }
    }
    let command = row.strings("command");
    if command.is_empty() && !row.problems().iter().any(|problem| problem.path.as_str() == "command") {
        row.refuse("command", "is required: the server's program and arguments (or a url)");
    }
    let env = row.string_entries("env").into_iter().collect();
    let pass_env = row.strings("passEnv");
    Transport::Stdio { command, env, pass_env }
}

fn http(row: &mut Row<'_>) -> Transport {
    let url = row.text("url").unwrap_or_default();
    if !url.is_empty() && !reqwest::Url::parse(&url).is_ok_and(|url| matches!(url.scheme(), "http" | "https")) {
        row.refuse("url", format!("must be an http or https URL, got {url:?}"));
    }
    let token_env = row.text("tokenEnv");
    if let Some(name) = token_env.as_ref().filter(|name| !crate::llm::config::is_env_name(name)) {
        row.refuse("tokenEnv", format!("must name an environment variable (letters, digits, _), got \"{name}\""));
    }
    let headers = crate::llm::config::headers(row);
    let header_env = crate::llm::config::header_env(row);
    for (name, _) in &headers {
        let lower = name.to_ascii_lowercase();
        if TRANSPORT_HEADERS.contains(&lower.as_str()) {
            row.refuse(&format!("headers.{name}"), "is set by the MCP transport");
        } else if lower == "authorization" && token_env.is_some() {
            row.refuse(&format!("headers.{name}"), "is sent from tokenEnv; set one of them");
        }
    }
    for (name, _) in &header_env {
        if TRANSPORT_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            row.refuse(&format!("headerEnv.{name}"), "is set by the MCP transport");
        }
    }
    Transport::Http { url, headers, header_env, token_env }
}

/// `tools`: only the tools `allow` lists (`None`: every tool), none that `deny` lists.
fn filters(row: &mut Row<'_>) -> (Option<Vec<String>>, Vec<String>) {
    row.nested("tools", |tools| (tools.is_set("allow").then(|| tools.strings("allow")), tools.strings("deny")))
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
        let Transport::Stdio { command, env, .. } = &parsed.transport else { panic!("{parsed:?}") };
        assert_eq!(command, &["python3", "server.py"]);
        assert_eq!(env.get("TOKEN").map(String::as_str), Some("x"));
        assert!(parsed.offers("read") && !parsed.offers("write") && !parsed.offers("other"));
        assert_eq!(parsed.call_timeout, Duration::from_millis(500));
        let defaults = parse_mcp("s", &json!({"command": ["x"]})).unwrap();
        assert_eq!((defaults.call_timeout, defaults.start_timeout), (DEFAULT_CALL_TIMEOUT, DEFAULT_CALL_TIMEOUT));
    }

    #[test]
    fn a_server_over_http_reads_its_url_headers_and_token_variable() {
        let config = json!({"url": "http://127.0.0.1:3001/mcp", "headers": {"X-Team": "a"}, "tokenEnv": "MCP_TOKEN"});
        let parsed = parse_mcp("remote", &config).unwrap();
        assert_eq!(
            parsed.transport,
            Transport::Http {
                url: "http://127.0.0.1:3001/mcp".into(),
                headers: vec![("X-Team".into(), "a".into())],
                header_env: Vec::new(),
                token_env: Some("MCP_TOKEN".into()),
            }
        );
    }

    #[test]
    fn keys_of_the_other_transport_are_refused_by_name() {
        assert_eq!(
            problems(json!({"command": ["x"], "url": "http://h/mcp", "env": {}})),
            [
                "url: a server is either a command (stdio) or a url (streamable HTTP), not both",
                "env: goes with command; a server at a url has its own environment",
            ]
        );
        assert_eq!(
            problems(json!({"command": ["x"], "headers": {}, "tokenEnv": "T"})),
            [
                "headers: goes with url (a server over streamable HTTP)",
                "tokenEnv: goes with url (a server over streamable HTTP)"
            ]
        );
        assert_eq!(
            problems(json!({"url": "ftp://h", "tokenEnv": "1T", "headers": {"Accept": "x", "Authorization": "y"}})),
            [
                "url: must be an http or https URL, got \"ftp://h\"",
                "tokenEnv: must name an environment variable (letters, digits, _), got \"1T\"",
                "headers.Accept: is set by the MCP transport",
                "headers.Authorization: is sent from tokenEnv; set one of them",
            ]
        );
    }

    #[test]
    fn variables_and_headers_are_each_named_where_they_are_wrong() {
        assert_eq!(
            problems(json!({"command": ["x"], "passEnv": ["GITHUB_TOKEN", "1X", 5], "rename": {"read": "a b"}})),
            [
                "passEnv[1]: must be a variable name (letters, digits, _), got \"1X\"",
                "passEnv[2]: must be a variable name (letters, digits, _), got 5",
                "rename.read: must be a tool name the model accepts (1 to 64 of A-Z a-z 0-9 _ -), got \"a b\"",
            ]
        );
        assert_eq!(
            problems(
                json!({"url": "http://h/mcp", "headers": {"X Y": "a", "X-Ok": "\n"}, "headerEnv": {"X-Key": "1X"}})
            ),
            [
                "headers.X Y: is not a valid header name",
                "headers.X-Ok: must be a header value (a string of visible characters), got \"\\n\"",
                "headerEnv.X-Key: must be a variable name (letters, digits, _), got \"1X\"",
            ]
        );
    }

    #[test]
    fn each_resolution_rule_is_on_but_trusting_idempotent_hints_and_each_can_be_turned() {
        let defaults = parse_mcp("s", &json!({"command": ["x"]})).unwrap().resolve;
        assert_eq!(defaults, Resolve { dedup: true, read_only: true, idempotent: false, tasks: true });
        let config = json!({"command": ["x"], "resolve": {"dedup": false, "readOnly": false, "idempotent": true, "tasks": false}});
        let turned = parse_mcp("s", &config).unwrap().resolve;
        assert_eq!(turned, Resolve { dedup: false, read_only: false, idempotent: true, tasks: false });
        assert_eq!(
            problems(json!({"command": ["x"], "resolve": {"dedup": "yes", "retry": true}})),
            [
                "resolve.dedup: must be true or false",
                "resolve.retry: unknown key (resolve takes dedup, readOnly, idempotent and tasks)"
            ]
        );
    }

    #[test]
    fn every_bad_key_is_named() {
        assert_eq!(problems(json!({})), ["command: is required: the server's program and arguments (or a url)"]);
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
    }
}
