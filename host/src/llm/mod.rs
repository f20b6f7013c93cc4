//! Model providers: provider row configs, provider-owned retry policies, the request options a
//! route sends, the OpenAI-compatible streaming adapter (SSE decoding, failure classification,
//! server wait hints, retrying gateways in front of it) and the mock server.

pub mod classify;
pub mod config;
pub mod gateway;
pub mod mock;
pub mod openai;
pub mod policy;
pub mod retry_after;
pub mod sse;
pub mod wire;

use std::future::Future;
use std::pin::Pin;

use openai::{AttemptFailure, ChatRequest, Completion};

/// The future of one streamed request.
pub type StreamFuture<'a> = Pin<Box<dyn Future<Output = Result<Completion, AttemptFailure>> + Send + 'a>>;

/// A provider route's client: sends one request and streams the answer, each text delta to
/// `on_text`. The HTTP adapter is the one that ships; simulations bring their own.
pub trait ModelClient: Send + Sync {
    fn stream<'a>(&'a self, request: &'a ChatRequest, on_text: &'a mut (dyn FnMut(&str) + Send)) -> StreamFuture<'a>;
}

impl ModelClient for openai::OpenAiAdapter {
    fn stream<'a>(&'a self, request: &'a ChatRequest, on_text: &'a mut (dyn FnMut(&str) + Send)) -> StreamFuture<'a> {
        Box::pin(openai::OpenAiAdapter::stream(self, request, on_text))
    }
}
