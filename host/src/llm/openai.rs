//! The `llm-openai` adapter: OpenAI-compatible chat completions streamed over SSE, with every
//! failure classified into a provider-neutral code.
//!
//! The API key is read from the named environment variable at request time and never logged:
//! its value (and a `baseUrl`'s credentials) is redacted from every failure and from the streamed
//! text, whatever the provider echoes ([`super::redact`]). Connect and idle timeouts bound every
//! wait, and `requestTimeoutMs` bounds the whole attempt (keep-alive comments cannot extend it);
//! error bodies are read up to a limit.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::{timeout_at, Instant};

use abi_stable::std_types::{ROption, RString};
use dsh_abi::Failure;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::classify;
use super::config::ProviderConfig;
use super::retry_after;
use super::sse::{SseDecoder, SseItem};
use super::wire::WireOptions;
use dsh_session::redact::{self, Secrets, StreamRedactor};

/// How much of an error body is read to classify it.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// The most a streamed answer may send; an endless stream is cut off here.
pub const STREAM_LIMIT: usize = 64 * 1024 * 1024;

/// One message of the conversation sent to the model: text, and for an assistant message the
/// tool calls it asked for, for a `tool` message the call it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn text(role: &'static str, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    fn to_json(&self) -> Value {
        let mut message = json!({"role": self.role, "content": self.content});
        if !self.tool_calls.is_empty() {
            if self.content.is_empty() {
                message["content"] = Value::Null;
            }
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|call| {
                    json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        if let Some(id) = &self.tool_call_id {
            message["tool_call_id"] = Value::from(id.as_str());
        }
        message
    }
}

pub use dsh_session::conversation::ToolCall;

/// A chat-completion request: the conversation, and the session it belongs to (named in the
/// DeepSeek route's attribution headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    /// The tools offered, as OpenAI's `tools` entries (none: the key is left out).
    pub tools: Vec<Value>,
    pub session_id: Option<String>,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Stop,
    /// The output hit the token limit.
    Length,
}

/// A successful completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    pub reasoning: String,
    /// `{inputTokens, outputTokens, cacheReadTokens?, reasoningTokens?}` when the provider reported
    /// usage.
    pub usage: Option<Value>,
    pub finish: Finish,
    /// The tool calls the answer asks for, in the order the model listed them.
    pub tool_calls: Vec<ToolCall>,
}

/// A failed attempt: the classified failure and whatever text streamed before it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFailure {
    pub failure: Failure,
    pub partial_text: String,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl Usage {
    /// The usage as DeepSeek Harness records it: disjoint counts (cache reads are taken out of
    /// the input tokens, which include them on the wire), cache and reasoning counts only when
    /// the provider reported them.
    fn recorded(&self) -> Value {
        let cache_read = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|details| details.cached_tokens)
            .or(self.prompt_cache_hit_tokens);
        let reasoning = self.completion_tokens_details.as_ref().and_then(|details| details.reasoning_tokens);
        let mut usage = json!({
            "inputTokens": self.prompt_tokens.unwrap_or(0).saturating_sub(cache_read.unwrap_or(0)),
            "outputTokens": self.completion_tokens.unwrap_or(0),
        });
        if let Some(tokens) = cache_read {
            usage["cacheReadTokens"] = Value::from(tokens);
        }
        if let Some(tokens) = reasoning {
            usage["reasoningTokens"] = Value::from(tokens);
        }
        usage
    }
}

/// Reads an API key by the name of the variable that holds it.
pub type KeyLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Keys from the process environment, read at request time.
pub fn environment_keys() -> KeyLookup {
    Arc::new(|variable| std::env::var(variable).ok())
}

/// Streamed text on its way out: redacted, then handed on and kept.
struct StreamText {
    redactor: StreamRedactor,
    text: String,
}

impl StreamText {
    fn push(&mut self, delta: &str, on_text: &mut (dyn FnMut(&str) + Send)) {
        let safe = self.redactor.feed(delta);
        if !safe.is_empty() {
            on_text(&safe);
            self.text.push_str(&safe);
        }
    }

    /// Hands on what the redactor still holds (the stream is complete).
    fn flush(&mut self, on_text: &mut (dyn FnMut(&str) + Send)) {
        let rest = self.redactor.finish();
        if !rest.is_empty() {
            on_text(&rest);
            self.text.push_str(&rest);
        }
    }
}

