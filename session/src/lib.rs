//! `dsh-session`: the durable session log of dsh, the single source of truth from which retry
//! budgets, resume decisions and verification are derived. The host depends on this crate, never
//! the other way; it knows no provider, plugin or command line, and only its store backends know
//! about PostgreSQL.
//!
//! | module | owns |
//! |---|---|
//! | [`format`] | the log formats (v0, v4), told apart by the header's version |
//! | [`vocabulary`] | the event types both the writer and the verifier know, per format |
//! | [`conversation`] | the model-visible conversation as the log holds it: messages and tool calls |
//! | [`reader`], [`read_ahead`] | reading logs as a stream (ours and DeepSeek Harness's, plain and zstd) |
//! | [`structure`] | the session structure rules every format shares |
//! | [`rules_v4`] | format v4's own rules: envelope, surface, payloads, tool lifecycles, retry chains |
//! | [`gate`] | the one check every event passes: structure rules, then checker plugins |
//! | [`encode_v4`] | the shape the agent loop's events take in a v4 log |
//! | [`writer`] | buffered lines, fsync, the fatal first write error |
//! | [`state`], [`index`] | what is derived from the events: history index, surface history |
//! | [`repair`] | crash repair: torn tails and the closers of an interrupted turn |
//! | [`log`] | an open log: writer + gate + state, created or opened (with repair) |
//! | [`verify`] | `dsh session verify` over whole logs |
//! | [`store`] | where a home keeps its logs: files, or PostgreSQL shared by machines |
//! | [`locate`] | finding a log file by session id or path |
//! | [`summary`] | `dsh session list`: each session's turns, last end, damage and writer |
//! | [`timeline`] | `dsh session show` |
//! | [`import`] | `dsh session import`: a DeepSeek Harness log copied into the home |
//! | [`meta`] | what a session keeps beside its log: profile, `--patch` copies, route |
//! | [`lock`] | one writer per session and per profile (OS locks) |
//! | [`fsutil`] | durable file writes and bounded file reads |
//! | [`redact`] | every secret the process knows, and taking them out of what is written or shown |

pub mod conversation;
pub mod encode_v4;
pub mod format;
pub mod fsutil;
pub mod gate;
pub mod import;
pub mod index;
pub mod locate;
pub mod lock;
pub mod log;
pub mod meta;
pub mod migrate;
pub mod new_event;
pub mod prune;
pub mod read_ahead;
pub mod reader;
pub mod redact;
pub mod repair;
pub mod rules_v4;
pub mod state;
pub mod store;
pub mod store_error;
pub mod structure;
pub mod summary;
pub mod timeline;
pub mod trajectory;
pub mod upgrade;
pub mod usage;
pub mod verify;
pub mod vocabulary;
pub mod writer;

/// Something the user named does not exist (a profile, session, plugin or file); exit code 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFound(pub String);

/// `text` on one line (whitespace runs folded to one space), cut to `max_chars` characters with
/// `…` after a cut.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match folded.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &folded[..cut]),
        None => folded,
    }
}
