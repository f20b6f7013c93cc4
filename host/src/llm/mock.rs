//! The mock server's script: a YAML list of responses served in order (then the last repeats).
//!
//! ```yaml
//! - ok: "Hello there"        # 200, the text streamed as several chunks, then [DONE]
//! - status: 503              # an HTTP error; body: a string (sent as is) or a mapping (sent as JSON)
//!   headers: {content-type: text/html}
//!   body: "<html><head><title>503 Service Unavailable</title></head></html>"
//! - reset: true              # close the connection without a response
//! - truncate: "partial answ" # stream this text, then close without [DONE]
//! - malformed: true          # a frame that is not valid JSON
//! - empty: true              # 200, a finish chunk and [DONE], no content
//! - stall: 5000              # the 200 headers, then nothing for N ms
//! - endless: "lorem "        # 200, this text as chunks forever (never [DONE])
//! - invalidUtf8: true        # 200, a frame whose bytes are not UTF-8
//! - keepAlive: 200           # 200, then a `: ping` comment every N ms, forever
//! - frames: ['{"choices":[…]}', "[DONE]"]   # 200, each item sent as one `data:` frame
//! - tool_calls: [{name: lookup, arguments: {q: 1}, id: call-1}]   # 200, an answer asking for tools
//! ```
//!
//! Every item may add `delayMs: N` (wait before answering), `hold: NAME` (answer only once a
//! `POST /mock/release/NAME` request arrives: tests make a process wait inside a request for
//! as long as they need, without racing a clock), `headers: {name: value}`, and `chunkBytes: N`
//! (write the response in pieces of N bytes, each flushed on its own).
//!
//! [`MockServer`] serves a script over real HTTP on 127.0.0.1: `dsh mock-server`, the tests and
//! the `demo` profile's in-process provider all use it. Responses are written by hand on the raw
//! socket, so faults (resets, cut streams, broken frames, stalls) are exactly what they claim.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dsh_abi::config::{Key, Kind, Row, Schema, MAX_SAFE_INTEGER};
use dsh_abi::ConfigError;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum MockAction {
    Ok(String),
    Status { status: u16, body: Option<Value> },
    Reset,
    Truncate(String),
    Malformed,
    Empty,
    Stall(u64),
    Endless(String),
    InvalidUtf8,
    KeepAlive(u64),
    Frames(Vec<String>),
    ToolCalls(Vec<MockToolCall>),
}

/// A tool call a scripted answer asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct MockToolCall {
    /// `None`: `call_<request>_<position>`, unique within one server.
    pub id: Option<String>,
    pub name: String,
    /// The arguments as the model sends them: JSON text (a string in the script is sent as is,
    /// so a test can send arguments that are not JSON).
    pub arguments: String,
}

/// One scripted response.
#[derive(Debug, Clone, PartialEq)]
pub struct MockStep {
    pub action: MockAction,
    pub delay_ms: u64,
    /// Answer only once the test releases this name (`POST /mock/release/NAME`).
    pub hold: Option<String>,
    pub headers: Vec<(String, String)>,
    /// Write the response in pieces of this many bytes (0: as it comes).
    pub chunk_bytes: usize,
}

const MILLISECONDS: Kind = Kind::integer(0, MAX_SAFE_INTEGER);

