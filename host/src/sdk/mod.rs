//! The DeepSeek Harness SDK's runtime protocol on stdio: `dsh --profile NAME [--patch F]…` with
//! no command, as the Python SDK (`deepseek-harness-sdk`) launches its runtime. Requests are
//! newline-delimited JSON-RPC 2.0 on stdin; stdout carries only protocol lines — answers, and
//! every durable event of every served session as `session.event`, in log order, with
//! `session.status` around each turn. The sessions are the [`service`](crate::service)'s.
//!
//! | method | params | result |
//! |---|---|---|
//! | `initialize` | `cwd, provider?, model?, reasoningEffort?, maxTokens?` | `{serverInfo: {name, version}}` |
//! | `session/prompt` | `sessionId, contentBlocks` (text) | `{messageId}` once it is durably received |
//! | `session/resume` | `sessionId` | `{}` once the persisted session is open |
//! | `session/wait` | `sessionId` | `{}` once it has no turn running or asked for |
//! | `session/working-directory/get` | `sessionId` | `{cwd}` |
//! | `session/working-directory/set` | `sessionId, path` | `{cwd}` |
//! | `dsh/session/cancel` | `sessionId` | `{cancelled}` (dsh's own: stops the running turn) |
//! | `shutdown` | — | `{}`, then dsh exits |

pub mod wire;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::agent::view::Silent;
use crate::profile::Home;
use crate::service::{ServiceError, SessionService, Setup, Update};
use dsh_session::meta::RunOverrides;
use wire::{Id, Incoming, Line, INTERNAL_ERROR, INVALID_REQUEST, MAX_REQUEST_BYTES};

/// What the runtime was launched with.
pub struct Launch {
    pub home: Home,
    pub profile: String,
    pub patches: Vec<PathBuf>,
    pub verbose: bool,
    /// Where what dsh tells the operator goes (stderr).
    pub notes: Arc<dyn Fn(&str) + Send + Sync>,
}

/// `serverInfo.name`: a program can tell dsh from DeepSeek Harness's own runtime.
pub const SERVER_NAME: &str = "dsh";

/// Serves requests from `input` until it ends, `shutdown` is asked, `stop` resolves or `output`
/// goes away; then cancels the running turns (each closed in its log) and flushes.
pub async fn serve<R, W>(launch: Launch, mut input: R, output: W, stop: impl Future<Output = ()>) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines, mut writer) = spawn_writer(output);
    let mut server = Server { launch, lines, service: None, tasks: JoinSet::new(), forward: None };
    tokio::pin!(stop);
    let shutdown = loop {
        let line = tokio::select! {
            line = wire::read_line(&mut input, MAX_REQUEST_BYTES) => line.unwrap_or(Line::End),
            () = &mut stop => Line::End,
            _ = &mut writer => {
                server.close(None).await;
                return Ok(());
            }
        };
        match line {
            Line::End => break None,
            Line::TooLong(bytes) => server.send(wire::error(&Value::Null, INVALID_REQUEST, &too_long(bytes))),
            Line::Text(text) if text.trim_ascii().is_empty() => {}
            Line::Text(text) => match wire::parse(&text) {
                Err(refusal) => server.send(refusal),
                Ok(Incoming::Ignored) => {}
                Ok(Incoming::Request { id, method, .. }) if method == "shutdown" => break Some(id),
                Ok(Incoming::Request { id, method, params }) => server.handle(id, &method, params),
            },
        }
    };
    server.close(shutdown).await;
    writer.await.map_err(std::io::Error::other)
}

fn too_long(bytes: usize) -> String {
    format!("Invalid request: a line of {bytes} bytes is longer than the {MAX_REQUEST_BYTES} bytes a request may take")
}

struct Server {
    launch: Launch,
    lines: mpsc::UnboundedSender<String>,
    service: Option<SessionService>,
    tasks: JoinSet<()>,
    forward: Option<JoinHandle<()>>,
}

impl Server {
    fn send(&self, line: String) {
        let _ = self.lines.send(line);
    }

    fn answer(&self, id: &Id, answer: Result<Value, String>) {
        self.send(answer_line(id, answer));
    }

    fn handle(&mut self, id: Id, method: &str, params: Value) {
        if method == "initialize" {
            let answer = self.initialize(&params);
            return self.answer(&id, answer);
        }
        let Some(service) = self.service.clone() else {
            return self.answer(&id, Err("SDK server is not initialized".into()));
        };
        let (lines, method) = (self.lines.clone(), method.to_owned());
        self.tasks.spawn(async move {
            let answer = session_request(&service, &method, &params).await;
            let _ = lines.send(answer_line(&id, answer));
        });
    }

