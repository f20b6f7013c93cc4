//! The `llm-openai` adapter: OpenAI-compatible chat completions streamed over SSE, with every
//! failure classified into a provider-neutral code.
//!
//! The API key is read from the named environment variable at request time and never logged.
//! Connect and idle timeouts bound every wait; error bodies are read up to a limit.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use abi_stable::std_types::{ROption, RString};
use dsh_abi::Failure;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Value};

use super::classify;
use super::config::ProviderConfig;
use super::retry_after;
use super::sse::{SseDecoder, SseItem};

/// How much of an error body is read to classify it.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// The most a streamed answer may send; an endless stream is cut off here.
pub const STREAM_LIMIT: usize = 64 * 1024 * 1024;

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
}

/// A chat-completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
}

impl ChatRequest {
    /// The JSON body, with `stream: true`.
    pub fn body(&self) -> String {
        let messages: Vec<Value> =
            self.messages.iter().map(|message| json!({"role": message.role, "content": message.content})).collect();
        json!({"model": self.model, "messages": messages, "stream": true}).to_string()
    }
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
    /// `{inputTokens, outputTokens}` when the provider reported usage.
    pub usage: Option<Value>,
    pub finish: Finish,
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
}

/// Reads an API key by the name of the variable that holds it.
pub type KeyLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Keys from the process environment, read at request time.
pub fn environment_keys() -> KeyLookup {
    Arc::new(|variable| std::env::var(variable).ok())
}

