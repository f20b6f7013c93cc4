//! The durable session log: the single source of truth from which retry budgets, resume
//! decisions and verification are derived.

pub mod index;
pub mod log;
pub mod reader;
pub mod structure;
pub mod timeline;
pub mod verify;