/// The keys of one scripted response: exactly one action, then options.
pub const STEP: Schema = Schema::row(
    "mock step",
    &[
        Key::new("ok", Kind::Any, "", "200, the text streamed as several chunks, then [DONE]"),
        Key::new("status", Kind::integer(100, 599), "", "an HTTP error")
            .refused_as("must be an HTTP status from 100 through 599"),
        Key::new("reset", Kind::Flag, "", "close the connection without a response"),
        Key::new("truncate", Kind::Any, "", "stream this text, then close without [DONE]"),
        Key::new("malformed", Kind::Flag, "", "a frame that is not valid JSON"),
        Key::new("empty", Kind::Flag, "", "200, a finish chunk and [DONE], no content"),
        Key::new("stall", MILLISECONDS, "", "the 200 headers, then nothing for N ms").refused_as(MILLISECONDS_RULE),
        Key::new("endless", Kind::Any, "", "200, this text as chunks forever"),
        Key::new("invalidUtf8", Kind::Flag, "", "200, a frame whose bytes are not UTF-8"),
        Key::new("keepAlive", MILLISECONDS, "", "200, then a ping comment every N ms, forever")
            .refused_as(MILLISECONDS_RULE),
        Key::new("frames", Kind::list_of(&Kind::String), "", "200, each item sent as one data: frame")
            .refused_as("must be a list of strings"),
        Key::new("tool_calls", Kind::LIST, "", "200, an answer asking for these tool calls ({name, arguments?, id?})")
            .refused_as(TOOL_CALLS_RULE),
        Key::new("delayMs", MILLISECONDS, "0", "wait before answering").refused_as(MILLISECONDS_RULE),
        Key::new("hold", Kind::Text, "", "answer only once POST /mock/release/NAME arrives"),
        Key::new("headers", Kind::MAPPING, "{}", "response headers").refused_as("must be a mapping"),
        Key::new("body", Kind::Any, "", "the body of a status response: a string, or a mapping sent as JSON"),
        Key::new("chunkBytes", Kind::integer(0, MAX_SAFE_INTEGER), "0", "write the response in pieces of N bytes")
            .refused_as("must be a non-negative integer"),
    ],
);
const ACTIONS: usize = 12;
const TOOL_CALLS_RULE: &str = "must be a list of {name, arguments?, id?} mappings";
const MILLISECONDS_RULE: &str = "must be a non-negative integer number of milliseconds";

fn action_names() -> String {
    STEP.keys[..ACTIONS].iter().map(|key| key.name).collect::<Vec<_>>().join(", ")
}

/// Parses a script; errors are `[N].key message` (items numbered from 1), every problem found.
pub fn parse_script(script: &Value) -> Result<Vec<MockStep>, Vec<ConfigError>> {
    let Some(items) = script.as_array() else {
        return Err(vec![ConfigError::new("", "must be a list of responses")]);
    };
    if items.is_empty() {
        return Err(vec![ConfigError::new("", "must list at least one response")]);
    }
    let mut errors = Vec::new();
    let mut steps = Vec::new();
    for (index, item) in items.iter().enumerate() {
        match parse_step(&format!("[{}]", index + 1), item) {
            Ok(step) => steps.push(step),
            Err(found) => errors.extend(found),
        }
    }
    if errors.is_empty() {
        Ok(steps)
    } else {
        Err(errors)
    }
}

fn parse_step(path: &str, item: &Value) -> Result<MockStep, Vec<ConfigError>> {
    if !item.is_object() {
        return Err(vec![ConfigError::new(path, format!("must be a mapping with one of: {}", action_names()))]);
    }
    let mut row = STEP.read_at(path, item)?;
    let given: Vec<&str> = STEP.keys[..ACTIONS].iter().map(|key| key.name).filter(|name| row.is_set(name)).collect();
    let action = match given.as_slice() {
        [action] => parse_action(&mut row, action),
        [] => {
            row.refuse("", format!("must have one of: {}", action_names()));
            return row.finish(MockStep {
                action: MockAction::Empty,
                delay_ms: 0,
                hold: None,
                headers: Vec::new(),
                chunk_bytes: 0,
            });
        }
        several => {
            row.refuse("", format!("has several actions ({}); give exactly one", several.join(", ")));
            MockAction::Empty
        }
    };
    if row.is_set("body") && !matches!(action, MockAction::Status { .. }) {
        row.refuse("body", "only goes with status");
    }
    let delay_ms = row.integer("delayMs");
    let hold = row.text("hold");
    let headers = headers(&mut row);
    let chunk_bytes = row.integer("chunkBytes") as usize;
    row.finish(MockStep { action, delay_ms, hold, headers, chunk_bytes })
}

