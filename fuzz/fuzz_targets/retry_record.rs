//! Checks arbitrary text as a retry record both ways: see [`dsh_e2e::fuzz::retry_record`], which the suite also runs over this target's seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| dsh_e2e::fuzz::retry_record(text));
