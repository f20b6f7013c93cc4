//! Session format v4, the logs DeepSeek Harness 0.2 writes: the real 0.2.1-rc.2's logs (recorded
//! into `tests/fixtures/v4/`, see its RECORDING.md) are imported, verified, shown, listed,
//! replayed and exported unchanged; a log breaking one of v4's rules is refused at its line;
//! a newer format is refused naming its version.

use std::path::{Path, PathBuf};

use dsh_e2e::{of_type, workspace_root, Run, TestHome};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures/v4").join(name)
}

/// The logs 0.2.1-rc.2 wrote itself (the `refused-*` and `*-source` inputs are dsh's v0 logs).
const RECORDED: [&str; 14] = [
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
    "tool-call-read-retried",
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

/// A copy of a recorded log with `change` applied to its events; the events left are renumbered,
/// their citations follow, and citations of dropped events are dropped.
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
        let Some(sources) = event.get("sourceEventSeqs").and_then(Value::as_array) else { continue };
        let kept: Vec<Value> =
            sources.iter().filter_map(|source| renumbered.get(source.as_u64()?)).map(Value::from).collect();
        let envelope = event.as_object_mut().unwrap();
        match kept.is_empty() {
            true => envelope.remove("sourceEventSeqs"),
            false => envelope.insert("sourceEventSeqs".into(), Value::Array(kept)),
        };
    }
    let body: Vec<String> = events.iter().map(|event| serde_json::to_string(event).unwrap()).collect();
    home.write(out, &format!("{header}\n{}\n", body.join("\n")))
}

#[derive(Default)]
struct Renumbering(Vec<(u64, u64)>);