/// How a completed stream ended, from its last `finish_reason`. A reason that is not a normal
/// ending becomes a failure with a known code; its raw text only ever goes into the message.
fn finish_of(reason: Option<&str>) -> Result<Finish, Box<Failure>> {
    match reason {
        None | Some("stop") | Some("tool_calls") | Some("function_call") => Ok(Finish::Stop),
        Some("length") => Ok(Finish::Length),
        Some("insufficient_system_resource") => Err(Box::new(Failure::new(
            "SERVER",
            "the model stopped: insufficient_system_resource (the provider ran out of capacity)",
        ))),
        Some(other) => {
            let shown: String =
                crate::one_line(other, 80).chars().map(|c| if c.is_control() { '\u{FFFD}' } else { c }).collect();
            Err(Box::new(Failure::new(
                "UNKNOWN",
                format!("the model stopped with finish_reason {}", dsh_abi::js::to_string(&shown)),
            )))
        }
    }
}

/// One provider route's HTTP client.
pub struct OpenAiAdapter {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL as messages show it: without its credentials.
    shown_url: String,
    api_key_env: Option<String>,
    /// `(header, variable)`: headers whose values are read at request time, as the key is.
    header_env: Vec<(String, String)>,
    keys: KeyLookup,
    idle_timeout: Duration,
    request_timeout: Duration,
    wire: WireOptions,
    /// Where the anonymous user id of the attribution headers comes from, read at the first
    /// request that sends it (so building a route writes nothing).
    user_id: Option<UserIdSource>,
    user_id_read: std::sync::OnceLock<Option<String>>,
    /// The route and row it serves, for what it says of a gateway in front of it.
    route: (String, String),
    /// A retrying gateway was named already ([`super::gateway`]): once per route (never when the
    /// row says its retries are off).
    gateway_named: std::sync::atomic::AtomicBool,
}