fn parse_action(row: &mut Row<'_>, action: &str) -> MockAction {
    let given = row.given(action).cloned().unwrap_or_default();
    let text = |row: &mut Row<'_>| match &given {
        Value::String(text) => text.clone(),
        _ => {
            row.refuse(action, "must be a string");
            String::new()
        }
    };
    if STEP.key(action).kind == Kind::Flag && given != Value::Bool(true) {
        row.refuse(action, "must be true");
    }
    match action {
        "ok" => MockAction::Ok(text(row)),
        "truncate" => MockAction::Truncate(text(row)),
        "endless" => MockAction::Endless(text(row)),
        "invalidUtf8" => MockAction::InvalidUtf8,
        "reset" => MockAction::Reset,
        "malformed" => MockAction::Malformed,
        "empty" => MockAction::Empty,
        "stall" => MockAction::Stall(whole_number(row, action)),
        "keepAlive" => MockAction::KeepAlive(whole_number(row, action).max(1)),
        "frames" => MockAction::Frames(row.strings(action)),
        "tool_calls" => {
            let calls: Option<Vec<MockToolCall>> = row.list(action).iter().map(tool_call).collect();
            MockAction::ToolCalls(calls.unwrap_or_else(|| {
                row.refuse(action, TOOL_CALLS_RULE);
                Vec::new()
            }))
        }
        _ => {
            let status = row.value("status").and_then(|status| status.as_u64()).unwrap_or(500) as u16;
            MockAction::Status { status, body: row.given("body").cloned() }
        }
    }
}

/// One `{name, arguments?, id?}` of a `tool_calls` step; arguments default to `{}`.
fn tool_call(item: &Value) -> Option<MockToolCall> {
    let fields = item.as_object()?;
    if fields.keys().any(|key| !matches!(key.as_str(), "name" | "arguments" | "id")) {
        return None;
    }
    let arguments = match fields.get("arguments") {
        None => "{}".to_owned(),
        Some(Value::String(text)) => text.clone(),
        Some(value) => dsh_abi::js::to_string(value),
    };
    let id = match fields.get("id") {
        None => None,
        Some(id) => Some(id.as_str()?.to_owned()),
    };
    Some(MockToolCall { id, name: fields.get("name")?.as_str()?.to_owned(), arguments })
}

/// A millisecond count, when the key has no default to fall back on.
fn whole_number(row: &mut Row<'_>, key: &str) -> u64 {
    row.value(key).and_then(|value| dsh_abi::js::as_safe_u64(&value)).unwrap_or_default()
}

fn headers(row: &mut Row<'_>) -> Vec<(String, String)> {
    let Some(Value::Object(given)) = row.value("headers") else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    for (name, value) in given {
        let value = match value {
            Value::String(text) => text,
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            _ => {
                row.refuse(&format!("headers.{name}"), "must be a string");
                String::new()
            }
        };
        headers.push((name, value));
    }
    headers
}

/// Where the server reports the requests it answers.
#[derive(Debug, Clone)]
pub struct MockLog {
    /// Print one line per request on stderr.
    pub stderr: bool,
    /// Append one JSON line per request (number, method, path, headers with credentials
    /// redacted, body) to this file.
    pub record: Option<PathBuf>,
}

/// What the server serves once its script is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replay {
    /// The last item, for every later request.
    #[default]
    LastRepeats,
    /// The script again from its first item (`dsh mock-server --loop`): a trial can be run again
    /// and again against one server.
    Loop,
}

/// A running mock server; it stops when the runtime that started it stops.
pub struct MockServer {
    addr: SocketAddr,
}

const MAX_REQUEST_HEAD: usize = 1024 * 1024;
const CHUNK_CHARS: usize = 8;

