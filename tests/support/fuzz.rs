//! What each cargo-fuzz target (`fuzz/fuzz_targets/`) checks, one function per target. The fuzz
//! crate is built on its own by `cargo fuzz` and only calls these; the suite runs each over its
//! committed seed corpus (`fuzz/corpus/<target>/`) in the workspace's own build, so a target that
//! no longer holds — or no longer compiles — fails `cargo test`, not a later fuzzing run.

use std::io::Cursor;
use std::time::{Duration, UNIX_EPOCH};

use dsh_abi::retry::{check_decision, check_decision_by_serde};
use dsh_abi::RetryDecision;
use dsh_host::llm::retry_after::provider_retry_after_ms;
use dsh_host::llm::sse::SseDecoder;
use dsh_host::profile::patch::{compose, Layer};
use dsh_session::reader::LogReader;
use dsh_session::structure::{GateEvent, StructureRules};

/// A target's check, taking the fuzzer's bytes.
pub type Check = fn(&[u8]);

/// Every target by its name in `fuzz/Cargo.toml`. Targets declared over text skip input that is
/// not UTF-8, as libFuzzer's `&str` targets do.
pub const TARGETS: &[(&str, Check)] = &[
    ("patch_layers", |bytes| on_text(bytes, patch_layers)),
    ("retry_after", |bytes| on_text(bytes, retry_after)),
    ("retry_record", |bytes| on_text(bytes, retry_record)),
    ("session_reader", session_reader),
    ("sse_decoder", sse_decoder),
];

fn on_text(bytes: &[u8], check: fn(&str)) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        check(text);
    }
}

/// Parses text as a patch layer and composes it over the base bundle and itself: no input may
/// panic, and composition must stay deterministic.
pub fn patch_layers(text: &str) {
    let base = Layer::parse("base", "base", "[{insert: [{id: a, name: a, group: true}, {id: b, name: b}]}]")
        .expect("a valid base");
    if let Ok(layer) = Layer::parse("fuzz", "fuzz.yml", text) {
        let layers = [base, layer.clone(), layer];
        let first = compose(Vec::new(), "cordis.yml", &layers);
        assert_eq!(first, compose(Vec::new(), "cordis.yml", &layers));
        let _ = first.enabled_rows();
    }
}

/// Reads three lines as server wait hints (`retry-after-ms`, `retry-after`, `date`): no panic,
/// and a hint is always positive and finite.
pub fn retry_after(text: &str) {
    let mut values = text.splitn(3, '\n');
    let (ms, after, date) = (values.next(), values.next(), values.next());
    let now = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    if let Some(hint) = provider_retry_after_ms(ms, after, date, now) {
        assert!(hint.is_finite() && hint > 0.0);
    }
}

/// Checks text as a retry decision's record both ways: the host's one-pass reading must answer
/// exactly as serde_json's reading does (the same fields, compact text and message).
pub fn retry_record(text: &str) {
    for delay_ms in [0.0, 500.0] {
        let decision = RetryDecision { delay_ms, record: text.into() };
        assert_eq!(check_decision(&decision), check_decision_by_serde(&decision));
    }
}

/// Reads bytes as a session log of each format (with a valid header in front), running every
/// event through that format's rules: no panic, and damage is reported, never skipped.
pub fn session_reader(data: &[u8]) {
    for header in [
        "{\"type\":\"session\",\"version\":0,\"id\":\"f\",\"createdAt\":1,\"delegationDepth\":0}\n",
        "{\"type\":\"session\",\"version\":4,\"id\":\"f\",\"createdAt\":1,\"isSeeded\":false,\"delegationDepth\":0}\n",
    ] {
        let mut log = header.as_bytes().to_vec();
        log.extend_from_slice(data);
        let Ok(mut reader) = LogReader::new(Box::new(Cursor::new(log))) else { return };
        let mut rules = StructureRules::new(reader.format());
        let mut violations = Vec::new();
        while let Some(next) = reader.next_event() {
            if let Ok(Ok(event)) = next {
                rules.check(&GateEvent::from(&event), &mut |rule, message| violations.push((rule, message)));
            }
        }
    }
}

/// Feeds bytes to the SSE decoder, whole and split at a point taken from the input's first byte:
/// no panic, and the split never changes what is decoded.
pub fn sse_decoder(data: &[u8]) {
    let Some((&cut, bytes)) = data.split_first() else { return };
    let decode = |pieces: &[&[u8]]| {
        let mut decoder = SseDecoder::with_limit(4096);
        let mut items = Vec::new();
        let mut result = Ok(());
        for piece in pieces {
            result = result.and_then(|()| decoder.feed(piece, &mut items));
        }
        (items, result)
    };
    let at = usize::from(cut) % (bytes.len() + 1);
    let (whole, whole_result) = decode(&[bytes]);
    let (split, split_result) = decode(&[&bytes[..at], &bytes[at..]]);
    if whole_result.is_ok() && split_result.is_ok() {
        assert_eq!(whole, split);
    }
}