/// Reads (or creates) the anonymous user id.
pub type UserIdSource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// An error and its causes, `: `-joined (reqwest's own message alone says little).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl OpenAiAdapter {
    /// An adapter for `config`, sending to `base_url` (`…/v1`), with keys from the environment.
    pub fn new(config: &ProviderConfig, base_url: &str) -> anyhow::Result<OpenAiAdapter> {
        OpenAiAdapter::with_keys(config, base_url, environment_keys())
    }

    /// An adapter whose API key comes from `keys`.
    pub fn with_keys(config: &ProviderConfig, base_url: &str, keys: KeyLookup) -> anyhow::Result<OpenAiAdapter> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        for (name, value) in &config.headers {
            redact::learn_header(name, value);
            headers.insert(HeaderName::from_bytes(name.as_bytes())?, HeaderValue::from_str(value)?);
        }
        let client =
            crate::http::client_builder().connect_timeout(config.connect_timeout).default_headers(headers).build()?;
        let url = reqwest::Url::parse(&format!("{}/chat/completions", base_url.trim_end_matches('/')))?;
        redact::learn_url(url.as_str());
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        Ok(OpenAiAdapter {
            client,
            url,
            shown_url: shown.to_string(),
            api_key_env: config.api_key_env.clone(),
            header_env: config.header_env.clone(),
            keys,
            idle_timeout: config.idle_timeout,
            request_timeout: config.request_timeout,
            wire: config.wire.clone(),
            user_id: None,
            user_id_read: std::sync::OnceLock::new(),
            route: (config.provider.clone(), config.row_id.clone()),
            gateway_named: std::sync::atomic::AtomicBool::new(!config.gateway_retries),
        })
    }

    /// Where a route with attribution headers gets the anonymous user id it sends.
    pub fn with_user_id(mut self, source: UserIdSource) -> OpenAiAdapter {
        self.user_id = Some(source);
        self
    }

    /// The JSON body of `request`: the conversation, `stream: true`, then the route's options.
    pub fn body(&self, request: &ChatRequest) -> String {
        let messages: Vec<Value> = request.messages.iter().map(ChatMessage::to_json).collect();
        let mut body = Map::new();
        body.insert("model".into(), Value::from(request.model.as_str()));
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            body.insert("tools".into(), Value::Array(request.tools.clone()));
        }
        body.insert("stream".into(), Value::Bool(true));
        self.wire.extend_body(&mut body);
        Value::Object(body).to_string()
    }

    /// Sends `request` and streams the answer; `on_text` receives each text delta as it arrives.
    pub async fn stream(
        &self,
        request: &ChatRequest,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Completion, AttemptFailure> {
        let mut secrets = (*redact::known()).clone();
        secrets.add_url(self.url.as_str());
        let mut text = StreamText { redactor: StreamRedactor::new(secrets.clone()), text: String::new() };
        let result = self.stream_inner(request, &mut secrets, &mut text, on_text).await;
        result.map_err(|failure| {
            let mut partial_text = std::mem::take(&mut text.text);
            partial_text.push_str(&text.redactor.finish());
            AttemptFailure { failure: secrets.redact_failure(failure), partial_text }
        })
    }

    async fn stream_inner(
        &self,
        request: &ChatRequest,
        secrets: &mut Secrets,
        text: &mut StreamText,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Completion, Failure> {
        let clock = AttemptClock::start(self);
        let send = self.prepare(request, secrets, text).map_err(|failure| *failure)?;
        let response = self.send(send, &clock).await?;
        if !response.status().is_success() {
            return Err(self.status_failure(response, &clock).await);
        }
        let url = &self.shown_url;
        let mut answer = StreamedAnswer::new(url, text, secrets);
        let mut body = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        let mut items = Vec::new();
        let mut received = 0usize;
        loop {
            let silent = || format!("the stream from {url} sent nothing for {}ms", self.idle_timeout.as_millis());
            let bytes = match clock.wait(body.next(), silent).await? {
                None => {
                    return Err(Failure::new("STREAM_CLOSED", format!("the stream from {url} ended without [DONE]")))
                }
                Some(Err(err)) => {
                    let message = format!("reading the stream from {url} failed: {}", error_chain(&err));
                    return Err(Failure::new("TRANSPORT", message));
                }
                Some(Ok(bytes)) => bytes,
            };
            received += bytes.len();
            if received > STREAM_LIMIT {
                let message =
                    format!("the stream from {url} sent more than {} MiB without finishing", STREAM_LIMIT >> 20);
                return Err(Failure::new("UNKNOWN", message));
            }
            decoder.feed(&bytes, &mut items).map_err(|err| {
                Failure::new("MALFORMED_RESPONSE", format!("the stream from {url} is not valid SSE: {err}"))
            })?;
            for item in items.drain(..) {
                let SseItem::Data(payload) = item else { continue };
                if let Some(completion) = answer.take(&payload, on_text).map_err(|failure| *failure)? {
                    return Ok(completion);
                }
            }
        }
    }

    /// The request with its body, attribution headers and credentials; the key joins `secrets`
    /// (and the text's redactor) before anything can echo it.
    fn prepare(
        &self,
        request: &ChatRequest,
        secrets: &mut Secrets,
        text: &mut StreamText,
    ) -> Result<reqwest::RequestBuilder, Box<Failure>> {
        let mut send = self.client.post(self.url.clone()).body(self.body(request));
        if self.wire.attribution {
            let user_id =
                self.user_id.as_ref().and_then(|source| self.user_id_read.get_or_init(|| source()).as_deref());
            if let Some(user_id) = user_id {
                send = send.header("x-deepseek-harness-user-id", user_id);
            }
            if let Some(session_id) = &request.session_id {
                send = send.header("x-deepseek-harness-session-id", session_id);
            }
        }
        for (header, variable) in &self.header_env {
            let value = (self.keys)(variable).filter(|value| !value.is_empty()).ok_or_else(|| {
                let message = format!("the variable {variable} (headerEnv.{header}) is not set");
                Box::new(Failure::new("MISSING_CREDENTIAL", message))
            })?;
            redact::learn(&value);
            secrets.add(&value);
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                let message = format!("the value of {variable} (headerEnv.{header}) is not a valid header value");
                Box::new(Failure::new("INVALID_CREDENTIAL", message))
            })?;
            value.set_sensitive(true);
            send = send.header(header.as_str(), value);
        }
        text.redactor = StreamRedactor::new(secrets.clone());
        let Some(variable) = &self.api_key_env else { return Ok(send) };
        let key = (self.keys)(variable)
            .filter(|key| !key.is_empty())
            .ok_or_else(|| Failure::new("MISSING_CREDENTIAL", format!("the API key variable {variable} is not set")))
            .map_err(Box::new)?;
        redact::learn(&key);
        secrets.add(&key);
        text.redactor = StreamRedactor::new(secrets.clone());
        let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            Box::new(Failure::new(
                "INVALID_CREDENTIAL",
                format!("the API key in {variable} is not a valid header value"),
            ))
        })?;
        value.set_sensitive(true);
        Ok(send.header(AUTHORIZATION, value))
    }

    /// Sends the request and waits for the response head.
    async fn send(
        &self,
        send: reqwest::RequestBuilder,
        clock: &AttemptClock<'_>,
    ) -> Result<reqwest::Response, Failure> {
        let url = &self.shown_url;
        let silent = || format!("no response from {url} within {}ms", self.idle_timeout.as_millis());
        // The message names the URL once, as it may be shown; reqwest's own text would repeat it.
        match clock.wait(send.send(), silent).await?.map_err(reqwest::Error::without_url) {
            Ok(response) => {
                self.name_a_retrying_gateway(response.headers());
                Ok(response)
            }
            Err(err) if err.is_timeout() => {
                Err(Failure::new("TIMEOUT", format!("request to {url} timed out: {}", error_chain(&err))))
            }
            Err(err) => Err(Failure::new("TRANSPORT", format!("request to {url} failed: {}", error_chain(&err)))),
        }
    }

    fn name_a_retrying_gateway(&self, headers: &HeaderMap) {
        use std::sync::atomic::Ordering;
        if self.gateway_named.load(Ordering::Relaxed) {
            return;
        }
        if let Some(warning) = super::gateway::warning(&self.route.0, &self.route.1, headers) {
            if !self.gateway_named.swap(true, Ordering::Relaxed) {
                tracing::warn!("{warning}");
            }
        }
    }

    /// The failure an error status means: classified from the status and the body, with the
    /// provider's retry hint and request id.
    async fn status_failure(&self, response: reqwest::Response, clock: &AttemptClock<'_>) -> Failure {
        let status = response.status();
        let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
        let request_id = ["x-request-id", "x-deepseek-request-id", "request-id"]
            .iter()
            .find_map(|name| header(name).filter(|id| !id.is_empty()));
        let hint_headers =
            |prefix: &str| (header(&format!("{prefix}retry-after-ms")), header(&format!("{prefix}retry-after")));
        let (retry_after_ms, retry_after) = match hint_headers("") {
            (None, None) => hint_headers(retry_after::GATEWAY_PREFIX),
            plain => plain,
        };
        let hint = retry_after::provider_retry_after_ms(
            retry_after_ms.as_deref(),
            retry_after.as_deref(),
            header("date").as_deref(),
            SystemTime::now(),
        );
        let content_type = header("content-type");
        let body = read_error_body(response, clock).await;
        let (detail, readable) = classify::describe_body(content_type.as_deref(), &body);
        let readable =
            if readable.is_empty() { status.canonical_reason().unwrap_or("no body").to_owned() } else { readable };
        let mut failure = Failure::new(
            classify::http_failure_code(status.as_u16(), &detail),
            format!("HTTP {} from {}: {readable}", status.as_u16(), self.shown_url),
        );
        failure.status = ROption::RSome(u32::from(status.as_u16()));
        failure.provider_retry_after_ms = hint.into();
        failure.request_id = request_id.map(RString::from).into();
        failure
    }
}

