//! End-to-end tests: the real `dsh` binary and real plugin libraries. One test binary, one module
//! per part.

mod conformance_invariant;
mod conformance_llm_retry;
mod fallback;
mod inspect;
mod plugin_packages;
mod profiles;
mod relay;
mod repair;
mod runtime;
mod verify;
mod waterfall;
