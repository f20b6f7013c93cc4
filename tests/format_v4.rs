//! Session format v4, the logs DeepSeek Harness 0.2 writes: the real 0.2.1-rc.2's logs (recorded
//! into `tests/fixtures/v4/`, see its RECORDING.md) are imported, verified, shown, listed,
//! replayed and exported unchanged; a log breaking one of v4's rules is refused at its line;
//! a newer format is refused naming its version.

use std::path::{Path, PathBuf};

use dsh_e2e::{workspace_root, Run, TestHome};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures/v4").join(name)
}

/// The logs 0.2.1-rc.2 wrote itself (the `refused-*` and `*-source` inputs are dsh's v0 logs).
const RECORDED: [&str; 13] = [
    "continued-session",
    "continued-session.turn1",
    "killed-in-retry-wait.before",
    "killed-in-retry-wait.repaired",
    "migration-dsh-v0-migrated",
    "migration-reference-v0-rate-limit-migrated",
    "plain-success",
    "plain-success-full-profile",
    "retries-exhausted",
    "retry-503-429-success",
    "tool-call-error",
    "tool-call-read",
    "truncated-stream-retry",
];

fn session_of(log: &str) -> String {
    let header = std::fs::read_to_string(fixture(log)).unwrap();
    let header: Value = serde_json::from_str(header.lines().next().unwrap()).unwrap();
    header["id"].as_str().unwrap().to_owned()
}

#[test]
fn every_log_deepseek_harness_0_2_wrote_verifies_clean_plain_and_compressed() {
    let home = TestHome::new();
    for name in RECORDED {
        for file in [format!("{name}.jsonl"), format!("{name}.jsonl.zstd")] {
            let path = fixture(&file);
            if !path.exists() {
                continue;
            }
            let run = home.run(&["session", "verify", path.to_str().unwrap()]);
            run.expect_code(0).expect_stderr("0 violations");
        }
    }
}

#[test]
fn an_imported_v4_log_keeps_its_format_and_exports_byte_for_byte() {
    let home = TestHome::new();
    for name in ["retry-503-429-success", "tool-call-read", "killed-in-retry-wait.repaired"] {
        let run = home.run(&["session", "import", fixture(&format!("{name}.jsonl.zstd")).to_str().unwrap()]);
        run.expect_code(0);
        let id = session_of(&format!("{name}.jsonl"));
        let kept = home.path().join("sessions").join(&id).join("session.v4.jsonl");
        assert!(kept.is_file(), "a v4 log is kept under its generation's name: {run}");
        let exported = home.run(&["session", "export", &id]);
        exported.expect_code(0);
        assert_eq!(exported.stdout, std::fs::read_to_string(fixture(&format!("{name}.jsonl"))).unwrap(), "{name}");
    }
}

#[test]
fn an_imported_v4_session_shows_its_retries_tools_and_system_prompt() {
    let home = TestHome::new();
    for name in ["retry-503-429-success", "tool-call-error"] {
        home.run(&["session", "import", fixture(&format!("{name}.jsonl")).to_str().unwrap()]).expect_code(0);
    }
    let retried = home.run(&["session", "show", &session_of("retry-503-429-success.jsonl")]);
    retried
        .expect_code(0)
        .expect_stdout("    system prompt: You are an AI agent powered by DeepSeek Harness.")
        .expect_stdout("    failed attempt · SERVER · 503 status code (no body)\n    retry 1/5 · SERVER · 0.5s")
        .expect_stdout("    failed attempt · RATE_LIMIT · 429 status code (no body)\n    retry 2/5 · RATE_LIMIT")
        .expect_stdout("    assistant: Recovered after two failures.\n  end of step 1\nturn 1 completed");
    let tools = home.run(&["session", "show", &session_of("tool-call-error.jsonl")]);
    tools.expect_code(0).expect_stdout(
        "    tool result (call_1_1) · error FS_NOT_FOUND · Error: cannot read \"/tmp/dshref-cwd/missing.txt\"",
    );
    let list = home.run(&["session", "list"]);
    list.expect_code(0);
    assert!(list.stdout.lines().filter(|line| line.contains("1 turn  completed")).count() == 2, "{list}");
}

#[test]
fn replaying_a_v4_session_reproduces_its_recorded_attempts_and_waits() {
    let home = TestHome::new();
    for name in ["retry-503-429-success", "retries-exhausted"] {
        home.run(&["session", "import", fixture(&format!("{name}.jsonl")).to_str().unwrap()]).expect_code(0);
    }
    let replay = |name: &str| -> Value {
        let run = home.run(&["session", "replay", "--json", &session_of(&format!("{name}.jsonl"))]);
        run.expect_code(0);
        serde_json::from_str(run.stdout.lines().next().unwrap()).unwrap()
    };
    let recovered = replay("retry-503-429-success");
    assert_eq!(recovered["recorded"]["attempts"], 3);
    assert_eq!(recovered["recorded"]["outcome"], "completed");
    assert_eq!(recovered["recorded"]["waitsMs"].as_array().unwrap().len(), 2);
    let exhausted = replay("retries-exhausted");
    assert_eq!(exhausted["recorded"]["attempts"], 6);
    assert_eq!(exhausted["recorded"]["waitsMs"].as_array().unwrap().len(), 5);
    assert_ne!(exhausted["recorded"]["outcome"], "completed");
}