/// Reads an error body up to its limit, within the attempt's clocks.
async fn read_error_body(response: reqwest::Response, clock: &AttemptClock<'_>) -> Vec<u8> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < ERROR_BODY_LIMIT {
        match clock.wait(stream.next(), String::new).await {
            Ok(Some(Ok(bytes))) => body.extend_from_slice(&bytes[..bytes.len().min(ERROR_BODY_LIMIT - body.len())]),
            _ => break,
        }
    }
    body
}

/// The two clocks of one attempt: the idle timeout starts again at every wait, the request
/// timeout bounds the whole attempt (keep-alive comments cannot extend it).
struct AttemptClock<'a> {
    deadline: Instant,
    adapter: &'a OpenAiAdapter,
}

impl<'a> AttemptClock<'a> {
    fn start(adapter: &'a OpenAiAdapter) -> AttemptClock<'a> {
        AttemptClock { deadline: Instant::now() + adapter.request_timeout, adapter }
    }

    /// `future`'s output, or a `TIMEOUT` failure: the request timeout's, or the idle one with
    /// the message `silent` gives.
    async fn wait<F: std::future::Future>(
        &self,
        future: F,
        silent: impl FnOnce() -> String,
    ) -> Result<F::Output, Failure> {
        match timeout_at(self.deadline.min(Instant::now() + self.adapter.idle_timeout), future).await {
            Ok(output) => Ok(output),
            Err(_) if Instant::now() >= self.deadline => Err(Failure::new(
                "TIMEOUT",
                format!(
                    "the request to {} did not finish within {}ms (requestTimeoutMs)",
                    self.adapter.shown_url,
                    self.adapter.request_timeout.as_millis()
                ),
            )),
            Err(_) => Err(Failure::new("TIMEOUT", silent())),
        }
    }
}

/// The failure an error frame (`data: {"error": …}`) stands for: classified as an HTTP error
/// response would be, with the status a gateway puts in its `code` (LiteLLM's `"429"`), else as
/// a server error.
fn error_frame_failure(url: &str, error: &Value) -> Failure {
    let (detail, readable) = classify::describe_body(None, json!({"error": error}).to_string().as_bytes());
    let status = match &error["code"] {
        Value::String(code) => code.parse::<u16>().ok(),
        Value::Number(code) => code.as_u64().and_then(|code| u16::try_from(code).ok()),
        _ => None,
    };
    let status = status.filter(|status| (400..=599).contains(status)).unwrap_or(500);
    Failure::new(classify::http_failure_code(status, &detail), format!("error in the stream from {url}: {readable}"))
}

/// The answer as its SSE payloads arrive: text (redacted, handed on), reasoning, usage and the
/// finish reason, until `[DONE]` completes it.
struct StreamedAnswer<'a> {
    url: &'a str,
    text: &'a mut StreamText,
    reasoning: StreamText,
    usage: Option<Value>,
    finish: Option<String>,
    /// Tool calls by their stream index, as their deltas arrive.
    tool_calls: std::collections::BTreeMap<u64, ToolCall>,
    secrets: Secrets,
}

