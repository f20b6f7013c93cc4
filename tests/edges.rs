//! The attacks of issue 24, each at its boundary: input one byte over a limit, layers that
//! expand, stores that never answer, files swapped under dsh, and what reaches a terminal.

use std::ffi::OsStr;

use dsh_e2e::turns::{route_patch, session_id, spawn_dsh, SECRET};
use dsh_e2e::{log_events, only_session_log, wait_until, MockProcess, Run, TestHome, PATIENCE};
use serde_json::Value;

use dsh_session::reader::MAX_LINE_BYTES;

#[test]
fn a_prompt_one_byte_over_the_line_limit_is_refused_before_anything_is_written() {
    let home = TestHome::new();
    let script = format!("head -c {} /dev/zero | tr '\\0' B | \"$DSH\" run --profile demo -", MAX_LINE_BYTES + 1);
    let run = Run::of(&mut home.shell(&script));
    run.expect_code(1).expect_stderr("the prompt on stdin is longer than the 64 MiB (67108864 bytes)");
    assert!(only_session_log(&home).is_none(), "no session was created:\n{run}");
}

#[test]
fn a_prompt_whose_escaped_line_would_not_fit_is_refused_before_anything_is_written() {
    let home = TestHome::new();
    // Each control byte is written as a six-byte escape: the raw prompt fits, its line would not.
    let script = format!("head -c {} /dev/zero | tr '\\0' '\\001' | \"$DSH\" run --profile demo -", MAX_LINE_BYTES / 4);
    let run = Run::of(&mut home.shell(&script));
    run.expect_code(1).expect_stderr("refusing to append user/message: its line would take");
    assert!(only_session_log(&home).is_none(), "no session was created:\n{run}");
}

#[test]
fn a_chat_skips_a_line_too_long_to_log_and_one_that_is_not_utf8_runs_the_rest_and_exits_1() {
    let home = TestHome::new();
    let script = format!(
        "{{ echo first; head -c {} /dev/zero | tr '\\0' B; printf '\\ncaf\\351\\nlast\\n'; }} | \"$DSH\" chat --profile demo",
        MAX_LINE_BYTES + 1
    );
    let run = Run::of(&mut home.shell(&script));
    run.expect_code(1)
        .expect_stderr("line 2 of the input is longer than the 64 MiB")
        .expect_stderr("line 3 of the input (5 bytes) is not UTF-8 text");
    let log = only_session_log(&home).expect("one session");
    let turns = log_events(&log).iter().filter(|event| event["type"] == "turn/start").count();
    assert_eq!(turns, 2, "the first and last lines ran:\n{run}");
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
}

/// Waits until `mock` has received `count` requests (it records each before answering).
fn wait_for_requests(mock: &MockProcess, count: usize) {
    let arrived = wait_until(PATIENCE, || mock.request_bodies().len() >= count);
    assert!(arrived, "the mock never received request {count}");
}

#[test]
fn a_session_created_with_patch_resumes_after_kill_9_on_the_route_its_layer_set_even_when_the_file_is_gone() {
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "fb", "add", "dsh-retry"]).expect_code(0);
    let mock = MockProcess::start(&home, "- stall: 600000\n- ok: resumed on the patched route\n");
    let patch = route_patch(&home, &mock, "", "");
    let mut child = spawn_dsh(
        &home,
        ["run".as_ref(), "--profile".as_ref(), "fb".as_ref(), "--patch".as_ref(), patch.as_os_str(), OsStr::new("hi")],
    );
    wait_for_requests(&mock, 1);
    dsh_e2e::process::kill_9(&mut child);
    let log = only_session_log(&home).unwrap();
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    std::fs::remove_file(&patch).unwrap();
    let resumed = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["session", "resume", &id]));
    resumed.expect_code(0).expect_stderr("is gone; running with the copy kept in");
    assert!(resumed.stdout.contains("resumed on the patched route"), "{resumed}");
    assert!(!resumed.stderr.contains("MISSING_CREDENTIAL"), "{resumed}");
    assert_eq!(mock.request_bodies().len(), 2, "the continuation was sent once, to the patched route");
    home.run(&["session", "verify", &id]).expect_code(0);
}

#[test]
fn a_continued_session_keeps_its_recorded_model_unless_asked_otherwise_and_says_so() {
    let home = TestHome::new();
    let first = home.run(&["run", "--profile", "demo", "hi"]);
    first.expect_code(0);
    let id = session_id(&first);
    home.write("profiles/demo/cordis.patch.yml", "- id: agent\n  config: {provider: demo, model: another-model}\n");
    home.run(&["run", "--session", &id, "again"])
        .expect_code(0)
        .expect_stderr("continuing on provider demo (model dsh-demo) as the session recorded; the profile now says provider demo (model another-model)");
    let asked = home.write("model.yml", "- id: agent\n  config: {provider: demo, model: third-model}\n");
    Run::of(home.dsh().args(["run", "--session", &id, "--patch"]).arg(&asked).arg("and now"))
        .expect_code(0)
        .expect_stderr("continuing on provider demo (model third-model) as asked");
    let models: Vec<Value> = log_events(&only_session_log(&home).unwrap())
        .into_iter()
        .filter(|event| event["type"] == "request/header")
        .map(|event| event["data"]["header"]["config"]["model"].clone())
        .collect();
    assert_eq!(models, ["dsh-demo", "third-model"]);
}

