//! The agent: its row config and (with the runtime) the turn loop.

pub mod config;