impl<'a> StreamedAnswer<'a> {
    fn new(url: &'a str, text: &'a mut StreamText, secrets: &Secrets) -> StreamedAnswer<'a> {
        let reasoning = StreamText { redactor: StreamRedactor::new(secrets.clone()), text: String::new() };
        let tool_calls = std::collections::BTreeMap::new();
        StreamedAnswer { url, text, reasoning, usage: None, finish: None, tool_calls, secrets: secrets.clone() }
    }

    /// Adds one `tool_calls` delta: `[{index, id?, function: {name?, arguments?}}]`, where the
    /// arguments of a call arrive in pieces to be joined.
    fn take_tool_calls(&mut self, deltas: &Value) -> Result<(), Box<Failure>> {
        let malformed = || {
            let shown: String = deltas.to_string().chars().take(120).collect();
            Box::new(Failure::new(
                "MALFORMED_RESPONSE",
                format!("malformed tool_calls delta from {}: {shown}", self.url),
            ))
        };
        for delta in deltas.as_array().ok_or_else(malformed)? {
            let index = delta.get("index").and_then(Value::as_u64).unwrap_or(0);
            let call = self.tool_calls.entry(index).or_default();
            if let Some(id) = delta.get("id").and_then(Value::as_str) {
                call.id = id.to_owned();
            }
            let function = delta.get("function");
            if let Some(name) = function.and_then(|function| function.get("name")).and_then(Value::as_str) {
                call.name.push_str(name);
            }
            if let Some(piece) = function.and_then(|function| function.get("arguments")).and_then(Value::as_str) {
                call.arguments.push_str(piece);
            }
        }
        Ok(())
    }

    /// The calls in stream order; a call the provider sent no id for gets `call-<index>`, as
    /// DeepSeek Harness names it; secrets the provider echoed (in ids, names or arguments) are
    /// redacted.
    fn finished_tool_calls(&mut self) -> Vec<ToolCall> {
        std::mem::take(&mut self.tool_calls)
            .into_iter()
            .map(|(index, mut call)| {
                if call.id.is_empty() {
                    call.id = format!("call-{index}");
                }
                for field in [&mut call.id, &mut call.name, &mut call.arguments] {
                    *field = self.secrets.redact(field).into_owned();
                }
                call
            })
            .collect()
    }

    /// Takes one payload; the completion once `[DONE]` arrives.
    fn take(
        &mut self,
        payload: &str,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Option<Completion>, Box<Failure>> {
        if payload == "[DONE]" {
            return self.complete(on_text).map(Some);
        }
        let url = self.url;
        let chunk: Chunk = serde_json::from_str(payload).map_err(|_| {
            let shown: String = payload.chars().take(120).collect();
            Failure::new("MALFORMED_RESPONSE", format!("malformed SSE payload from {url}: {shown}"))
        })?;
        if let Some(error) = chunk.error {
            return Err(Box::new(error_frame_failure(url, &error)));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(content) = delta.content.filter(|content| !content.is_empty()) {
                    self.text.push(&content, on_text);
                }
                if let Some(thinking) = delta.reasoning_content {
                    self.reasoning.push(&thinking, &mut |_| {});
                }
                if let Some(calls) = delta.tool_calls.as_ref().filter(|calls| !calls.is_null()) {
                    self.take_tool_calls(calls)?;
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason);
            }
        }
        if let Some(reported) = chunk.usage {
            self.usage = Some(reported.recorded());
        }
        Ok(None)
    }

    fn complete(&mut self, on_text: &mut (dyn FnMut(&str) + Send)) -> Result<Completion, Box<Failure>> {
        self.text.flush(on_text);
        self.reasoning.flush(&mut |_| {});
        if self.text.text.is_empty() && self.reasoning.text.is_empty() && self.tool_calls.is_empty() {
            return Err(Box::new(Failure::new(
                "EMPTY_RESPONSE",
                "model returned a completed response with no content".to_owned(),
            )));
        }
        let finish = finish_of(self.finish.as_deref())?;
        Ok(Completion {
            text: std::mem::take(&mut self.text.text),
            reasoning: std::mem::take(&mut self.reasoning.text),
            usage: self.usage.take(),
            finish,
            tool_calls: self.finished_tool_calls(),
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::llm::config::parse_openai;

    /// Answers one request with a one-chunk stream; returns the request head as it arrived.
    async fn answer_once(listener: TcpListener) -> String {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        while !received.windows(4).any(|window| window == b"\r\n\r\n") {
            let read = stream.read(&mut buffer).await.unwrap();
            assert_ne!(read, 0, "the request ended before its head");
            received.extend_from_slice(&buffer[..read]);
        }
        let answer = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n\
                      data: [DONE]\n\n";
        stream.write_all(answer.as_bytes()).await.unwrap();
        let head = String::from_utf8_lossy(&received).to_lowercase();
        head.split("\r\n\r\n").next().unwrap().to_owned()
    }

    #[test]
    fn an_error_frame_in_the_stream_is_classified_from_its_error() {
        let frames = [
            (r#"{"error":{"message":"upstream timed out","type":"server_error"}}"#, "SERVER"),
            (r#"{"error":{"message":"Rate limit reached","code":"429"}}"#, "RATE_LIMIT"),
            (r#"{"error":{"message":"insufficient balance","code":429}}"#, "QUOTA"),
            (r#"{"error":{"message":"bad","code":"invalid_request"}}"#, "SERVER"),
            (r#"{"error":{"message":"no such model","code":"404"}}"#, "HTTP_404"),
        ];
        for (frame, code) in frames {
            let mut text = StreamText { redactor: StreamRedactor::new(Secrets::default()), text: String::new() };
            let mut answer = StreamedAnswer::new("http://relay/v1", &mut text, &Secrets::default());
            let failure = answer.take(frame, &mut |_| {}).unwrap_err();
            assert_eq!(failure.code.as_str(), code, "{frame}");
            assert!(failure.message.as_str().starts_with("error in the stream from http://relay/v1: "), "{frame}");
        }
    }

    #[tokio::test]
    async fn a_request_carries_the_stream_headers_the_row_headers_and_the_key() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let config = parse_openai(
            "route",
            &json!({"provider": "p", "baseUrl": base_url, "model": "m", "apiKeyEnv": "TEAM_KEY", "headers": {"x-team": "blue"}}),
        )
        .unwrap();
        let keys: KeyLookup = Arc::new(|variable| (variable == "TEAM_KEY").then(|| "sk-test".to_owned()));
        let adapter = OpenAiAdapter::with_keys(&config, &base_url, keys).unwrap();
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::text("user", "q")],
            tools: Vec::new(),
            session_id: Some("s-1".into()),
        };
        let mut ignore_text = |_: &str| {};
        let (head, completion) = tokio::join!(answer_once(listener), adapter.stream(&request, &mut ignore_text));
        assert_eq!(completion.unwrap().text, "hi");
        let lines: Vec<&str> = head.lines().collect();
        assert_eq!(lines[0], "post /v1/chat/completions http/1.1");
        for expected in [
            "content-type: application/json",
            "accept: text/event-stream",
            "x-team: blue",
            "authorization: bearer sk-test",
        ] {
            assert!(lines.contains(&expected), "{expected} missing from {lines:?}");
        }
    }
}