impl Renumbering {
    /// The new seq of the event that had `old`, if it was kept.
    fn get(&self, old: u64) -> Option<u64> {
        self.0.iter().find(|(from, _)| *from == old).map(|(_, to)| *to)
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
    refused_at(&home, &no_call, ":14: ").expect_stdout(":14: not-started error requires an object");
    let no_result = mutant(&home, "tool-call-read", "no-result.jsonl", |events| {
        events.retain(|event| event["type"] != "tool/result");
    });
    refused_at(&home, &no_result, ":15: ").expect_stdout(":15: step/end leaves unresolved tool call call_1_1");
    let other_arguments = mutant(&home, "tool-call-read", "arguments.jsonl", |events| {
        first_of_type(events, "tool/call", 0)["data"]["arguments"] = "{\"file_path\": \"note.txt\"}".into();
    });
    refused_at(&home, &other_arguments, ":14: ")
        .expect_stdout("tool/call call_1_1 does not match one advertised tool call");
    let skipped = mutant(&home, "retry-503-429-success", "skipped.jsonl", |events| {
        first_of_type(events, "llm/retry", 1)["data"]["retry"] = 3.into();
    });
    refused_at(&home, &skipped, ":17: ").expect_stdout("llm/retry skips its policy attempt sequence");
    let system_in_header = mutant(&home, "plain-success", "system.jsonl", |events| {
        first_of_type(events, "request/header", 0)["data"]["header"]["system"] = "be brief".into();
    });
    refused_at(&home, &system_in_header, ":10: ")
        .expect_stdout("format v4 request/header rejects retired header.system");
    let unplaced = mutant(&home, "plain-success", "unplaced.jsonl", |events| {
        first_of_type(events, "user/message", 0).as_object_mut().unwrap().remove("surfaceOp");
    });
    refused_at(&home, &unplaced, ":8: ").expect_stdout("user/message surfaceOp requires an object");
    let import = home.run(&["session", "import", no_call.to_str().unwrap()]);
    import.expect_code(5);
    assert!(!home.path().join("sessions").exists(), "a refused log is not imported: {import}");
}

#[test]
fn a_missing_or_unexpected_inherited_marker_is_refused_by_verify_and_import_and_only_warns_when_continued() {
    let home = TestHome::new();
    let seeded = home.write("seeded.jsonl", &std::fs::read_to_string(generation("seeded-v4.jsonl")).unwrap());
    home.run(&["session", "verify", seeded.to_str().unwrap()]).expect_code(0);
    let unmarked = mutant(&home, "generations/seeded-v4", "unmarked.jsonl", |events| {
        first_of_type(events, "session/end-seed", 0)["data"] = serde_json::json!({});
    });
    refused_at(&home, &unmarked, ":line 1 (byte 0): ")
        .expect_stdout("released v2 seeded Session lacks an inherited end-seed marker");
    let marked = mutant(&home, "continued-session", "marked.jsonl", |events| {
        first_of_type(events, "session/end-seed", 0)["data"] = serde_json::json!({"inherited": true});
    });
    let marker = events_of(&marked).iter().position(|event| event["type"] == "session/end-seed").unwrap();
    refused_at(&home, &marked, &format!(":{marker}: "))
        .expect_stdout("released v2 unseeded Session contains an inherited end-seed marker");
    let import = home.run(&["session", "import", unmarked.to_str().unwrap()]);
    import.expect_code(5);
    assert!(!home.path().join("sessions").exists(), "a refused log is not imported: {import}");
    let text = std::fs::read_to_string(&unmarked).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let id = header["id"].as_str().unwrap();
    let stored = home.write(&format!("sessions/{id}/session.v4.jsonl"), &text);
    home.run(&["run", "--profile", "demo", "--session", id, "more"]).expect_code(0).expect_stderr(
        "warning: the log already breaks a rule: line 1 (byte 0): released v2 seeded Session lacks an inherited \
             end-seed marker",
    );
    assert!(std::fs::read_to_string(&stored).unwrap().starts_with(&text), "the log is continued, its bytes kept");
}

#[test]
fn a_log_of_a_newer_format_is_refused_naming_its_version_and_nothing_is_imported() {
    let home = TestHome::new();
    let text = std::fs::read_to_string(fixture("plain-success.jsonl")).unwrap();
    let newer = home.write("newer.jsonl", &text.replacen("\"version\":4", "\"version\":5", 1));
    let verify = home.run(&["session", "verify", newer.to_str().unwrap()]);
    assert_ne!(verify.code, Some(0), "{verify}");
    verify.expect_stderr("it uses session format v5, newer than dsh knows (it reads v0 to v4)");
    let import = home.run(&["session", "import", newer.to_str().unwrap()]);
    assert_ne!(import.code, Some(0), "{import}");
    import.expect_stderr("session format v5, newer than dsh knows");
    assert!(!home.path().join("sessions").exists(), "nothing was imported: {import}");
}

fn only_v4_log(home: &TestHome) -> PathBuf {
    let dir = std::fs::read_dir(home.path().join("sessions")).unwrap().next().unwrap().unwrap().path();
    dir.join("session.v4.jsonl")
}

fn events_of(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines().skip(1).map(|line| serde_json::from_str(line).unwrap()).collect()
}

#[test]
fn a_new_session_is_written_in_v4_with_its_prompt_as_a_system_head_and_its_attempts_as_streams() {
    let home = TestHome::v4();
    home.run(&["run", "--profile", "demo", "hi"]).expect_code(0);
    let log = only_v4_log(&home);
    let header: Value = serde_json::from_str(std::fs::read_to_string(&log).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!((&header["version"], &header["isSeeded"]), (&4.into(), &false.into()), "{header}");
    let events = events_of(&log);
    let system = of_type(&events, "system/message");
    assert_eq!(system[0]["surfaceOp"], "append", "an empty head opens the surface: {}", system[0]);
    assert_eq!(system[1]["surfaceOp"]["op"], "replace", "the prompt replaces it: {}", system[1]);
    assert_eq!(system[1]["sourceEventSeqs"], serde_json::json!([system[0]["seq"]]));
    assert!(of_type(&events, "request/header").iter().all(|header| header["data"]["header"].get("system").is_none()));
    let attempts = of_type(&events, "assistant/attempt");
    assert_eq!(attempts.len(), 2, "the demo's 503 and 429");
    let finish = attempts[0]["data"]["stream"].as_array().unwrap().last().unwrap();
    assert_eq!(finish["chunk"]["reason"]["failure"]["code"], "SERVER", "{finish}");
    assert!(attempts.iter().all(|attempt| attempt.get("ignorable").is_none()), "a known type in v4");
    assert_eq!(of_type(&events, "assistant/message")[0]["data"]["stream"], serde_json::json!([]));
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0).expect_stderr("0 violations");
    home.run(&["session", "show", log.to_str().unwrap()])
        .expect_code(0)
        .expect_stdout("    failed attempt · SERVER")
        .expect_stdout("    system prompt: You are an AI agent powered by DeepSeek Harness.");
}

#[test]
fn continuing_an_imported_v4_session_keeps_its_bytes_marks_the_restore_and_writes_v4() {
    let home = TestHome::new();
    let source = fixture("retry-503-429-success.jsonl");
    home.run(&["session", "import", source.to_str().unwrap()]).expect_code(0);
    let id = session_of("retry-503-429-success.jsonl");
    home.run(&["run", "--profile", "demo", "--session", &id, "and again"]).expect_code(0);
    let log = home.path().join("sessions").join(&id).join("session.v4.jsonl");
    let written = std::fs::read_to_string(&log).unwrap();
    let recorded = std::fs::read_to_string(&source).unwrap();
    assert!(written.starts_with(&recorded), "the recorded turn is an exact prefix");
    let events = events_of(&log);
    let first_new = &events[recorded.lines().count() - 1];
    assert_eq!(first_new["type"], "session/end-seed", "{first_new}");
    let prompt = of_type(&events, "system/message").into_iter().last().unwrap();
    assert_eq!(prompt["sourceEventSeqs"], serde_json::json!([7]), "dsh's prompt replaces the recorded head: {prompt}");
    assert_eq!(of_type(&events, "turn/end").len(), 2);
    home.run(&["session", "verify", &id]).expect_code(0).expect_stderr("0 violations");
}

#[test]
fn a_v4_turn_cut_mid_tool_call_is_closed_with_the_reference_s_repair_results() {
    let home = TestHome::new();
    for (cut_after, code) in [("assistant/message", "TOOL_NOT_STARTED"), ("tool/call", "TOOL_OUTCOME_UNKNOWN")] {
        let name = format!("cut-after-{}.jsonl", cut_after.replace('/', "-"));
        let cut = mutant(&home, "tool-call-read", &name, |events| {
            let at = events.iter().position(|event| event["type"] == cut_after).unwrap();
            events.truncate(at + 1);
        });
        let repair = home.run(&["session", "repair", cut.to_str().unwrap()]);
        repair.expect_code(0);
        let events = events_of(&cut);
        let result = of_type(&events, "tool/result")[0];
        assert_eq!(result["data"]["error"]["code"], code, "{result}");
        assert_eq!(result["data"]["message"]["role"], "tool", "{result}");
        let closers: Vec<&Value> = events.iter().rev().take(2).collect();
        assert_eq!(
            (&closers[1]["type"], &closers[0]["data"]["reason"]["kind"]),
            (&"step/end".into(), &"interrupted".into())
        );
        home.run(&["session", "verify", cut.to_str().unwrap()]).expect_code(0).expect_stderr("0 violations");
    }
}

#[test]
fn the_home_can_keep_writing_format_v0_and_a_bad_format_is_named_with_its_file_and_key() {
    let home = TestHome::v4();
    home.write("sessions.toml", "format = \"v0\"\n");
    let run = Run::of(home.dsh().env_remove("DSH_SESSION_FORMAT").args(["run", "--profile", "demo", "hi"]));
    run.expect_code(0);
    let dir = std::fs::read_dir(home.path().join("sessions")).unwrap().next().unwrap().unwrap().path();
    assert!(dir.join("session.jsonl").is_file(), "a v0 log: {run}");
    home.write("sessions.toml", "format = \"v3\"\n");
    let refused = Run::of(home.dsh().env_remove("DSH_SESSION_FORMAT").args(["run", "--profile", "demo", "hi"]));
    assert_ne!(refused.code, Some(0));
    refused.expect_stderr("sessions.toml: key format: \"v3\" is not a format dsh writes");
}

/// The lines of the reference's migrated log before its `session/end-seed` (what it migrated).
fn migrated_head(name: &str) -> String {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let head: Vec<&str> = text.lines().take_while(|line| !line.contains("\"type\":\"session/end-seed\"")).collect();
    head.join("\n") + "\n"
}

#[test]
fn migrating_a_v0_log_writes_the_reference_s_bytes_beside_it_and_keeps_the_original() {
    let home = TestHome::new();
    let rc8_log = workspace_root().join("tests/fixtures/conformance/dsh-logs/rate-limit-2x-packed-zstd.jsonl.zstd");
    for (source, file, reference) in [
        (fixture("migration-dsh-v0-source.jsonl"), "session.jsonl", "migration-dsh-v0-migrated.jsonl"),
        (rc8_log, "session.jsonl.zstd", "migration-reference-v0-rate-limit-migrated.jsonl"),
    ] {
        let id = session_of(reference);
        let original = std::fs::read(&source).unwrap();
        let v0 = home.path().join("sessions").join(&id).join(file);
        std::fs::create_dir_all(v0.parent().unwrap()).unwrap();
        std::fs::write(&v0, &original).unwrap();
        home.run(&["session", "migrate", &id]).expect_code(0).expect_stderr("to format v4");
        let v4 = v0.with_file_name("session.v4.jsonl");
        assert_eq!(std::fs::read_to_string(&v4).unwrap(), migrated_head(reference), "{reference}");
        home.run(&["session", "verify", &id]).expect_code(0).expect_stderr("0 violations");
        home.run(&["run", "--profile", "demo", "--session", &id, "go on"]).expect_code(0);
        assert_eq!(std::fs::read(&v0).unwrap(), original, "the v0 log is left as it was");
        assert_eq!(of_type(&events_of(&v4), "turn/end").len(), 2, "the session continues in v4");
        let again = home.run(&["session", "migrate", &id]);
        again.expect_code(1).expect_stderr("it is format v4 already; only older logs are migrated");
    }
}

#[test]
fn migrating_dsh_s_own_v0_attempts_and_tool_steps_gives_a_sound_v4_log() {
    let attempts = TestHome::new();
    let source = fixture("refused-dsh-v0-with-attempts.jsonl");
    attempts.run(&["session", "import", source.to_str().unwrap()]).expect_code(0);
    let id = session_of("refused-dsh-v0-with-attempts.jsonl");
    attempts.run(&["session", "migrate", &id]).expect_code(0);
    let events = events_of(&attempts.path().join("sessions").join(&id).join("session.v4.jsonl"));
    let attempt = of_type(&events, "assistant/attempt")[0];
    assert!(attempt.get("ignorable").is_none() && attempt["data"]["stream"].is_array(), "{attempt}");
    attempts.run(&["session", "verify", &id]).expect_code(0).expect_stderr("0 violations");

    let script = "- tool_calls: [{name: append, arguments: {line: one}}]\n- ok: done\n";
    let tools = crate::tools::tool_home_in(TestHome::v0(), script, "");
    tools.turn().run.expect_code(0);
    let id = dsh_e2e::only_session_log(&tools.home).unwrap().parent().unwrap().file_name().unwrap().to_owned();
    let id = id.to_str().unwrap();
    tools.home.run(&["session", "migrate", id]).expect_code(0);
    let events = events_of(&tools.home.path().join("sessions").join(id).join("session.v4.jsonl"));
    let (call, result) = (of_type(&events, "tool/call")[0], of_type(&events, "tool/result")[0]);
    assert_eq!(result["sourceEventSeqs"], serde_json::json!([call["seq"]]), "the result cites its renumbered call");
    assert_eq!(result["data"]["message"]["role"], "tool", "{result}");
    tools.home.run(&["session", "verify", id]).expect_code(0).expect_stderr("0 violations");
    assert_eq!(tools.ledger_lines(), ["one"], "migrating runs nothing");
}

#[test]
fn a_damaged_v0_log_is_not_migrated_and_nothing_is_left_behind() {
    let home = TestHome::new();
    let source = std::fs::read_to_string(fixture("migration-dsh-v0-source.jsonl")).unwrap();
    let id = session_of("migration-dsh-v0-source.jsonl");
    let torn = format!("{source}{{\"type\":\"turn/st");
    let log = home.write(&format!("sessions/{id}/session.jsonl"), &torn);
    let refused = home.run(&["session", "migrate", &id]);
    assert_ne!(refused.code, Some(0), "{refused}");
    refused.expect_stderr("line 9 (byte");
    let sessions: Vec<_> =
        std::fs::read_dir(home.path().join("sessions")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(sessions, [std::ffi::OsString::from(&id)], "no staging folder is left");
    assert!(!log.with_file_name("session.v4.jsonl").exists());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), torn, "the log is untouched");
}

