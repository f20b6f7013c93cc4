//! Hostile providers, through the real binary and `dsh mock-server`: enormous headers, an endless
//! stream, invalid UTF-8, frames split at every byte, and every kind of `Retry-After`. Each is
//! classified, and the process stays bounded in memory.

use dsh_e2e::turns::{route_patch, session_id, Turn, SECRET, TINY};
use dsh_e2e::{log_events, MockProcess, Run, TestHome};
use serde_json::Value;

/// The most memory a turn against a hostile provider may take, in KiB.
const MEMORY_BOUND_KIB: i64 = 256 * 1024;

fn hostile_turn(script: &str, policy: &str) -> (Turn, i64) {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, policy, "");
    let (run, peak) =
        Run::measured(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    let log = home.path().join("sessions").join(session_id(&run)).join("session.jsonl");
    let verify = home.run(&["session", "verify", log.to_str().unwrap()]);
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);
    let events = log_events(&log);
    (Turn { run, log, events }, peak)
}

fn attempt_failures(turn: &Turn) -> Vec<&Value> {
    turn.of_type("assistant/attempt").iter().map(|attempt| &attempt["data"]["failure"]).collect()
}

#[test]
fn ten_megabyte_headers_are_a_transport_failure_in_bounded_memory() {
    let padding = "x".repeat(10 * 1024 * 1024);
    let (turn, peak) = hostile_turn(
        &format!("- status: 503\n  headers: {{x-padding: {padding}}}\n"),
        "{mode: normal, maxRetries: 1, backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}",
    );
    assert_eq!(turn.run.code, Some(1));
    assert_eq!(turn.end()["error"]["code"], "TRANSPORT", "{}", turn.end());
    assert!(peak < MEMORY_BOUND_KIB, "peak RSS {peak} KiB");
}

#[test]
fn an_endless_stream_is_cut_off_in_bounded_memory() {
    let (turn, peak) = hostile_turn("- endless: \"lorem ipsum \"\n", "{mode: normal, maxRetries: 0}");
    assert_eq!(turn.run.code, Some(1));
    assert_eq!(turn.end()["error"]["code"], "UNKNOWN");
    assert!(turn.end()["error"]["message"].as_str().unwrap().contains("sent more than 64 MiB without finishing"));
    assert!(peak < MEMORY_BOUND_KIB, "peak RSS {peak} KiB");
}

#[test]
fn invalid_utf8_is_a_malformed_response() {
    let (turn, _) = hostile_turn("- invalidUtf8: true\n", "{mode: normal, maxRetries: 0}");
    assert_eq!(turn.end()["error"]["code"], "MALFORMED_RESPONSE");
    assert!(turn.end()["error"]["message"].as_str().unwrap().contains("not valid SSE: an SSE line is not valid UTF-8"));
}

#[test]
fn frames_split_at_every_byte_are_reassembled() {
    let text = "Grüße, \u{1F600}! Every byte of this answer arrives on its own.";
    let (turn, _) = hostile_turn(&format!("- ok: \"{text}\"\n  chunkBytes: 1\n"), TINY);
    assert_eq!(turn.run.code, Some(0), "{}", turn.run.stderr);
    assert_eq!(turn.run.stdout.trim_end(), text);
}

#[test]
fn every_kind_of_retry_after_is_classified() {
    let script = "\
- {status: 429, headers: {retry-after: '99999999999'}}
- {status: 429, headers: {retry-after: '-5'}}
- {status: 429, headers: {retry-after: 'Sat, 01 Jan 2000 00:00:00 GMT'}}
- {status: 429, headers: {retry-after: 'soon'}}
- {status: 429, headers: {retry-after: 'Sun, 29 Nov 2026 10:00:01 GMT', date: 'Sun, 29 Nov 2026 10:00:00 GMT'}}
- {status: 429, headers: {retry-after-ms: '12.5', retry-after: '9'}}
- ok: through
";
    let policy = "{mode: always, backoff: {initialDelayMs: 5, maxDelayMs: 2000, jitterRatio: 0}}";
    let (turn, _) = hostile_turn(script, policy);
    assert_eq!(turn.run.code, Some(0), "{}", turn.run.stderr);
    let hints: Vec<Option<f64>> =
        attempt_failures(&turn).iter().map(|failure| failure["providerRetryAfterMs"].as_f64()).collect();
    assert_eq!(hints, [Some(99_999_999_999_000.0), None, None, None, Some(1000.0), Some(12.5)]);
    let delays: Vec<f64> =
        turn.of_type("llm/retry").iter().map(|retry| retry["data"]["delayMs"].as_f64().unwrap()).collect();
    assert_eq!(
        delays,
        [5.0, 10.0, 20.0, 40.0, 1000.0, 12.5],
        "an over-long hint falls back to the local delay in always mode"
    );
}
