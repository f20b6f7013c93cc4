//! One MCP server: its child process or HTTP endpoint, the MCP session with it (through `rmcp`),
//! its tools, and calls with a deadline, each carrying its key in `_meta`. A server found gone
//! before a call is started again once. A call the server may have begun is sent again only when
//! the turn resolves it so (by the rule of its tool). A tool that requires an MCP task (the server refuses
//! a plain call with `-32601`) is called as one and its task polled (`tasks/get`, then
//! `tasks/result`, the 2025-11-25 Tasks, spoken as custom requests: rmcp's own task types are a
//! later revision's).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest, CustomRequest, ErrorCode,
    Implementation, JsonObject, ProtocolVersion, RequestMetaObject, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::config::{McpConfig, Transport};
use super::guard::Lifeline;

/// The `_meta` member of every `tools/call` that holds dsh's key for the logical call: one opaque
/// string, the same each time the call is sent.
pub const KEY_META: &str = "dsh/idempotency-key";

/// The experimental capability (`initialize` → `capabilities.experimental`) by which a server
/// says it deduplicates `tools/call` by [`KEY_META`]: a call whose key it has seen is answered
/// with that call's result (once the first has ended) and its tool does not run again.
pub const DEDUP_CAPABILITY: &str = "dsh/idempotency";

/// What a call tells the turn while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The server took the call as an MCP task with this id.
    Task(String),
    /// The task's status message changed.
    Progress(String),
}

/// How often a task is polled when the server does not say.
const TASK_POLL: Duration = Duration::from_millis(250);

/// The most of a server's stderr kept for messages: its last lines say why it failed.
const STDERR_TAIL_BYTES: usize = 2048;

/// How long a server that failed its handshake is given to finish writing its stderr.
const STDERR_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

type Session = RunningService<RoleClient, ClientConfig>;

/// What dsh says of itself in `initialize`: the newest protocol version that still has an
/// `initialize` handshake (the server answers with the version it speaks, which rmcp takes),
/// and `clientInfo` naming dsh and its version.
fn client_config() -> ClientConfig {
    let mut config =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("dsh", env!("CARGO_PKG_VERSION")));
    config.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    config
}

/// The most one message from a server may hold: a result over [`super::MAX_RESULT_BYTES`] is
/// still read whole, then cut, up to this size (a longer line over stdio is dropped by `rmcp`,
/// and the call ends at its timeout).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// An MCP session and, for a server over stdio, its guard's lifeline: dropping it (or dsh's
/// death) ends the server's whole process group ([`super::guard`]).
struct Connection {
    session: Session,
    _lifeline: Option<Lifeline>,
}

/// Why a call has no result from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The call was never sent: the tool certainly did not run.
    NotSent(String),
    /// The call was sent and no answer came back (the server exited or hung past the deadline):
    /// whether the tool ran is unknown.
    OutcomeUnknown(String),
    /// The server answered the call with an error.
    Refused(String),
}

/// A started server.
pub struct Server {
    pub config: McpConfig,
    connection: tokio::sync::Mutex<Option<Connection>>,
    restarted: AtomicBool,
    stderr_tail: Arc<Mutex<String>>,
    /// The server advertised [`DEDUP_CAPABILITY`] when it was last reached.
    deduplicates: AtomicBool,
    /// Its tools that refused a plain call for want of a task: called as tasks since.
    task_tools: Mutex<HashSet<String>>,
}

