//! One provider route, ready to send: its name, model, client, request options and resolved
//! retry policy.

use dsh_abi::RetryPolicy;

use crate::llm::wire::WireOptions;
use crate::llm::ModelClient;

pub struct Route {
    pub provider: String,
    pub model: String,
    pub client: Box<dyn ModelClient>,
    pub policy: RetryPolicy,
    /// What its requests send besides the conversation (recorded in `request/header`).
    pub wire: WireOptions,
    /// The host of its endpoint (`api.deepseek.com`), for rows that key things by relay.
    pub endpoint_host: String,
    /// The row's `contextWindow` (tokens), when it declares one.
    pub context_window: Option<u64>,
}

impl crate::context::ContextWindows for std::collections::HashMap<String, Route> {
    fn context_window(&self, route: &str) -> Option<u64> {
        self.get(route)?.context_window
    }
}