/// A copy of a recorded log with `change` applied to its events; events it drops are
/// renumbered, and the citations of those after them follow.
fn mutant(home: &TestHome, name: &str, out: &str, change: impl Fn(&mut Vec<Value>)) -> PathBuf {
    let text = std::fs::read_to_string(fixture(&format!("{name}.jsonl"))).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().to_owned();
    let mut events: Vec<Value> = lines.map(|line| serde_json::from_str(line).unwrap()).collect();
    change(&mut events);
    let mut renumbered = Renumbering::default();
    for (seq, event) in events.iter_mut().enumerate() {
        renumbered.0.push((event["seq"].as_u64().unwrap(), seq as u64));
        event["seq"] = seq.into();
    }
    for event in &mut events {
        if let Some(sources) = event.get_mut("sourceEventSeqs").and_then(Value::as_array_mut) {
            for source in sources.iter_mut().filter(|source| source.is_u64()) {
                *source = renumbered.get(source.as_u64().unwrap()).into();
            }
        }
    }
    let body: Vec<String> = events.iter().map(|event| serde_json::to_string(event).unwrap()).collect();
    home.write(out, &format!("{header}\n{}\n", body.join("\n")))
}

#[derive(Default)]
struct Renumbering(Vec<(u64, u64)>);

impl Renumbering {
    fn get(&self, old: u64) -> u64 {
        self.0.iter().find(|(from, _)| *from == old).map_or(old, |(_, to)| *to)
    }
}

fn first_of_type<'a>(events: &'a mut [Value], event_type: &str, nth: usize) -> &'a mut Value {
    events.iter_mut().filter(|event| event["type"] == event_type).nth(nth).unwrap()
}

fn refused_at(home: &TestHome, log: &Path, place: &str) -> Run {
    let run = home.run(&["session", "verify", log.to_str().unwrap()]);
    run.expect_code(5);
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(first.contains(place), "the first violation is at {place}: {run}");
    run
}

#[test]
fn a_v4_log_breaking_one_rule_is_refused_at_its_line_with_the_reference_s_words() {
    let home = TestHome::new();
    let no_call = mutant(&home, "tool-call-read", "no-call.jsonl", |events| {
        events.retain(|event| event["type"] != "tool/call");
    });
    refused_at(&home, &no_call, ":14: ").expect_stdout("which never started, and is not the TOOL_NOT_STARTED repair");
    let no_result = mutant(&home, "tool-call-read", "no-result.jsonl", |events| {
        events.retain(|event| event["type"] != "tool/result");
    });
    refused_at(&home, &no_result, ":15: ").expect_stdout("step/end 15 leaves tool call \"call_1_1\" unresolved");
    let other_arguments = mutant(&home, "tool-call-read", "arguments.jsonl", |events| {
        first_of_type(events, "tool/call", 0)["data"]["arguments"] = "{\"file_path\": \"note.txt\"}".into();
    });
    refused_at(&home, &other_arguments, ":14: ").expect_stdout("does not match exactly one advertised tool call");
    let skipped = mutant(&home, "retry-503-429-success", "skipped.jsonl", |events| {
        first_of_type(events, "llm/retry", 1)["data"]["retry"] = 3.into();
    });
    refused_at(&home, &skipped, ":17: ").expect_stdout("llm/retry retry must be 2 in its chain");
    let system_in_header = mutant(&home, "plain-success", "system.jsonl", |events| {
        first_of_type(events, "request/header", 0)["data"]["header"]["system"] = "be brief".into();
    });
    refused_at(&home, &system_in_header, ":10: ").expect_stdout("must omit header.system; use system/message");
    let unplaced = mutant(&home, "plain-success", "unplaced.jsonl", |events| {
        first_of_type(events, "user/message", 0).as_object_mut().unwrap().remove("surfaceOp");
    });
    refused_at(&home, &unplaced, ":8: ")
        .expect_stdout("session event \"user/message\" is surface-eligible and requires a surfaceOp marker");
    let import = home.run(&["session", "import", no_call.to_str().unwrap()]);
    import.expect_code(5);
    assert!(!home.path().join("sessions").exists(), "a refused log is not imported: {import}");
}

#[test]
fn a_log_of_a_newer_format_is_refused_naming_its_version_and_nothing_is_imported() {
    let home = TestHome::new();
    let text = std::fs::read_to_string(fixture("plain-success.jsonl")).unwrap();
    let newer = home.write("newer.jsonl", &text.replacen("\"version\":4", "\"version\":5", 1));
    let verify = home.run(&["session", "verify", newer.to_str().unwrap()]);
    assert_ne!(verify.code, Some(0), "{verify}");
    verify.expect_stderr("it uses session format v5, newer than dsh knows (it reads v0 and v4)");
    let import = home.run(&["session", "import", newer.to_str().unwrap()]);
    assert_ne!(import.code, Some(0), "{import}");
    import.expect_stderr("session format v5, newer than dsh knows");
    assert!(!home.path().join("sessions").exists(), "nothing was imported: {import}");
}
