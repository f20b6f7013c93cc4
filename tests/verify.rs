//! `dsh session verify` through the real binary and the real invariant cdylib: DeepSeek Harness
//! logs (plain and zstd with packed chunk rows), every invariant vector as a log file, damaged
//! logs, and lookup by session id.

use std::path::PathBuf;

use dsh_e2e::{workspace_root, TestHome};
use serde_json::Value;

fn dsh_logs() -> Vec<PathBuf> {
    let dir = workspace_root().join("tests/fixtures/conformance/dsh-logs");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    logs.sort();
    logs
}

const HEADER: &str = "{\"type\":\"session\",\"version\":0,\"id\":\"t\",\"createdAt\":1,\"delegationDepth\":0}\n";

fn event(seq: u64, event_type: &str, data: &str) -> String {
    format!("{{\"type\":\"{event_type}\",\"seq\":{seq},\"time\":{},\"data\":{data}}}\n", 1000 + seq)
}

#[test]
fn deepseek_harness_logs_verify() {
    let home = TestHome::new();
    let logs = dsh_logs();
    assert_eq!(logs.len(), 3);
    let run = dsh_e2e::Run::of(home.dsh().args(["session", "verify"]).args(&logs));
    run.expect_code(0);
    assert!(run.stderr.contains("verified 3 logs (71 events): 0 violations"), "{}", run.stderr);
    assert!(!home.path().join("profiles").exists(), "verify never creates a profile");
}

