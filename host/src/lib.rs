//! The `dsh` agent host.
//!
//! | module | owns |
//! |---|---|
//! | [`plugin`] | loading cdylib plugins through the stable ABI, inspecting them, row instances |
//! | [`waterfall`] | the ordered `agent/request-error` listener chain and its final decision |
//! | [`context`] | what plugins may ask the host during a call; clock, randomness and ids |
//! | [`session`] | the durable session log and the history index plugins query |
//! | [`cli`] | the `dsh` command line |

pub mod cli;
pub mod context;
pub mod plugin;
pub mod session;
pub mod waterfall;
