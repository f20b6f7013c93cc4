//! The `dsh` agent host.
//!
//! | module | owns |
//! |---|---|
//! | [`plugin`] | loading cdylib plugins through the stable ABI, inspecting them, row instances |
//! | [`waterfall`] | the ordered `agent/request-error` listener chain and its final decision |
//! | [`context`] | the session state and system services a plugin call's context answers from |
//! | [`session`] | the durable session log and the history index plugins query |
//! | [`profile`] | `$DSH_HOME`, profiles, patch layers and their composition, the YAML module |
//! | [`fsutil`] | atomic, durable file writes |
//! | [`lock`] | one writer per session and per profile (OS locks) |
//! | [`counters`] | the shared counters rows add to: memory, machine (a locked file), Redis |
//! | [`migration`] | DeepSeek Harness's package names and where its rows' settings live in dsh |
//! | [`problem`] | configuration problems and where they are (file, row, key) |
//! | [`bundled`] | what ships inside this build: bundled packages and profile templates |
//! | [`llm`] | provider rows, provider-owned retry policies, the mock server |
//! | [`tools`] | MCP server rows, the tools they offer, calls with deadlines |
//! | [`redact`] | every secret the process knows, and taking them out of what is written or shown |
//! | [`http`] | the HTTP client outgoing connections are built from |
//! | [`agent`] | the agent row and its turns |
//! | [`cli`] | the `dsh` command line |

pub mod agent;
pub mod bundled;
pub mod cli;
pub mod context;
pub mod counters;
pub mod fsutil;
pub mod http;
pub mod llm;
pub mod lock;
pub mod migration;
pub mod plugin;
pub mod problem;
pub mod profile;
pub mod redact;
pub mod session;
pub mod tools;
pub mod waterfall;

/// Something the user named does not exist (a profile, session, plugin or file); exit code 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFound(pub String);

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

/// `text` on one line (whitespace runs folded to one space), cut to `max_chars` characters with
/// `…` after a cut.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match folded.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &folded[..cut]),
        None => folded,
    }
}