impl MockServer {
    /// Binds `listen` (port 0 picks a free port) and serves `script` in the background.
    pub async fn start(listen: SocketAddr, script: Vec<MockStep>, log: MockLog) -> std::io::Result<MockServer> {
        MockServer::start_with(listen, script, log, Replay::LastRepeats).await
    }

    /// [`MockServer::start`], with what happens once the script is used up.
    pub async fn start_with(
        listen: SocketAddr,
        script: Vec<MockStep>,
        log: MockLog,
        replay: Replay,
    ) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let released = tokio::sync::watch::Sender::new(BTreeSet::new());
        let shared = Arc::new(Shared { script, next: AtomicUsize::new(0), log, replay, released });
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let _ = shared.serve(stream).await;
                });
            }
        });
        Ok(MockServer { addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL a provider row points at: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

struct Shared {
    script: Vec<MockStep>,
    next: AtomicUsize,
    log: MockLog,
    replay: Replay,
    /// The hold names released so far (`POST /mock/release/NAME`).
    released: tokio::sync::watch::Sender<BTreeSet<String>>,
}

/// Where a request releases the steps that hold on a name.
pub const RELEASE_PATH: &str = "/mock/release/";

struct Request {
    method: String,
    path: String,
    /// Names lowercased, in the order they arrived; an `authorization` value is kept redacted.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A header as the record keeps it: credentials never reach the file.
fn recorded_header(name: &str, value: &[u8]) -> (String, String) {
    let name = name.to_ascii_lowercase();
    let value = String::from_utf8_lossy(value);
    let value = match (name.as_str(), value.split_once(' ')) {
        ("authorization", Some((scheme, _))) => format!("{scheme} <redacted>"),
        ("authorization", None) => "<redacted>".to_owned(),
        (name, _) if dsh_session::redact::is_credential_header(name) => "<redacted>".to_owned(),
        _ => value.into_owned(),
    };
    (name, value)
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buffer = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    let (head_len, method, path, headers, content_length) = loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer) {
            Ok(httparse::Status::Complete(head_len)) => {
                let content_length = request
                    .headers
                    .iter()
                    .find(|header| header.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|header| std::str::from_utf8(header.value).ok()?.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let headers = request.headers.iter().map(|header| recorded_header(header.name, header.value)).collect();
                break (
                    head_len,
                    request.method.unwrap_or("").to_owned(),
                    request.path.unwrap_or("").to_owned(),
                    headers,
                    content_length,
                );
            }
            Ok(httparse::Status::Partial) if buffer.len() < MAX_REQUEST_HEAD => continue,
            _ => return Ok(None),
        }
    };
    let mut body = buffer[head_len..].to_vec();
    while body.len() < content_length {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    body.truncate(content_length);
    Ok(Some(Request { method, path, headers, body }))
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn sse_chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    format!("data: {}\n\n", chunk(model, delta, finish))
}

/// The text in pieces of a few characters, as a model streams it.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(CHUNK_CHARS).map(|piece| piece.iter().collect()).collect()
}

impl Shared {
    async fn serve(&self, mut stream: TcpStream) -> std::io::Result<()> {
        let Some(request) = read_request(&mut stream).await? else {
            return Ok(());
        };
        if let Some(name) = request.path.strip_prefix(RELEASE_PATH) {
            self.released.send_modify(|released| {
                released.insert(name.to_owned());
            });
            stream.write_all(head(204, &[], Some(0)).as_bytes()).await?;
            return stream.shutdown().await;
        }
        let known_path = matches!(request.path.as_str(), "/v1/chat/completions" | "/chat/completions");
        if !known_path || request.method != "POST" {
            // A gateway's own probes (`GET /v1/models`) take no step of the script.
            self.report(None, &request, "404".to_owned());
            let body = r#"{"error":{"message":"the mock server serves POST /v1/chat/completions"}}"#;
            let head = head(404, &[("content-type".into(), "application/json".into())], Some(body.len()));
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            return stream.shutdown().await;
        }
        let number = self.next.fetch_add(1, Ordering::SeqCst);
        let position = match self.replay {
            Replay::LastRepeats => number.min(self.script.len() - 1),
            Replay::Loop => number % self.script.len(),
        };
        let step = &self.script[position];
        self.report(Some(number + 1), &request, describe(&step.action));
        if let Some(name) = &step.hold {
            let _ = self.released.subscribe().wait_for(|released| released.contains(name)).await;
        }
        if step.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
        }
        let model = serde_json::from_slice::<Value>(&request.body)
            .ok()
            .and_then(|body| body.get("model")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| "mock".to_owned());
        let out = Out { stream, piece: step.chunk_bytes, request: number + 1 };
        out.answer(step, &model, request.body.len()).await
    }

    /// Logs a request: `number` is the script step it took, `None` for a request answered 404.
    fn report(&self, number: Option<usize>, request: &Request, answer: String) {
        if self.log.stderr {
            let number = number.map_or_else(|| "-".to_owned(), |number| number.to_string());
            eprintln!("mock-server: #{number} {} {} -> {answer}", request.method, request.path);
        }
        if let Some(path) = &self.log.record {
            let line = json!({
                "request": number,
                "method": request.method,
                "path": request.path,
                "headers": request.headers.iter().map(|(name, value)| (name.clone(), Value::from(value.as_str()))).collect::<serde_json::Map<String, Value>>(),
                "body": String::from_utf8_lossy(&request.body),
            });
            // One write of the whole line: concurrent connections append whole lines.
            let appended = std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut file| {
                use std::io::Write;
                file.write_all(format!("{line}\n").as_bytes())
            });
            if let Err(err) = appended {
                eprintln!("mock-server: cannot record to {}: {err}", path.display());
            }
        }
    }
}