/// How long closing a connection may take at exit before it is dropped as it is.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Server {
    /// Ends the connection in order (the transport closed before the runtime goes), within
    /// [`CLOSE_TIMEOUT`]; a later call starts the server again.
    pub async fn close(&self) {
        if let Some(connection) = self.connection.lock().await.take() {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, connection.session.cancel()).await;
        }
    }

    /// Starts the server and lists its tools, within the row's start timeout.
    pub async fn start(config: &McpConfig) -> Result<(Server, Vec<Tool>), String> {
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        let deadline = tokio::time::Instant::now() + config.start_timeout;
        let connection = connect(config, &stderr_tail, deadline).await?;
        let tools = match tokio::time::timeout_at(deadline, connection.session.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(err)) => return Err(format!("tools/list failed: {}{}", plain(&err), tail(&stderr_tail))),
            Err(_) => {
                return Err(format!(
                    "tools/list had no answer within {} (startTimeoutMs)",
                    millis(config.start_timeout)
                ))
            }
        };
        let server = Server {
            config: config.clone(),
            deduplicates: AtomicBool::new(deduplicates(&connection.session)),
            connection: tokio::sync::Mutex::new(Some(connection)),
            restarted: AtomicBool::new(false),
            stderr_tail,
            task_tools: Mutex::new(HashSet::new()),
        };
        Ok((server, tools))
    }

    /// Whether the server said, when it was last reached, that it deduplicates calls by their key.
    pub fn deduplicates(&self) -> bool {
        self.deduplicates.load(Ordering::SeqCst)
    }

    /// Calls the server's tool `name` with `key` in its `_meta`, each request within the row's
    /// call timeout; a tool that requires a task is called as one (when the row lets it), the
    /// task's id and progress told to `notify`.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        key: &str,
        notify: &(dyn Fn(Notice) + Send + Sync),
    ) -> Result<CallToolResult, CallError> {
        let peer = self.live_peer().await?;
        let tasks = self.config.resolve.tasks;
        if tasks && self.task_tools.lock().is_ok_and(|tools| tools.contains(name)) {
            return self.call_as_task(&peer, name, arguments, key, notify).await;
        }
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments.clone();
        params.meta = Some(RequestMetaObject::from(key_meta(key)));
        let answer = tokio::time::timeout(self.config.call_timeout, peer.call_tool(params)).await;
        if tasks && requires_task(&answer) {
            self.task_tools.lock().map(|mut tools| tools.insert(name.to_owned())).unwrap_or_default();
            return self.call_as_task(&peer, name, arguments, key, notify).await;
        }
        self.answered(answer)
    }

    /// Polls the task `task_id` (one a call of this server became) to its end and returns its
    /// result; a server that no longer knows the task leaves the outcome unknown.
    pub async fn poll(
        &self,
        task_id: &str,
        notify: &(dyn Fn(Notice) + Send + Sync),
    ) -> Result<CallToolResult, CallError> {
        let peer = self.live_peer().await?;
        self.poll_task(&peer, task_id, notify).await
    }

    async fn call_as_task(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        name: &str,
        arguments: Option<JsonObject>,
        key: &str,
        notify: &(dyn Fn(Notice) + Send + Sync),
    ) -> Result<CallToolResult, CallError> {
        let params =
            json!({"name": name, "arguments": arguments.unwrap_or_default(), "_meta": key_meta(key), "task": {}});
        let created = tokio::time::timeout(self.config.call_timeout, custom(peer, "tools/call", params)).await;
        let created = self.answered(created)?;
        let Some(task_id) = created.pointer("/task/taskId").and_then(Value::as_str) else {
            // A server may answer a call it could have made a task at once.
            return tool_result(created, &self.config.row_id);
        };
        notify(Notice::Task(task_id.to_owned()));
        self.poll_task(peer, task_id, notify).await
    }

    /// `tasks/get` until the task ends (its status messages told to `notify` as progress), then
    /// `tasks/result`: the call's own result, or the error it failed with.
    async fn poll_task(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        task_id: &str,
        notify: &(dyn Fn(Notice) + Send + Sync),
    ) -> Result<CallToolResult, CallError> {
        let row = &self.config.row_id;
        let mut said = String::new();
        loop {
            let asked =
                tokio::time::timeout(self.config.call_timeout, custom(peer, "tasks/get", json!({"taskId": task_id})));
            let task = match asked.await {
                Ok(Err(rmcp::ServiceError::McpError(error))) => {
                    return Err(CallError::OutcomeUnknown(format!(
                        "server \"{row}\" no longer knows task {task_id} ({})",
                        error.message
                    )))
                }
                answer => self.answered(answer)?,
            };
            if let Some(message) = task["statusMessage"].as_str().filter(|message| *message != said) {
                said = message.to_owned();
                notify(Notice::Progress(said.clone()));
            }
            if matches!(task["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                break;
            }
            tokio::time::sleep(task["pollInterval"].as_u64().map_or(TASK_POLL, Duration::from_millis)).await;
        }
        let result =
            tokio::time::timeout(self.config.call_timeout, custom(peer, "tasks/result", json!({"taskId": task_id})));
        tool_result(self.answered(result.await)?, row)
    }

    /// A request's answer, or what its failure (or its deadline passing) means for the call.
    fn answered<T>(
        &self,
        answer: Result<Result<T, rmcp::ServiceError>, tokio::time::error::Elapsed>,
    ) -> Result<T, CallError> {
        let row = &self.config.row_id;
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(err)) => Err(self.failure(err)),
            Err(_) => Err(CallError::OutcomeUnknown(format!(
                "server \"{row}\" gave no answer within {} (callTimeoutMs)",
                millis(self.config.call_timeout)
            ))),
        }
    }

    /// What a call that ended in `error` tells the model.
    fn failure(&self, error: rmcp::ServiceError) -> CallError {
        let row = &self.config.row_id;
        match error {
            rmcp::ServiceError::McpError(error) => CallError::Refused(error.message.into_owned()),
            rmcp::ServiceError::UnexpectedResponse => {
                CallError::OutcomeUnknown(format!("server \"{row}\" answered with something that is not a tool result"))
            }
            error if never_connected(&error) => {
                CallError::NotSent(format!("server \"{row}\" cannot be reached ({})", plain(&error)))
            }
            error => CallError::OutcomeUnknown(format!(
                "server \"{row}\" gave no answer ({}){}",
                plain(&error),
                tail(&self.stderr_tail)
            )),
        }
    }

    /// The session's peer; a server that exited since it was last used is started again, once
    /// in this process's life.
    async fn live_peer(&self) -> Result<rmcp::Peer<RoleClient>, CallError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref().filter(|live| !live.session.is_transport_closed()) {
            return Ok(live.session.peer().clone());
        }
        let exited = format!("server \"{}\" exited{}", self.config.row_id, tail(&self.stderr_tail));
        if self.restarted.swap(true, Ordering::SeqCst) {
            return Err(CallError::NotSent(format!("{exited}; it was already started again once")));
        }
        tracing::warn!("{exited}; starting it again");
        let deadline = tokio::time::Instant::now() + self.config.start_timeout;
        let restarted = connect(&self.config, &self.stderr_tail, deadline)
            .await
            .map_err(|why| CallError::NotSent(format!("{exited}, and starting it again failed: {why}")))?;
        let peer = restarted.session.peer().clone();
        self.deduplicates.store(deduplicates(&restarted.session), Ordering::SeqCst);
        *connection = Some(restarted);
        Ok(peer)
    }
}

