//! One provider route, ready to send: its name, model, client and resolved retry policy.

use dsh_abi::RetryPolicy;

use crate::llm::ModelClient;

pub struct Route {
    pub provider: String,
    pub model: String,
    pub client: Box<dyn ModelClient>,
    pub policy: RetryPolicy,
}