fn stream_headers(extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".to_owned(), "text/event-stream".to_owned()),
        ("cache-control".to_owned(), "no-cache".to_owned()),
    ];
    headers.extend(extra.iter().cloned());
    headers
}

/// A response being written, in pieces of `piece` bytes when that is not 0.
struct Out {
    stream: TcpStream,
    piece: usize,
    /// The request's number (from 1), for tool call ids.
    request: usize,
}

impl Out {
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.piece == 0 {
            self.stream.write_all(bytes).await?;
            return self.stream.flush().await;
        }
        for piece in bytes.chunks(self.piece) {
            self.stream.write_all(piece).await?;
            self.stream.flush().await?;
        }
        Ok(())
    }

    /// Writes `step`'s response to a request of `request_bytes` for `model`.
    async fn answer(mut self, step: &MockStep, model: &str, request_bytes: usize) -> std::io::Result<()> {
        let stream_head = head(200, &stream_headers(&step.headers), None);
        match &step.action {
            MockAction::Reset => return self.stream.set_zero_linger(),
            MockAction::Status { status, body } => return self.status(*status, body.as_ref(), &step.headers).await,
            _ => self.send(stream_head.as_bytes()).await?,
        }
        match &step.action {
            MockAction::Ok(text) => self.text(model, text, Some(request_bytes)).await?,
            MockAction::Truncate(text) => self.text(model, text, None).await?,
            MockAction::Endless(text) => {
                let frame = sse_chunk(model, json!({"content": text}), None);
                while self.send(frame.as_bytes()).await.is_ok() {}
                return Ok(());
            }
            MockAction::Malformed => {
                self.send(b"data: {\"choices\": [{\"delta\": {\"content\": \"cut\n\n").await?;
                self.send(b"data: [DONE]\n\n").await?;
            }
            MockAction::InvalidUtf8 => {
                self.send(b"data: {\"choices\": [{\"delta\": {\"content\": \"\xff\xfe\xfd\"}}]}\n\n").await?;
                self.send(b"data: [DONE]\n\n").await?;
            }
            MockAction::Empty => {
                self.send(sse_chunk(model, json!({}), Some("stop")).as_bytes()).await?;
                self.send(b"data: [DONE]\n\n").await?;
            }
            MockAction::Stall(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            MockAction::KeepAlive(ms) => {
                while self.send(b": ping\n\n").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                }
                return Ok(());
            }
            MockAction::Frames(frames) => {
                for frame in frames {
                    self.send(format!("data: {frame}\n\n").as_bytes()).await?;
                }
            }
            MockAction::ToolCalls(calls) => self.tool_calls(model, calls, request_bytes).await?,
            MockAction::Reset | MockAction::Status { .. } => {}
        }
        self.stream.shutdown().await
    }

    /// An HTTP error: the body as text (a string) or JSON (anything else), the step's headers
    /// over the default content type.
    async fn status(&mut self, status: u16, body: Option<&Value>, extra: &[(String, String)]) -> std::io::Result<()> {
        let (content_type, bytes) = match body {
            None => ("text/plain", Vec::new()),
            Some(Value::String(text)) => ("text/plain", text.clone().into_bytes()),
            Some(other) => ("application/json", other.to_string().into_bytes()),
        };
        let mut headers = vec![("content-type".to_owned(), content_type.to_owned())];
        for (name, value) in extra {
            headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value.clone()));
        }
        self.send(head(status, &headers, Some(bytes.len())).as_bytes()).await?;
        self.send(&bytes).await?;
        self.stream.shutdown().await
    }

    /// `text` in pieces; with `finished` (the request's size, for the usage), a finish chunk with
    /// usage and `[DONE]` follow, else the stream just stops.
    async fn text(&mut self, model: &str, text: &str, finished: Option<usize>) -> std::io::Result<()> {
        for (index, piece) in pieces(text).into_iter().enumerate() {
            let delta =
                if index == 0 { json!({"role": "assistant", "content": piece}) } else { json!({"content": piece}) };
            self.send(sse_chunk(model, delta, None).as_bytes()).await?;
        }
        let Some(request_bytes) = finished else { return Ok(()) };
        let usage = json!({
            "prompt_tokens": request_bytes / 4, "completion_tokens": text.len() / 4,
            "total_tokens": (request_bytes + text.len()) / 4,
        });
        let mut last = chunk(model, json!({}), Some("stop"));
        last["usage"] = usage;
        self.send(format!("data: {last}\n\n").as_bytes()).await?;
        self.send(b"data: [DONE]\n\n").await
    }
}