/// Whether a plain call's answer says the tool requires a task (2025-11-25): `-32601` to a tool
/// the server listed, as a JSON-RPC error or — as the TypeScript SDK sends it — a result flagged
/// `isError` whose text is that error. The tool did not run.
fn requires_task(answer: &Result<Result<CallToolResult, rmcp::ServiceError>, tokio::time::error::Elapsed>) -> bool {
    const SAID: &str = "MCP error -32601:";
    match answer {
        Ok(Err(rmcp::ServiceError::McpError(error))) => error.code == ErrorCode::METHOD_NOT_FOUND,
        Ok(Ok(result)) if result.is_error == Some(true) => {
            matches!(&result.content[..], [rmcp::model::ContentBlock::Text(text)] if text.text.starts_with(SAID))
        }
        _ => false,
    }
}

/// `_meta` carrying a call's key.
fn key_meta(key: &str) -> JsonObject {
    let mut meta = JsonObject::new();
    meta.insert(KEY_META.to_owned(), Value::from(key));
    meta
}

/// Whether the server's `initialize` result advertises [`DEDUP_CAPABILITY`].
fn deduplicates(session: &Session) -> bool {
    let info = session.peer_info();
    let experimental = info.as_ref().and_then(|info| info.capabilities.experimental.as_ref());
    experimental.is_some_and(|experimental| experimental.contains_key(DEDUP_CAPABILITY))
}