/// One provider route's HTTP client.
pub struct OpenAiAdapter {
    client: reqwest::Client,
    url: String,
    api_key_env: Option<String>,
    keys: KeyLookup,
    idle_timeout: Duration,
}

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
            headers.insert(HeaderName::from_bytes(name.as_bytes())?, HeaderValue::from_str(value)?);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("dsh/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .build()?;
        Ok(OpenAiAdapter {
            client,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            api_key_env: config.api_key_env.clone(),
            keys,
            idle_timeout: config.idle_timeout,
        })
    }

    /// Sends `request` and streams the answer; `on_text` receives each text delta as it arrives.
    pub async fn stream(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Completion, AttemptFailure> {
        let mut partial = String::new();
        let result = self.stream_inner(request, &mut partial, on_text).await;
        result.map_err(|failure| AttemptFailure { failure, partial_text: partial })
    }

    async fn stream_inner(
        &self,
        request: &ChatRequest,
        text: &mut String,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Completion, Failure> {
        let mut send = self.client.post(&self.url).body(request.body());
        if let Some(variable) = &self.api_key_env {
            let key = (self.keys)(variable).filter(|key| !key.is_empty()).ok_or_else(|| {
                Failure::new("MISSING_CREDENTIAL", format!("the API key variable {variable} is not set"))
            })?;
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                Failure::new("INVALID_CREDENTIAL", format!("the API key in {variable} is not a valid header value"))
            })?;
            value.set_sensitive(true);
            send = send.header(AUTHORIZATION, value);
        }
        let send = send.send();
        let response = match tokio::time::timeout(self.idle_timeout, send).await {
            Err(_) => {
                return Err(Failure::new(
                    "TIMEOUT",
                    format!("no response from {} within {}ms", self.url, self.idle_timeout.as_millis()),
                ))
            }
            Ok(Err(err)) if err.is_timeout() => {
                return Err(Failure::new(
                    "TIMEOUT",
                    format!("request to {} timed out: {}", self.url, error_chain(&err)),
                ))
            }
            Ok(Err(err)) => {
                return Err(Failure::new("TRANSPORT", format!("request to {} failed: {}", self.url, error_chain(&err))))
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let request_id = ["x-request-id", "x-deepseek-request-id", "request-id"].iter().find_map(|name| {
            response.headers().get(*name)?.to_str().ok().filter(|id| !id.is_empty()).map(str::to_owned)
        });
        if !status.is_success() {
            let header =
                |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
            let hint = retry_after::provider_retry_after_ms(
                header("retry-after-ms").as_deref(),
                header("retry-after").as_deref(),
                header("date").as_deref(),
                SystemTime::now(),
            );
            let content_type = header("content-type");
            let body = self.read_error_body(response).await;
            let (detail, readable) = classify::describe_body(content_type.as_deref(), &body);
            let readable =
                if readable.is_empty() { status.canonical_reason().unwrap_or("no body").to_owned() } else { readable };
            let mut failure = Failure::new(
                classify::http_failure_code(status.as_u16(), &detail),
                format!("HTTP {} from {}: {readable}", status.as_u16(), self.url),
            );
            failure.status = ROption::RSome(u32::from(status.as_u16()));
            failure.provider_retry_after_ms = hint.into();
            failure.request_id = request_id.map(RString::from).into();
            return Err(failure);
        }
        let mut body = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        let mut items = Vec::new();
        let mut reasoning = String::new();
        let mut usage = None;
        let mut finish = None;
        let mut tool_calls = false;
        let mut received = 0usize;
        loop {
            let next = match tokio::time::timeout(self.idle_timeout, body.next()).await {
                Err(_) => {
                    return Err(Failure::new(
                        "TIMEOUT",
                        format!("the stream from {} sent nothing for {}ms", self.url, self.idle_timeout.as_millis()),
                    ))
                }
                Ok(next) => next,
            };
            let bytes = match next {
                None => {
                    return Err(Failure::new(
                        "STREAM_CLOSED",
                        format!("the stream from {} ended without [DONE]", self.url),
                    ))
                }
                Some(Err(err)) => {
                    return Err(Failure::new(
                        "TRANSPORT",
                        format!("reading the stream from {} failed: {}", self.url, error_chain(&err)),
                    ))
                }
                Some(Ok(bytes)) => bytes,
            };
            received += bytes.len();
            if received > STREAM_LIMIT {
                return Err(Failure::new(
                    "UNKNOWN",
                    format!("the stream from {} sent more than {} MiB without finishing", self.url, STREAM_LIMIT >> 20),
                ));
            }
            decoder.feed(&bytes, &mut items).map_err(|err| {
                Failure::new("MALFORMED_RESPONSE", format!("the stream from {} is not valid SSE: {err}", self.url))
            })?;
            for item in items.drain(..) {
                let SseItem::Data(payload) = item else { continue };
                if payload == "[DONE]" {
                    if text.is_empty() && reasoning.is_empty() && !tool_calls {
                        return Err(Failure::new(
                            "EMPTY_RESPONSE",
                            "model returned a completed response with no content".to_owned(),
                        ));
                    }
                    let finish = match finish.as_deref() {
                        None | Some("stop") | Some("tool_calls") => Finish::Stop,
                        Some("length") => Finish::Length,
                        Some(other) => {
                            return Err(Failure::new(other.to_uppercase(), format!("model stopped: {other}")))
                        }
                    };
                    return Ok(Completion { text: std::mem::take(text), reasoning, usage, finish });
                }
                let chunk: Chunk = serde_json::from_str(&payload).map_err(|_| {
                    let shown: String = payload.chars().take(120).collect();
                    Failure::new("MALFORMED_RESPONSE", format!("malformed SSE payload from {}: {shown}", self.url))
                })?;
                if let Some(error) = chunk.error {
                    let (detail, readable) =
                        classify::describe_body(None, json!({"error": error}).to_string().as_bytes());
                    return Err(Failure::new(
                        classify::http_failure_code(500, &detail),
                        format!("error in the stream from {}: {readable}", self.url),
                    ));
                }
                for choice in chunk.choices {
                    if let Some(delta) = choice.delta {
                        if let Some(content) = delta.content.filter(|content| !content.is_empty()) {
                            on_text(&content);
                            text.push_str(&content);
                        }
                        if let Some(thinking) = delta.reasoning_content {
                            reasoning.push_str(&thinking);
                        }
                        tool_calls |= delta.tool_calls.is_some();
                    }
                    if let Some(reason) = choice.finish_reason {
                        finish = Some(reason);
                    }
                }
                if let Some(reported) = chunk.usage {
                    usage = Some(json!({
                        "inputTokens": reported.prompt_tokens.unwrap_or(0),
                        "outputTokens": reported.completion_tokens.unwrap_or(0),
                    }));
                }
            }
        }
    }

    async fn read_error_body(&self, response: reqwest::Response) -> Vec<u8> {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while body.len() < ERROR_BODY_LIMIT {
            match tokio::time::timeout(self.idle_timeout, stream.next()).await {
                Ok(Some(Ok(bytes))) => body.extend_from_slice(&bytes[..bytes.len().min(ERROR_BODY_LIMIT - body.len())]),
                _ => break,
            }
        }
        body
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
        let request =
            ChatRequest { model: "m".into(), messages: vec![ChatMessage { role: "user", content: "q".into() }] };
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