/// The older-generation logs of `tests/fixtures/v4/generations` (RECORDING.md, "Older
/// generations"), by name, with the generations each comes in and the v4 log DeepSeek Harness
/// 0.2.1-rc.2 migrated them to (`<name>-v4.jsonl`, its lines before its last `session/end-seed`:
/// a fork's own marks its inherited cut).
const GENERATIONS: [(&str, &[u32]); 7] = [
    ("generations", &[0, 1, 2, 3]),
    ("compaction", &[0, 1, 2, 3]),
    ("rate-limit", &[1, 2, 3]),
    ("seeded", &[0, 1, 2, 3]),
    ("extension", &[3]),
    ("legacy", &[0]),
    ("cut-stream", &[0, 1]),
];

fn generation(name: &str) -> PathBuf {
    fixture(&format!("generations/{name}"))
}

/// The lines of `log` before its last `session/end-seed` (the history a restore migrated).
fn before_restore(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let seed = lines.iter().rposition(|line| line.contains("\"type\":\"session/end-seed\"")).unwrap_or(lines.len());
    lines[..seed].iter().map(|line| format!("{line}\n")).collect()
}

/// A home holding the log `file` as session `id`'s log of `generation`, as 0.2 names it.
fn home_with_generation(file: &Path, generation: u32) -> (TestHome, String, PathBuf) {
    let home = TestHome::new();
    let text = std::fs::read_to_string(file).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let id = header["id"].as_str().unwrap().to_owned();
    let name = if generation == 0 { "session.jsonl".to_owned() } else { format!("session.v{generation}.jsonl") };
    let log = home.write(&format!("sessions/{id}/{name}"), &text);
    (home, id, log)
}

