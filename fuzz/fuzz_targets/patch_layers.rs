//! Parses arbitrary text as a patch layer: see [`dsh_e2e::fuzz::patch_layers`], which the suite also runs over this target's seed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| dsh_e2e::fuzz::patch_layers(text));
