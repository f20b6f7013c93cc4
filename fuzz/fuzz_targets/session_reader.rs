//! Reads arbitrary bytes as a session log: see [`dsh_e2e::fuzz::session_reader`], which the suite also runs over this target's seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsh_e2e::fuzz::session_reader(data));
