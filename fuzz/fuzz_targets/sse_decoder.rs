//! Feeds arbitrary bytes to the SSE decoder: see [`dsh_e2e::fuzz::sse_decoder`], which the suite also runs over this target's seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsh_e2e::fuzz::sse_decoder(data));