/// The most memory composing any layer may take (the README's figure), in KiB.
const LAYER_MEMORY_BOUND_KIB: i64 = 200 * 1024;

#[test]
fn an_alias_bomb_layer_is_refused_naming_its_file_in_bounded_memory() {
    let home = TestHome::new();
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..10 {
        bomb.push_str(&format!("a{level}: &a{level} [{}]\n", vec![format!("*a{}", level - 1); 10].join(", ")));
    }
    let layer = home.write("bomb.yml", &bomb);
    for command in ["check", "explain"] {
        let (run, peak) =
            Run::measured(home.dsh().args(["config", command, "--profile", "demo", "--patch"]).arg(&layer));
        run.expect_code(1).expect_stderr(
            "bomb.yml: line 6, column 45: the document holds or expands through aliases to more than 1000000 values",
        );
        assert!(peak < LAYER_MEMORY_BOUND_KIB, "peak RSS {peak} KiB:\n{run}");
    }
}

#[test]
fn a_layer_one_byte_over_sixteen_mebibytes_is_refused_naming_its_file() {
    let home = TestHome::new();
    let script = format!(
        "head -c {} /dev/zero | tr '\\0' '#' > big.yml && \"$DSH\" config check --profile demo --patch big.yml",
        16 * 1024 * 1024 + 1
    );
    Run::of(&mut home.shell(&script))
        .expect_code(1)
        .expect_stderr("big.yml: it is longer than the 16 MiB a layer may hold");
    let script = format!(
        "{{ echo '[]'; head -c {} /dev/zero | tr '\\0' '#'; }} > big.yml && \"$DSH\" config check --profile demo --patch big.yml",
        16 * 1024 * 1024 - 3
    );
    Run::of(&mut home.shell(&script)).expect_code(0);
}

/// Starts `dsh ARGS` on a route that fails with 503 and waits 30 s between retries; returns once
/// the first retry is scheduled (durable in the log).
fn waiting_in_a_retry(home: &TestHome, mock: &MockProcess, args: &[&str]) -> (std::process::Child, std::path::PathBuf) {
    let policy = "{mode: normal, backoff: {initialDelayMs: 30000, maxDelayMs: 30000, jitterRatio: 0}}";
    let patch = route_patch(home, mock, policy, "");
    let mut child = home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(args)
        .arg("--patch")
        .arg(&patch)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(stdin) = child.stdin.as_mut() {
        use std::io::Write;
        let _ = stdin.write_all(b"hi\nnever sent\n");
    }
    let scheduled = wait_until(PATIENCE, || {
        only_session_log(home)
            .is_some_and(|log| std::fs::read_to_string(log).unwrap_or_default().contains("\"llm/retry\""))
    });
    assert!(scheduled, "the retry was never scheduled");
    (child, only_session_log(home).unwrap())
}

#[test]
fn sigterm_during_a_retry_wait_closes_the_turn_and_exits_143_in_run_and_chat() {
    for args in [&["run", "hi"][..], &["chat"][..]] {
        let home = TestHome::new();
        let mock = MockProcess::start(&home, "- status: 503\n");
        let (child, log) = waiting_in_a_retry(&home, &mock, args);
        dsh_e2e::process::signal(&child, libc::SIGTERM);
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(143), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        let events = log_events(&log);
        let last = events.last().unwrap();
        assert_eq!(
            (last["type"].as_str(), last["data"]["reason"]["kind"].as_str()),
            (Some("turn/end"), Some("aborted")),
            "{args:?}"
        );
        let turns = events.iter().filter(|event| event["type"] == "turn/start").count();
        assert_eq!(turns, 1, "{args:?}: the chat ended after the cancelled turn");
        home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
    }
}

#[test]
fn config_check_json_on_a_layer_that_does_not_parse_prints_its_document_with_the_reason() {
    let home = TestHome::new();
    let layer = home.write("broken.yml", "- id: agent\n  config: [unclosed\n");
    let run = Run::of(home.dsh().args(["config", "check", "--json", "--profile", "demo", "--patch"]).arg(&layer));
    run.expect_code(1);
    let document: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|err| panic!("{err}:\n{run}"));
    assert_eq!(document["valid"], false);
    assert!(document["error"].as_str().unwrap().contains("broken.yml"), "{document}");
}

#[test]
fn replay_all_reports_a_log_it_cannot_read_and_replays_the_others() {
    let home = TestHome::new();
    home.run(&["run", "--profile", "demo", "hi"]).expect_code(0);
    home.write("sessions/empty/session.jsonl", "");
    let run = home.run(&["session", "replay", "--all"]);
    run.expect_code(0).expect_stderr("empty/session.jsonl: cannot be replayed");
    assert!(run.stdout.contains("1 session (1 could not be read), 1 turn replayed"), "{run}");
}
