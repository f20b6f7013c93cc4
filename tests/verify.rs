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
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
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
    assert_eq!(run.code, Some(5), "failing vectors make verify exit 5");
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
    assert_eq!(run.code, Some(5));
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
    assert_eq!(run.code, Some(0), "{}", run.stdout);
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
    assert_eq!(run.code, Some(5));
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
    assert_eq!(home.run(&["session", "verify", "abc"]).code, Some(0));
    let missing = home.run(&["session", "verify", "nope"]);
    assert_eq!(missing.code, Some(3));
    assert!(missing.stderr.contains("nope: no such log file, and no session of that id"), "{}", missing.stderr);
}
