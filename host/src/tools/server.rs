//! One MCP server: its child process, the MCP session with it (through `rmcp`), its tools, and
//! calls with a deadline. A server found gone before a call is started again once; a call the
//! server may have begun is never sent twice.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;

use super::config::McpConfig;

/// The most of a server's stderr kept for messages: its last lines say why it failed.
const STDERR_TAIL_BYTES: usize = 2048;

/// How long a server that failed its handshake is given to finish writing its stderr.
const STDERR_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

type Session = RunningService<RoleClient, ()>;

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
    session: tokio::sync::Mutex<Option<Session>>,
    restarted: AtomicBool,
    stderr_tail: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the server and lists its tools, within the row's call timeout.
    pub async fn start(config: &McpConfig) -> Result<(Server, Vec<Tool>), String> {
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        let session = connect(config, &stderr_tail).await?;
        let tools = tokio::time::timeout(config.call_timeout, session.list_all_tools()).await;
        let tools = match tools {
            Ok(Ok(tools)) => tools,
            Ok(Err(err)) => return Err(format!("tools/list failed: {err}{}", tail(&stderr_tail))),
            Err(_) => return Err(format!("tools/list had no answer within {} ms", config.call_timeout.as_millis())),
        };
        let server = Server {
            config: config.clone(),
            session: tokio::sync::Mutex::new(Some(session)),
            restarted: AtomicBool::new(false),
            stderr_tail,
        };
        Ok((server, tools))
    }

    /// Calls the server's tool `name` within the row's call timeout.
    pub async fn call(&self, name: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, CallError> {
        let peer = self.live_peer().await?;
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments;
        let timeout = self.config.call_timeout;
        match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(rmcp::ServiceError::McpError(error))) => Err(CallError::Refused(error.message.into_owned())),
            Ok(Err(err)) => Err(CallError::OutcomeUnknown(format!(
                "server \"{}\" gave no answer ({err}){}",
                self.config.row_id,
                tail(&self.stderr_tail)
            ))),
            Err(_) => Err(CallError::OutcomeUnknown(format!(
                "server \"{}\" gave no answer within {} ms (callTimeoutMs)",
                self.config.row_id,
                timeout.as_millis()
            ))),
        }
    }

    /// The session's peer; a server that exited since it was last used is started again, once
    /// in this process's life.
    async fn live_peer(&self) -> Result<rmcp::Peer<RoleClient>, CallError> {
        let mut session = self.session.lock().await;
        if let Some(live) = session.as_ref().filter(|live| !live.is_transport_closed()) {
            return Ok(live.peer().clone());
        }
        let exited = format!("server \"{}\" exited{}", self.config.row_id, tail(&self.stderr_tail));
        if self.restarted.swap(true, Ordering::SeqCst) {
            return Err(CallError::NotSent(format!("{exited}; it was already started again once")));
        }
        tracing::warn!("{exited}; starting it again");
        let restarted = connect(&self.config, &self.stderr_tail)
            .await
            .map_err(|why| CallError::NotSent(format!("{exited}, and starting it again failed: {why}")))?;
        let peer = restarted.peer().clone();
        *session = Some(restarted);
        Ok(peer)
    }
}

/// Spawns the server with exactly its row's environment (plus PATH and HOME) and completes the
/// MCP handshake within the call timeout.
async fn connect(config: &McpConfig, stderr_tail: &Arc<Mutex<String>>) -> Result<Session, String> {
    let (program, arguments) = config.command.split_first().ok_or("the row names no command")?;
    let mut command = tokio::process::Command::new(program);
    command.args(arguments).env_clear().kill_on_drop(true);
    for name in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(&config.env);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot start {program}: {err}"))?;
    let reader = stderr.map(|stderr| tokio::spawn(keep_tail(stderr, Arc::clone(stderr_tail))));
    let failure = match tokio::time::timeout(config.call_timeout, ().serve(transport)).await {
        Ok(Ok(session)) => return Ok(session),
        Ok(Err(err)) => format!("the MCP handshake failed: {err}"),
        Err(_) => format!("the MCP handshake had no answer within {} ms", config.call_timeout.as_millis()),
    };
    if let Some(reader) = reader {
        // A server that failed has usually exited: its stderr ends at once, with the reason.
        let _ = tokio::time::timeout(STDERR_GRACE, reader).await;
    }
    Err(format!("{failure}{}", tail(stderr_tail)))
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