#[test]
fn logs_of_generations_one_to_three_are_read_everywhere_as_the_v4_log_0_2_migrates_them_to() {
    for (name, generations) in GENERATIONS {
        let expected = std::fs::read_to_string(generation(&format!("{name}-v4.jsonl"))).unwrap();
        let events = expected.lines().count() - 1;
        for &number in generations.iter().filter(|number| **number > 0) {
            let (home, id, log) = home_with_generation(&generation(&format!("{name}-v{number}.jsonl")), number);
            let verified = home.run(&["session", "verify", &id]);
            verified.expect_code(0).expect_stderr(&format!("({events} events): 0 violations"));
            home.run(&["session", "show", &id]).expect_code(0).expect_stdout("turn 1");
            home.run(&["session", "list"]).expect_code(0).expect_stdout(&id[..8]);
            let exported = home.run(&["session", "export", &id]);
            assert_eq!(exported.stdout, std::fs::read_to_string(&log).unwrap(), "export writes the log as stored");
            let imported = TestHome::new();
            imported.run(&["session", "import", log.to_str().unwrap()]).expect_code(0);
            let kept = imported.path().join("sessions").join(&id).join("session.v4.jsonl");
            assert_eq!(std::fs::read_to_string(kept).unwrap(), expected, "{name} v{number} imported as v4");
        }
    }
}