/// A request rmcp has no type for (the 2025-11-25 Tasks), and its result as JSON.
async fn custom(peer: &rmcp::Peer<RoleClient>, method: &str, params: Value) -> Result<Value, rmcp::ServiceError> {
    let result = peer.send_request(ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)))).await?;
    serde_json::to_value(&result).map_err(|_| rmcp::ServiceError::UnexpectedResponse)
}

/// `value` as a tool result, or an unknown outcome naming the server.
fn tool_result(value: Value, row: &str) -> Result<CallToolResult, CallError> {
    serde_json::from_value(value).map_err(|_| {
        CallError::OutcomeUnknown(format!("server \"{row}\" answered with something that is not a tool result"))
    })
}

/// Reaches the server and completes the MCP handshake by `deadline`.
async fn connect(
    config: &McpConfig,
    stderr_tail: &Arc<Mutex<String>>,
    deadline: Instant,
) -> Result<Connection, String> {
    match &config.transport {
        Transport::Stdio { command, env, pass_env } => spawn(command, env, pass_env, stderr_tail, deadline).await,
        Transport::Http { url, headers, header_env, token_env } => {
            let session = reach(url, headers, header_env, token_env.as_deref(), deadline).await?;
            Ok(Connection { session, _lifeline: None })
        }
    }
}

/// Spawns the server under its guard ([`super::guard`]) with exactly its row's environment (plus
/// PATH and HOME), in a process group of its own so that a Ctrl-C at the terminal, meant for the
/// turn, does not reach it.
async fn spawn(
    command_line: &[String],
    env: &BTreeMap<String, String>,
    pass_env: &[String],
    stderr_tail: &Arc<Mutex<String>>,
    deadline: Instant,
) -> Result<Connection, String> {
    let program = command_line.first().ok_or("the row names no command")?;
    let lifeline = Lifeline::new().map_err(|err| format!("cannot start {program}: {err}"))?;
    let mut command = lifeline.guard_command(command_line).map_err(|err| format!("cannot start {program}: {err}"))?;
    for name in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    // Passed variables are secrets by intent (a token the server needs).
    for name in pass_env {
        if let Some(value) = std::env::var_os(name) {
            dsh_session::redact::learn(&value.to_string_lossy());
            command.env(name, value);
        }
    }
    command.envs(env).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|err| format!("cannot start {program}: {err}"))?;
    let lifeline = lifeline.started();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("{program} was started without pipes"));
    };
    let reader = child.stderr.take().map(|stderr| tokio::spawn(keep_tail(stderr, Arc::clone(stderr_tail))));
    let transport = AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
    let failure = match handshake(transport, deadline).await {
        Ok(session) => return Ok(Connection { session, _lifeline: Some(lifeline) }),
        Err(failure) => failure,
    };
    if let Some(reader) = reader {
        // A server that failed has usually exited: its stderr ends at once, with the reason.
        let _ = tokio::time::timeout(STDERR_GRACE, reader).await;
    }
    // Its stderr ended as it exits: the status follows at once (a server still running has none).
    let status = tokio::time::timeout(STDERR_GRACE, child.wait()).await;
    let never_started = matches!(status, Ok(Ok(status)) if status.code() == Some(super::guard::NOT_STARTED));
    let said =
        stderr_tail.lock().ok().and_then(|kept| kept.lines().rev().find(|line| !line.is_empty()).map(str::to_owned));
    match said.filter(|_| never_started) {
        // The guard could not start the program: that is the whole story.
        Some(why) => Err(why),
        None => Err(format!("{failure}{}", tail(stderr_tail))),
    }
}