#[test]
fn every_invariant_vector_is_reported_with_its_seq_and_message() {
    let home = TestHome::new();
    let path = workspace_root().join("tests/fixtures/conformance/invariant/vectors.json");
    let vectors: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let files: Vec<PathBuf> = vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let mut text = HEADER.to_owned();
            for event in vector["events"].as_array().unwrap() {
                text.push_str(&serde_json::to_string(event).unwrap());
                text.push('\n');
            }
            home.write(&format!("vector-{index:02}.jsonl"), &text)
        })
        .collect();
    let run = dsh_e2e::Run::of(home.dsh().args(["session", "verify", "--json"]).args(&files));
    let reports: Vec<Value> = serde_json::from_str(&run.stdout).unwrap_or_else(|err| panic!("{err}: {}", run.stderr));
    let mut failures = Vec::new();
    for (vector, report) in vectors.iter().zip(&reports) {
        let found: Vec<(u64, &str)> = report["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|violation| (violation["seq"].as_u64().unwrap(), violation["message"].as_str().unwrap()))
            .collect();
        let expect = &vector["expect"];
        let fine = if expect["ok"] == true {
            found.is_empty()
        } else {
            found.contains(&(expect["seq"].as_u64().unwrap(), expect["message"].as_str().unwrap()))
        };
        if !fine {
            failures.push(format!("{}: {found:?}", vector["name"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    run.expect_code(5);
}

#[test]
fn every_violation_is_printed_as_path_seq_message() {
    let home = TestHome::new();
    let log = home.write(
        "bad.jsonl",
        &format!(
            "{HEADER}{}{}{}",
            event(0, "step/start", r#"{"turn":1,"step":1}"#),
            event(1, "turn/start", r#"{"turn":1}"#),
            event(3, "llm/retry-started", r#"{"retryId":"r","turn":1,"step":1,"retry":1}"#)
        ),
    );
    let run = home.run(&["session", "verify", log.to_str().unwrap()]);
    run.expect_code(5);
    let path = log.display();
    assert_eq!(
        run.stdout,
        format!(
            "{path}:0: step/start outside an open turn\n{path}:3: seq 3 where 2 was expected\n{path}:3: llm/retry-started pairs no prior scheduled attempt\n"
        )
    );
}

#[test]
fn a_torn_last_line_is_a_note_not_a_violation() {
    let home = TestHome::new();
    let log = home.write(
        "torn.jsonl",
        &format!("{HEADER}{}{{\"type\":\"turn/end\",\"se", event(0, "turn/start", r#"{"turn":1}"#)),
    );
    let run = home.run(&["session", "verify", log.to_str().unwrap()]);
    run.expect_code(0);
    assert!(run.stderr.contains("note: line 3 (byte"), "{}", run.stderr);
    assert!(run.stderr.contains("torn last line"), "{}", run.stderr);
}

#[test]
fn a_corrupt_middle_line_is_reported_with_its_line_and_offset_and_later_events_are_still_checked() {
    let home = TestHome::new();
    let first = event(0, "turn/start", r#"{"turn":1}"#);
    let log =
        home.write("corrupt.jsonl", &format!("{HEADER}{first}\0\0\0\0\0\n{}", event(1, "turn/start", r#"{"turn":2}"#)));
    let run = home.run(&["session", "verify", log.to_str().unwrap()]);
    run.expect_code(5);
    let offset = HEADER.len() + first.len();
    assert!(
        run.stdout.contains(&format!("{}:line 3 (byte {offset}): a run of 5 NUL bytes", log.display())),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(":1: turn/start for turn 2 while turn 1 is open"), "{}", run.stdout);
}

#[test]
fn a_session_is_found_by_id_under_the_home() {
    let home = TestHome::new();
    let log = dsh_logs().into_iter().find(|path| path.to_str().unwrap().ends_with("smoke-success.jsonl")).unwrap();
    std::fs::create_dir_all(home.path().join("sessions/abc")).unwrap();
    std::fs::copy(log, home.path().join("sessions/abc/session.jsonl")).unwrap();
    home.run(&["session", "verify", "abc"]).expect_code(0);
    let missing = home.run(&["session", "verify", "nope"]);
    missing.expect_code(3);
    assert!(missing.stderr.contains("nope: no such log file, and no session of that id"), "{}", missing.stderr);
}

/// A log of one turn and step routed to `mock`, then each `(llm/retry, llm/retry-started)` pair.
fn retry_log(turn_start: &str, step_start: &str, provider: &str, records: &[(&str, &str)]) -> String {
    let header = format!(r#"{{"header":{{"config":{{"provider":{provider},"model":"m"}}}}}}"#);
    let mut text = format!(
        "{HEADER}{}{}{}",
        event(0, "turn/start", turn_start),
        event(1, "step/start", step_start),
        event(2, "request/header", &header)
    );
    for (index, (record, started)) in records.iter().enumerate() {
        text.push_str(&event(3 + 2 * index as u64, "llm/retry", record));
        text.push_str(&event(4 + 2 * index as u64, "llm/retry-started", started));
    }
    text
}

/// [`retry_log`] in turn 1, step 1, routed to `mock`.
fn in_step_one(records: &[(&str, &str)]) -> String {
    retry_log(r#"{"turn":1}"#, r#"{"turn":1,"step":1}"#, "\"mock\"", records)
}

const RECORD: &str = r#"{"retryId":"c","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"k","retry":1,"maxRetries":2,"delayMs":1,"failure":{"message":"m","code":"SERVER"}}"#;
const STARTED: &str = r#"{"retryId":"c","turn":1,"step":1,"retry":1}"#;

/// `dsh session verify` over one log: its exit code and the lines it printed (paths cut off).
fn verify_one(home: &TestHome, name: &str, text: &str) -> (Option<i32>, Vec<String>) {
    let log = home.write(name, text);
    let run = home.run(&["session", "verify", log.to_str().unwrap()]);
    let prefix = format!("{}:", log.display());
    let lines = run.stdout.lines().map(|line| line.strip_prefix(&prefix).unwrap_or(line).to_owned()).collect();
    (run.code, lines)
}

#[test]
fn numbers_are_read_exactly_so_values_that_only_round_to_valid_ones_are_refused() {
    let home = TestHome::new();
    for (name, from, to, expected) in [
        (
            "delay",
            "\"delayMs\":1",
            "\"delayMs\":2147483647.0000002",
            "3: llm/retry delayMs must be a finite number within 0..2147483647",
        ),
        (
            "max-retries",
            "\"maxRetries\":2",
            "\"maxRetries\":4503599627370495.5",
            "3: llm/retry retry 1 must not exceed a positive safe maxRetries 4503599627370495.5",
        ),
        (
            "status",
            "\"code\":\"SERVER\"",
            "\"code\":\"SERVER\",\"status\":99.99999999999999",
            "3: llm/retry failure.status must be an integer from 100 through 599 when present",
        ),
        (
            "retry",
            "\"retry\":1,",
            "\"retry\":0.9999999999999999,",
            "3: llm/retry retry must be a positive safe integer",
        ),
    ] {
        let record = RECORD.replace(from, to);
        let (code, lines) = verify_one(&home, &format!("{name}.jsonl"), &in_step_one(&[(&record, STARTED)]));
        assert_eq!((code, lines), (Some(5), vec![expected.to_owned()]), "{name}");
    }
}

#[test]
fn lone_surrogate_escapes_are_kept_and_compared_as_javascript_does() {
    let home = TestHome::new();
    let message = RECORD.replace("\"message\":\"m\"", r#""message":"busy \ud83d""#);
    let id = RECORD.replace("\"retryId\":\"c\"", r#""retryId":"r\ud83d""#);
    let second = id.replace("\"retry\":1,", "\"retry\":2,");
    let started = |retry: u32| format!(r#"{{"retryId":"r\ud83d","turn":1,"step":1,"retry":{retry}}}"#);
    let text = in_step_one(&[(&message, STARTED)]);
    assert_eq!(verify_one(&home, "message.jsonl", &text), (Some(0), vec![]));
    let text = in_step_one(&[(&id, &started(1)), (&second, &started(2))]);
    assert_eq!(verify_one(&home, "id.jsonl", &text), (Some(0), vec![]));
    let other = started(1).replace(r"\ud83d", r"\ud83e");
    let text = in_step_one(&[(&id, &other)]);
    assert_eq!(
        verify_one(&home, "other.jsonl", &text),
        (Some(5), vec!["4: llm/retry-started pairs no prior scheduled attempt".to_owned()])
    );
}

#[test]
fn missing_and_null_values_print_as_the_reference_prints_them() {
    let home = TestHome::new();
    let no_turn = RECORD.replace("\"turn\":1,", "");
    let started = STARTED.replace("\"turn\":1,", "");
    let text = retry_log("{}", r#"{"step":1}"#, "\"mock\"", &[(&no_turn, &started)]);
    let (_, lines) = verify_one(&home, "no-turn.jsonl", &text);
    assert!(!lines.iter().any(|line| line.contains("llm/retry")), "undefined equals undefined: {lines:?}");
    assert!(lines.iter().all(|line| !line.contains("null")), "{lines:?}");
    let text = retry_log(r#"{"turn":1}"#, r#"{"turn":1}"#, "\"mock\"", &[(RECORD, STARTED)]);
    let (_, lines) = verify_one(&home, "no-step.jsonl", &text);
    assert!(
        lines.contains(&"3: llm/retry names turn 1/step 1, but the open step is 1/undefined".to_owned()),
        "{lines:?}"
    );
    let text = retry_log(r#"{"turn":1}"#, r#"{"turn":1,"step":1}"#, "null", &[(RECORD, STARTED)]);
    assert_eq!(
        verify_one(&home, "null-provider.jsonl", &text),
        (Some(5), vec!["3: llm/retry provider mock does not match the failed request provider null".to_owned()])
    );
}

#[test]
fn one_corrupted_record_is_one_line() {
    let home = TestHome::new();
    let started = |retry: u32| STARTED.replace("\"retry\":1", &format!("\"retry\":{retry}"));
    let (second, third) =
        (RECORD.replace("\"retry\":1,", "\"retry\":2,"), RECORD.replace("\"retry\":1,", "\"retry\":3,"));
    let third = third.replace("\"maxRetries\":2", "\"maxRetries\":5");
    for (name, corrupted) in [
        ("retry-id", second.replace("\"retryId\":\"c\"", "\"retryId\":\"\"")),
        ("turn", second.replace("\"turn\":1", "\"turn\":7")),
        ("provider", second.replace("\"provider\":\"mock\"", "\"provider\":\"other\"")),
        ("policy-key", second.replace("\"policyKey\":\"k\"", "\"policyKey\":\"\"")),
        ("failure", second.replace("\"code\":\"SERVER\"", "\"code\":5")),
        ("delay", second.replace("\"delayMs\":1", "\"delayMs\":-1")),
    ] {
        let text = in_step_one(&[(RECORD, &started(1)), (&corrupted, &started(2)), (&third, &started(3))]);
        let (code, lines) = verify_one(&home, &format!("{name}.jsonl"), &text);
        assert_eq!(code, Some(5), "{name}");
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        assert!(lines[0].starts_with("5: "), "{name}: {lines:?}");
    }
}

/// A log dsh wrote (real policy keys, a chain of two retries) with one field of its first retry
/// record corrupted: `verify` prints exactly one message, as the reference does.
#[test]
fn one_bad_record_in_a_real_log_gives_exactly_one_message() {
    // The llm-retry-invariant plugin's messages on a v0 log (v4's rules, which follow a whole
    // chain, are tested in format_v4).
    let home = TestHome::v0();
    let run = home.run(&["run", "--profile", "demo", "Say hello"]);
    run.expect_code(0);
    let log = dsh_e2e::only_session_log(&home).expect("the demo log");
    let text = std::fs::read_to_string(&log).unwrap();
    for (field, bad, message) in [
        ("retryId", Value::from(""), "llm/retry retryId must be a non-empty string"),
        (
            "delayMs",
            serde_json::json!(2147483647.0000002),
            "llm/retry delayMs must be a finite number within 0..2147483647",
        ),
    ] {
        let mut corrupted = false;
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                let mut event: Value = serde_json::from_str(line).unwrap();
                if event["type"] == "llm/retry" && !corrupted {
                    corrupted = true;
                    event["data"][field] = bad.clone();
                }
                serde_json::to_string(&event).unwrap()
            })
            .collect();
        let (code, found) = verify_one(&home, field, &(lines.join("\n") + "\n"));
        assert_eq!(code, Some(5));
        assert_eq!(found.len(), 1, "{field}: {found:?}");
        assert!(found[0].ends_with(message), "{field}: {found:?}");
    }
}

#[test]
fn replay_of_a_log_only_the_retry_invariant_rejects_says_so_and_replays_it() {
    let home = TestHome::new();
    let record = RECORD.replace("\"retry\":1,", "\"retry\":0.9999999999999999,");
    let log = home.write("invariant.jsonl", &in_step_one(&[(&record, STARTED)]));
    let replay = home.run(&["session", "replay", log.to_str().unwrap()]);
    replay.expect_code(0).expect_stderr(&format!(
        "dsh: {} fails dsh session verify (1 violation, the first: llm/retry retry must be a positive safe integer); \
         replaying what it holds",
        log.display()
    ));
}