/// `verify` and a continuation of the older-generation log `text` (generation `number`) both
/// refuse it with `expected`, and nothing is written or published.
fn refused_everywhere(text: &str, number: u32, expected: &str) {
    let home = TestHome::new();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let id = header["id"].as_str().unwrap();
    let log = home.write(&format!("sessions/{id}/session.v{number}.jsonl"), text);
    let verify = home.run(&["session", "verify", id]);
    verify.expect_code(5).expect_stderr(expected);
    let refused = home.run(&["run", "--profile", "demo", "--session", id, "more"]);
    assert_ne!(refused.code, Some(0), "{refused}");
    refused.expect_stderr(expected);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text, "nothing was written");
    assert!(!log.with_file_name("session.v4.jsonl").exists(), "nothing was published");
}

#[test]
fn an_older_generation_s_untyped_block_or_unmarked_fork_is_refused_naming_its_line_and_byte() {
    let extension = std::fs::read_to_string(generation("extension-v3.jsonl")).unwrap();
    let untyped = extension.replacen("{\"type\":\"citation\"", "{\"kind\":\"citation\"", 1);
    let line = untyped.lines().position(|line| line.contains("\"kind\":\"citation\"")).unwrap();
    let offset: usize = untyped.lines().take(line).map(|line| line.len() + 1).sum();
    let expected = format!(
        "line {} (byte {offset}): user/message cannot be migrated to v4: format v3 user/message at seq {}[1] \
         requires content blocks with string type tags",
        line + 1,
        line - 1
    );
    refused_everywhere(&untyped, 3, &expected);
    let seeded = std::fs::read_to_string(generation("seeded-v3.jsonl")).unwrap();
    let unmarked = seeded.replace("\"data\":{\"inherited\":true}", "\"data\":{}");
    assert_ne!(unmarked, seeded);
    let expected = "line 1 (byte 0): its header cannot be migrated to v4: format v3 seeded Session lacks an accepted \
                    inherited end-seed marker";
    refused_everywhere(&unmarked, 3, expected);
}