/// Opens an MCP session with the endpoint at `url`, sending `headers` and the bearer token from
/// `token_env`; the token and credential headers become secrets of the process first, so no
/// message, log line or model request can repeat them ([`dsh_session::redact`]).
async fn reach(
    url: &str,
    headers: &[(String, String)],
    header_env: &[(String, String)],
    token_env: Option<&str>,
    deadline: Instant,
) -> Result<Session, String> {
    let token = match token_env {
        Some(name) => Some(std::env::var(name).map_err(|_| format!("tokenEnv names ${name}, which is not set"))?),
        None => None,
    };
    dsh_session::redact::learn_url(url);
    if let Some(token) = &token {
        dsh_session::redact::learn(token);
    }
    let mut from_env = Vec::new();
    for (name, variable) in header_env {
        let value =
            std::env::var(variable).map_err(|_| format!("headerEnv.{name} names ${variable}, which is not set"))?;
        dsh_session::redact::learn(&value);
        from_env.push((name.clone(), value));
    }
    let mut custom = HashMap::new();
    for (name, value) in headers.iter().chain(&from_env) {
        dsh_session::redact::learn_header(name, value);
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|err| format!("header {name:?}: {err}"))?;
        custom.insert(name, HeaderValue::from_str(value).map_err(|err| format!("header {value:?}: {err}"))?);
    }
    let mut settings = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(custom)
        .max_json_response_size(MAX_MESSAGE_BYTES)
        .max_sse_event_size(MAX_MESSAGE_BYTES);
    if let Some(token) = &token {
        settings = settings.auth_header(token.clone());
    }
    let client = crate::http::client_builder().build().map_err(|err| format!("cannot build an HTTP client: {err}"))?;
    let transport = StreamableHttpClientTransport::with_client(client, settings);
    handshake(transport, deadline).await
}

async fn handshake<T, E, A>(transport: T, deadline: Instant) -> Result<Session, String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout_at(deadline, client_config().serve(transport)).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(err)) => Err(format!("the MCP handshake failed: {}", plain(&err))),
        Err(_) => Err("the MCP handshake had no answer in time (startTimeoutMs)".to_owned()),
    }
}

/// `error` in plain words: the deepest of its causes that is not a transport wrapper (rmcp's
/// name their Rust types, and some print a debug dump of the HTTP client's error), so a refused
/// connection reads `Connection refused (os error 111)`.
fn plain(error: &(dyn std::error::Error + 'static)) -> String {
    let wrapper = |text: &str| text.contains("rmcp::") || text.contains(" { ") || text.is_empty();
    let mut said = error.to_string();
    let mut cause = Some(error);
    while let Some(current) = cause {
        let text = current.to_string();
        if !wrapper(&text) {
            said = text;
        }
        cause = inner_cause(current);
    }
    said
}

/// The error `error` wraps: its source, or what rmcp's handshake and HTTP client errors hold
/// without declaring it their source.
fn inner_cause<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::service::ClientInitializeError;
    if let Some(ClientInitializeError::TransportError { error, .. }) = error.downcast_ref::<ClientInitializeError>() {
        return Some(error);
    }
    if let Some(StreamableHttpError::Client(client)) = error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return Some(client);
    }
    error.source()
}

/// Reads the server's stderr to its end, keeping its last [`STDERR_TAIL_BYTES`].
async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    let mut buffer = [0u8; 4096];
    while let Ok(read) = stderr.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let Ok(mut kept) = tail.lock() else { break };
        kept.push_str(&String::from_utf8_lossy(&buffer[..read]));
        if kept.len() > STDERR_TAIL_BYTES {
            let mut cut = kept.len() - STDERR_TAIL_BYTES;
            while !kept.is_char_boundary(cut) {
                cut += 1;
            }
            kept.drain(..cut);
        }
    }
}

/// `; its stderr ends: …` with the last line the server wrote, when it wrote any.
fn tail(kept: &Mutex<String>) -> String {
    let kept = kept.lock().map(|kept| kept.clone()).unwrap_or_default();
    match kept.lines().rev().find(|line| !line.trim().is_empty()) {
        Some(line) => format!("; its stderr ends: {}", crate::one_line(line, 200)),
        None => String::new(),
    }
}

/// Whether `error` comes from a connection that was never made, so no request went out: an
/// HTTP server that is gone, not one that went away while it had the call.
fn never_connected(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(StreamableHttpError::Client(client)) = error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return client.is_connect();
        }
        cause = inner_cause(error);
    }
    false
}

fn millis(duration: std::time::Duration) -> String {
    format!("{} ms", duration.as_millis())
}
