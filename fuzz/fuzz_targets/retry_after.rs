//! Reads arbitrary header values as server wait hints: no panic, and a hint is always positive
//! and finite.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use dsh_host::llm::retry_after::provider_retry_after_ms;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let mut values = text.splitn(3, '\n');
    let (ms, after, date) = (values.next(), values.next(), values.next());
    let now = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    if let Some(hint) = provider_retry_after_ms(ms, after, date, now) {
        assert!(hint.is_finite() && hint > 0.0);
    }
});
