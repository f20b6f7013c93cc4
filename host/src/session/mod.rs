//! The durable session log: the single source of truth from which retry budgets, resume
//! decisions and verification are derived.
//!
//! | module | owns |
//! |---|---|
//! | [`vocabulary`] | the event types both the writer and the verifier know |
//! | [`reader`], [`read_ahead`] | reading logs as a stream (ours and DeepSeek Harness's, plain and zstd) |
//! | [`structure`] | the session structure rules |
//! | [`gate`] | the one check every event passes: structure rules, then checker plugins |
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

pub mod gate;
pub mod import;
pub mod index;
pub mod locate;
pub mod log;
pub mod meta;
pub mod read_ahead;
pub mod reader;
pub mod repair;
pub mod state;
pub mod store;
pub mod structure;
pub mod summary;
pub mod timeline;
pub mod verify;
pub mod vocabulary;
pub mod writer;
