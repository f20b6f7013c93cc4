//! End-to-end tests: the real `dsh` binary and real plugin libraries. One test binary, one module
//! per part.

mod inspect;
mod waterfall;
