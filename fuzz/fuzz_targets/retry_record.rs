//! Checks arbitrary text as a retry decision's record both ways: the host's one-pass reading must
//! answer exactly as serde_json's reading does (the same fields, compact text and message).
#![no_main]

use dsh_abi::retry::{check_decision, check_decision_by_serde};
use dsh_abi::RetryDecision;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    for delay_ms in [0.0, 500.0] {
        let decision = RetryDecision { delay_ms, record: text.into() };
        assert_eq!(check_decision(&decision), check_decision_by_serde(&decision));
    }
});
