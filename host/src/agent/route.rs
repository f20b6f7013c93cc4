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
}
