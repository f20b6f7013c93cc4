//! Reads arbitrary header values as server wait hints: see [`dsh_e2e::fuzz::retry_after`], which the suite also runs over this target's seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| dsh_e2e::fuzz::retry_after(text));