impl Out {
    /// An answer asking for `calls`, streamed as OpenAI streams them: each call's id and name,
    /// then its arguments in pieces, then `finish_reason: tool_calls`, usage and `[DONE]`.
    async fn tool_calls(&mut self, model: &str, calls: &[MockToolCall], request_bytes: usize) -> std::io::Result<()> {
        for (index, call) in calls.iter().enumerate() {
            let id = call.id.clone().unwrap_or_else(|| format!("call_{}_{}", self.request, index + 1));
            let function = json!({"name": call.name, "arguments": ""});
            let opening = json!({"index": index, "id": id, "type": "function", "function": function});
            let delta = json!({"role": "assistant", "content": null, "tool_calls": [opening]});
            self.send(sse_chunk(model, delta, None).as_bytes()).await?;
            for piece in pieces(&call.arguments) {
                let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
                self.send(sse_chunk(model, delta, None).as_bytes()).await?;
            }
        }
        let mut last = chunk(model, json!({}), Some("tool_calls"));
        last["usage"] =
            json!({"prompt_tokens": request_bytes / 4, "completion_tokens": 8, "total_tokens": request_bytes / 4 + 8});
        self.send(format!("data: {last}\n\n").as_bytes()).await?;
        self.send(b"data: [DONE]\n\n").await
    }
}

