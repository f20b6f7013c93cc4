//! The `dsh` agent host. The durable session log is the `dsh-session` crate, below it.
//!
//! | module | owns |
//! |---|---|
//! | [`plugin`] | loading cdylib plugins through the stable ABI, inspecting them, row instances |
//! | [`waterfall`] | the ordered `agent/request-error` listener chain and its final decision |
//! | [`context`] | the session state and system services a plugin call's context answers from |
//! | [`profile`] | `$DSH_HOME`, profiles, patch layers and their composition, the YAML module |
//! | [`counters`] | the shared counters rows add to: memory, machine (a locked file), Redis |
//! | [`migration`] | DeepSeek Harness's package names and where its rows' settings live in dsh |
//! | [`problem`] | configuration problems and where they are (file, row, key) |
//! | [`bundled`] | what ships inside this build: bundled packages and profile templates |
//! | [`llm`] | provider rows, provider-owned retry policies, the mock server |
//! | [`tools`] | MCP server rows, the tools they offer, calls with deadlines |
//! | [`http`] | the HTTP client outgoing connections are built from |
//! | [`agent`] | the agent row and its turns |
//! | [`service`] | the sessions a long-running front end serves: workers, prompts, the durable-event feed |
//! | [`sdk`] | the DeepSeek Harness SDK's JSON-RPC runtime protocol on stdio, over the service |
//! | [`web`] | `dsh web`: the browser front end and its HTTP API, over the service |
//! | [`cli`] | the `dsh` command line |

pub mod agent;
pub mod bundled;
pub mod cli;
pub mod context;
pub mod counters;
pub mod http;
pub mod llm;
pub mod migration;
pub mod plugin;
pub mod problem;
pub mod profile;
pub mod sdk;
pub mod service;
pub mod tools;
pub mod waterfall;
pub mod web;

pub use dsh_session::{one_line, NotFound};

/// Whether `typed` is one edit (insertion, deletion, substitution or transposition) from `known`
/// — close enough to be a typo of it.
pub fn is_typo_of(typed: &str, known: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (typed.chars().collect(), known.chars().collect());
    if a.len().abs_diff(b.len()) > 1 || a == b {
        return false;
    }
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (rest_a, rest_b) = (&a[prefix..], &b[prefix..]);
    rest_a.get(1..) == rest_b.get(1..)
        || rest_a == rest_b.get(1..).unwrap_or_default()
        || rest_a.get(1..).unwrap_or_default() == rest_b
        || (rest_a.len() >= 2 && rest_a[0] == rest_b[1] && rest_a[1] == rest_b[0] && rest_a[2..] == rest_b[2..])
}
