//! End-to-end tests: the real `dsh` binary and real plugin libraries. One test binary, one module
//! per part.

mod abi_growth;
mod architecture;
mod budget;
mod concurrency;
mod config_matrix;
mod conformance_invariant;
mod conformance_llm_retry;
mod conformance_yaml;
mod contract;
mod daily;
mod edges;
mod failover;
mod fallback;
mod finding;
mod format_v4;
mod hostile;
mod inspect;
mod interop;
mod move_over;
mod plugin_packages;
mod postgres;
mod profiles;
mod relay;
mod repair;
mod replay;
mod runtime;
mod sdk;
mod secrets;
mod tool_effects;
mod tool_safety;
mod tools;
mod torture;
mod verify;
mod waterfall;
mod web;