fn describe(action: &MockAction) -> String {
    match action {
        MockAction::Ok(_) => "200 ok".to_owned(),
        MockAction::Status { status, .. } => status.to_string(),
        MockAction::Reset => "reset".to_owned(),
        MockAction::Truncate(_) => "200 truncated".to_owned(),
        MockAction::Malformed => "200 malformed".to_owned(),
        MockAction::Empty => "200 empty".to_owned(),
        MockAction::Stall(ms) => format!("200 stall {ms}ms"),
        MockAction::Endless(_) => "200 endless".to_owned(),
        MockAction::InvalidUtf8 => "200 invalid UTF-8".to_owned(),
        MockAction::KeepAlive(ms) => format!("200 keep-alive every {ms}ms"),
        MockAction::Frames(frames) => format!("200 {} frames", frames.len()),
        MockAction::ToolCalls(calls) => {
            format!("200 tool calls: {}", calls.iter().map(|call| call.name.as_str()).collect::<Vec<_>>().join(", "))
        }
    }
}

/// A response head; `length` adds `content-length`. Every response closes the connection.
fn head(status: u16, headers: &[(String, String)], length: Option<usize>) -> String {
    let reason = reqwest::StatusCode::from_u16(status).ok().and_then(|status| status.canonical_reason());
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason.unwrap_or("Status"));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(length) = length {
        head.push_str(&format!("content-length: {length}\r\n"));
    }
    head.push_str("connection: close\r\n\r\n");
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_response_kind_parses() {
        let script = json!([
            {"ok": "Hello there"},
            {"status": 503, "headers": {"content-type": "text/html"}, "body": "<html></html>"},
            {"status": 429, "headers": {"retry-after": 1}, "body": {"error": {"message": "slow down"}}},
            {"reset": true},
            {"truncate": "partial answ", "delayMs": 5},
            {"malformed": true},
            {"empty": true},
            {"stall": 5000},
            {"tool_calls": [{"name": "lookup", "arguments": {"q": 1}, "id": "c1"}, {"name": "now"}, {"name": "raw", "arguments": "{not json"}]},
        ]);
        let steps = parse_script(&script).unwrap();
        assert_eq!(steps.len(), 9);
        assert_eq!(
            steps[8].action,
            MockAction::ToolCalls(vec![
                MockToolCall { id: Some("c1".into()), name: "lookup".into(), arguments: r#"{"q":1}"#.into() },
                MockToolCall { id: None, name: "now".into(), arguments: "{}".into() },
                MockToolCall { id: None, name: "raw".into(), arguments: "{not json".into() },
            ])
        );
        let refused = parse_script(&json!([{"tool_calls": [{"arguments": {}}]}, {"tool_calls": "x"}])).unwrap_err();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(steps[2].headers, [("retry-after".to_owned(), "1".to_owned())]);
        assert_eq!(steps[4].delay_ms, 5);
        assert_eq!(steps[7].action, MockAction::Stall(5000));
    }

    #[test]
    fn the_step_schema_is_well_formed_and_starts_with_every_action() {
        assert_eq!(STEP.faults(), Vec::<String>::new());
        assert_eq!(STEP.keys[ACTIONS].name, "delayMs");
    }

    #[test]
    fn bad_items_are_all_reported_by_number() {
        let errors =
            parse_script(&json!([{"ok": "x", "reset": true}, "text", {"stall": -1}, {"teapot": 1}])).unwrap_err();
        let shown: Vec<String> = errors.iter().map(|error| format!("{}: {}", error.path, error.message)).collect();
        assert_eq!(
            shown,
            [
                "[1]: has several actions (ok, reset); give exactly one",
                "[2]: must be a mapping with one of: ok, status, reset, truncate, malformed, empty, stall, endless, invalidUtf8, keepAlive, frames, tool_calls",
                "[3].stall: must be a non-negative integer number of milliseconds",
                "[4].teapot: unknown key \"teapot\"",
                "[4]: must have one of: ok, status, reset, truncate, malformed, empty, stall, endless, invalidUtf8, keepAlive, frames, tool_calls",
            ]
        );
    }
}
