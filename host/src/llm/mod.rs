//! Model providers: provider row configs, provider-owned retry policies, and the mock server's
//! script format.

pub mod config;
pub mod mock;
pub mod policy;