    /// Starts the session service with what the program asked for.
    fn initialize(&mut self, params: &Value) -> Result<Value, String> {
        if self.service.is_some() {
            return Err("SDK server is already initialized".into());
        }
        let cwd = params["cwd"].as_str().ok_or("initialize requires a cwd string")?;
        if !Path::new(cwd).is_dir() {
            return Err(format!("initialize: cwd is not a directory: {cwd:?}"));
        }
        for key in ["reasoningEffort", "maxTokens"].into_iter().filter(|key| !params[key].is_null()) {
            (self.launch.notes)(&format!(
                "initialize's {key} is not applied: dsh's provider rows send what their own config says"
            ));
        }
        let text = |key: &str| params[key].as_str().filter(|value| !value.is_empty()).map(str::to_owned);
        let overrides = RunOverrides { provider: text("provider"), model: text("model"), system: None };
        let Launch { home, profile, patches, verbose, notes } = &self.launch;
        let setup = Setup {
            home: home.clone(),
            profile: profile.clone(),
            patches: patches.clone(),
            overrides,
            cwd: PathBuf::from(cwd),
            verbose: *verbose,
            continued_as_recorded: false,
            v4_only: true,
            keep_open: None,
            view: Box::new(|| Box::new(Silent)),
        };
        let notes = Arc::clone(notes);
        let (service, updates) =
            SessionService::new(setup, Box::new(move |note| notes(note))).map_err(|err| format!("{err:#}"))?;
        self.forward = Some(tokio::spawn(forward(updates, self.lines.clone())));
        self.service = Some(service);
        Ok(json!({"serverInfo": {"name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION")}}))
    }

    /// Stops the sessions, answers what was asked (and `shutdown`, when it was) and lets every
    /// line out.
    async fn close(mut self, shutdown: Option<Id>) {
        if let Some(service) = self.service.take() {
            service.shutdown().await;
        }
        while self.tasks.join_next().await.is_some() {}
        if let Some(forward) = self.forward.take() {
            let _ = forward.await;
        }
        if let Some(id) = shutdown {
            self.answer(&id, Ok(json!({})));
        }
    }
}

fn answer_line(id: &Id, answer: Result<Value, String>) -> String {
    match answer {
        Ok(result) => wire::result(id, result),
        Err(message) => wire::error(id, INTERNAL_ERROR, &message),
    }
}

/// Answers a request about a session, as the reference's runtime does.
async fn session_request(service: &SessionService, method: &str, params: &Value) -> Result<Value, String> {
    let failed = |err: ServiceError| err.to_string();
    match method {
        "session/prompt" => {
            let id = session_id(params, "session/prompt requires a non-empty sessionId string")?;
            let text = prompt_text(&params["contentBlocks"])?;
            let message_id = service.prompt(id, text).await.map_err(failed)?;
            Ok(json!({"messageId": message_id}))
        }
        "session/resume" => {
            let id = session_id(params, "session/resume requires a non-empty sessionId string")?;
            service.resume(id).await.map_err(failed).map(|()| json!({}))
        }
        "session/wait" => {
            let id = session_id(params, "session/wait requires a non-empty sessionId string")?;
            service.wait(id).await.map_err(failed).map(|()| json!({}))
        }
        "session/working-directory/get" | "session/working-directory/set" => {
            working_directory(service, method.ends_with("/set"), params).await
        }
        "dsh/session/cancel" => {
            let id = session_id(params, "dsh/session/cancel requires a non-empty sessionId string")?;
            service.cancel(id).map_err(failed).map(|cancelled| json!({"cancelled": cancelled}))
        }
        other => Err(format!("unknown DeepSeek Harness SDK runtime method: {other}")),
    }
}

async fn working_directory(service: &SessionService, set: bool, params: &Value) -> Result<Value, String> {
    let id = session_id(params, "working-directory requests require a non-empty sessionId")?;
    let cwd = match set {
        false => service.working_directory(id).await,
        true => {
            let path = params["path"].as_str().ok_or("working-directory set requires a path string")?;
            service.set_working_directory(id, Path::new(path)).await
        }
    };
    cwd.map(|cwd| json!({"cwd": cwd.display().to_string()})).map_err(|err| err.to_string())
}

fn session_id<'a>(params: &'a Value, required: &str) -> Result<&'a str, String> {
    params["sessionId"].as_str().filter(|id| !id.is_empty()).ok_or_else(|| required.to_owned())
}

/// The text of a prompt's content blocks, one line per block; dsh takes text blocks only.
fn prompt_text(blocks: &Value) -> Result<String, String> {
    let blocks = blocks.as_array().ok_or("session/prompt requires a contentBlocks array")?;
    let mut texts = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.iter().enumerate() {
        match (block["type"].as_str(), block["text"].as_str()) {
            (Some("text"), Some(text)) => texts.push(text),
            (kind, _) => {
                let kind = kind.map_or_else(|| "without a type".to_owned(), |kind| format!("of type {kind:?}"));
                return Err(format!("session/prompt: content block {} is {kind}; dsh takes text blocks", index + 1));
            }
        }
    }
    let text = texts.join("\n");
    match text.trim().is_empty() {
        true => Err("session/prompt: the prompt is empty".into()),
        false => Ok(text),
    }
}

/// Sends the service's updates out as notifications, until the service is gone.
async fn forward(mut updates: mpsc::UnboundedReceiver<Update>, lines: mpsc::UnboundedSender<String>) {
    while let Some(update) = updates.recv().await {
        let line = match update {
            Update::Event { session, line } => wire::session_event(&session, &line),
            Update::Status { session, running } => Some(wire::session_status(&session, running)),
            Update::Text { .. }
            | Update::AttemptEnded { .. }
            | Update::Tools { .. }
            | Update::Note { .. }
            | Update::Reread { .. } => None,
        };
        if line.is_some_and(|line| lines.send(line).is_err()) {
            return;
        }
    }
}

/// The one task that writes to `output`: lines in the order they were sent, flushed whenever
/// none is waiting. It ends when every sender is gone, or early when `output` is closed.
fn spawn_writer<W: AsyncWrite + Unpin + Send + 'static>(
    mut output: W,
) -> (mpsc::UnboundedSender<String>, JoinHandle<()>) {
    let (lines, mut queued) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(line) = queued.recv().await {
            let mut batch = line + "\n";
            while let Ok(more) = queued.try_recv() {
                batch.push_str(&more);
                batch.push('\n');
            }
            if output.write_all(batch.as_bytes()).await.is_err() || output.flush().await.is_err() {
                return;
            }
        }
    });
    (lines, writer)
}