#[test]
fn an_older_log_s_seq_out_of_place_or_an_early_answer_s_provenance_that_is_no_object_is_refused_at_its_line() {
    let seeded = std::fs::read_to_string(generation("seeded-v1.jsonl")).unwrap();
    let offset: usize = seeded.lines().take(2).map(|line| line.len() + 1).sum();
    for (seq, expected) in [
        ("1e30", "step/start has no whole-number seq (expected 1)"),
        ("18446744073709551615", "step/start has no whole-number seq (expected 1)"),
        ("5", "seq 5 where 1 was expected"),
    ] {
        let skipped = seeded.replacen("\"seq\":1,", &format!("\"seq\":{seq},"), 1);
        let expected = format!("line 3 (byte {offset}): step/start cannot be migrated to v4: {expected}");
        refused_everywhere(&skipped, 1, &expected);
    }
    let legacy = std::fs::read_to_string(generation("legacy-v0.jsonl")).unwrap();
    let provenance = "\"provenance\":{\"provider\":\"mock\",\"model\":\"mock-model\"}";
    let text = legacy.replacen(provenance, "\"provenance\":\"p\"", 1);
    let line = text.lines().position(|line| line.contains("\"provenance\":\"p\"")).unwrap();
    let offset: usize = text.lines().take(line).map(|line| line.len() + 1).sum();
    let (home, id, log) = home_with_generation(&generation("legacy-v0.jsonl"), 0);
    std::fs::write(&log, &text).unwrap();
    let refused = home.run(&["session", "migrate", &id]);
    assert_ne!(refused.code, Some(0), "{refused}");
    refused.expect_stderr(&format!(
        "line {} (byte {offset}): assistant/message cannot be migrated to v4: session \"{id}\" contains malformed \
         pre-react-loop assistant/message at seq {}",
        line + 1,
        line - 1
    ));
    assert!(!log.with_file_name("session.v4.jsonl").exists(), "nothing was published");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text, "the log is untouched");
}

#[test]
fn continuing_an_older_generation_publishes_0_2_s_v4_log_beside_it_and_keeps_the_original() {
    for (name, generations) in GENERATIONS {
        let expected = std::fs::read_to_string(generation(&format!("{name}-v4.jsonl"))).unwrap();
        for &number in generations {
            let (home, id, log) = home_with_generation(&generation(&format!("{name}-v{number}.jsonl")), number);
            let original = std::fs::read(&log).unwrap();
            if number == 0 {
                home.run(&["session", "migrate", &id]).expect_code(0).expect_stderr("to format v4");
            }
            home.run(&["run", "--profile", "demo", "--session", &id, "go on"]).expect_code(0);
            let v4 = log.with_file_name("session.v4.jsonl");
            assert_eq!(before_restore(&v4), expected, "{name} v{number}: the migrated history is 0.2's");
            assert_eq!(std::fs::read(&log).unwrap(), original, "{name} v{number}: the original is left as it was");
            home.run(&["session", "verify", &id]).expect_code(0).expect_stderr("0 violations");
            let turns = |text: &str| text.matches("\"type\":\"turn/end\"").count();
            let continued = std::fs::read_to_string(&v4).unwrap();
            assert_eq!(turns(&continued), turns(&expected) + 1, "{name} v{number}: the new turn is in the v4 log");
        }
    }
}
