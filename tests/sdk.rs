//! `dsh --profile sdk` as the DeepSeek Harness SDK drives it — JSON-RPC lines on stdio against
//! `dsh mock-server` — and the real SDK from pip (`deepseek-harness-sdk`, pinned, installed into
//! a cache by `tests/fixtures/sdk/install-sdk.sh`): answers and notifications, retries inside one prompt, the reference's errors, a
//! line over the limit, two sessions, busy and missing sessions, `kill -9` then resume, end of
//! input and a closed stdout mid-turn, the working directory.

use std::path::{Path, PathBuf};

use dsh_e2e::sdk::{names, SdkRuntime};
use dsh_e2e::turns::{route_patch, SECRET, TINY};
use dsh_e2e::{log_events, workspace_root, MockProcess, Run, TestHome};
use serde_json::{json, Value};

use super::tools::server_row;

/// A v4 home whose `deepseek-official` route is a mock serving `script`, with extra `rows`.
fn sdk_home(script: &str, rows: &str) -> (TestHome, MockProcess, PathBuf) {
    let home = TestHome::v4();
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, TINY, "");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + rows).unwrap();
    (home, mock, patch)
}

/// `dsh --profile sdk --patch PATCH` in `home`, as the SDK launches it.
fn runtime_command(home: &TestHome, patch: &Path) -> std::process::Command {
    let mut command = home.dsh();
    command.env("DEEPSEEK_API_KEY", SECRET).args(["--profile", "sdk", "--patch"]).arg(patch);
    command
}

/// The last `session.event` of `turn` whose event has type `kind`.
fn last_event<'a>(turn: &'a [Value], kind: &str) -> &'a Value {
    let found = turn.iter().rev().find(|n| n["params"]["event"]["type"] == kind);
    &found.unwrap_or_else(|| panic!("no {kind} in {:?}", names(turn)))["params"]["event"]
}

fn runtime(home: &TestHome, patch: &Path) -> SdkRuntime {
    let mut runtime = SdkRuntime::spawn(runtime_command(home, patch));
    runtime.initialize(home.path(), "deepseek-official");
    runtime
}

/// The v4 log of `session` in `home`.
fn log_of(home: &TestHome, session: &str) -> PathBuf {
    home.path().join("sessions").join(session).join("session.v4.jsonl")
}

fn verify(home: &TestHome, session: &str) {
    home.run(&["session", "verify", session]).expect_code(0);
}

fn event_types(turn: &[Value]) -> Vec<String> {
    names(turn).into_iter().filter(|name| !name.starts_with("status:")).collect()
}

#[test]
fn a_prompt_is_answered_with_every_durable_event_once_in_log_order_between_running_and_idle() {
    let (home, _mock, patch) = sdk_home("- ok: \"Hello from the mock.\"\n", "");
    let mut sdk = runtime(&home, &patch);
    let (message_id, turn) = sdk.run("session-one", "Say hello");
    let shown = names(&turn);
    assert_eq!(shown[..3], ["agent/inbox/spliced", "status:running", "turn/start"], "{shown:?}");
    assert_eq!(shown[shown.len() - 2..], ["turn/end", "status:idle"], "{shown:?}");
    assert_eq!(turn[0]["params"]["event"]["data"]["inserted"][0]["id"], message_id.as_str());
    let answer = last_event(&turn, "assistant/message");
    assert_eq!(answer["data"]["message"]["content"][0]["text"], "Hello from the mock.");
    assert_eq!(last_event(&turn, "turn/end")["data"]["reason"]["kind"], "completed");
    assert_eq!(sdk.shutdown(), 0, "{}", sdk.report());
    assert!(sdk.rest().is_empty(), "nothing after shutdown's answer\n{}", sdk.report());
    let log = log_of(&home, "session-one");
    let sent: Vec<Value> = turn.iter().filter_map(|n| n["params"].get("event").cloned()).collect();
    let logged = log_events(&log);
    assert_eq!(sent, logged[logged.len() - sent.len()..], "the events are the log's, as written, each once");
    verify(&home, "session-one");
}

#[test]
fn a_503_then_429_chain_recovers_inside_one_prompt() {
    let (home, _mock, patch) = sdk_home("- status: 503\n- status: 429\n- ok: recovered\n", "");
    let mut sdk = runtime(&home, &patch);
    let (_, turn) = sdk.run("session-retry", "hello");
    let types = event_types(&turn);
    let count = |kind: &str| types.iter().filter(|name| *name == kind).count();
    assert_eq!((count("llm/retry"), count("llm/retry-started"), count("assistant/attempt")), (2, 2, 2), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("turn/end"));
    assert_eq!(sdk.shutdown(), 0);
    verify(&home, "session-retry");
}

#[test]
fn requests_the_runtime_cannot_serve_get_the_references_errors_and_the_next_is_served() {
    let (home, _mock, patch) = sdk_home("- ok: fine\n", "");
    let mut sdk = SdkRuntime::spawn(runtime_command(&home, &patch));
    let refused = |sdk: &mut SdkRuntime, method: &str, params: Value| {
        let error = sdk.call(method, params).expect_err("refused");
        (error["code"].as_i64().unwrap(), error["message"].as_str().unwrap().to_owned())
    };
    let blocks = json!([{"type": "text", "text": "hi"}]);
    let prompt = json!({"sessionId": "session-a", "contentBlocks": blocks});
    assert_eq!(refused(&mut sdk, "session/prompt", prompt.clone()), (-32603, "SDK server is not initialized".into()));
    sdk.initialize(home.path(), "deepseek-official");
    let cases = [
        ("session/fork", json!({}), "unknown DeepSeek Harness SDK runtime method: session/fork"),
        ("session/resume", json!({"sessionId": ""}), "session/resume requires a non-empty sessionId string"),
        ("session/resume", json!({"sessionId": "session-gone"}), "session \"session-gone\" not found"),
        ("session/wait", json!({"sessionId": "session-gone"}), "unknown SDK session: session-gone"),
        (
            "session/working-directory/set",
            json!({"sessionId": "session-a"}),
            "working-directory set requires a path string",
        ),
        (
            "session/prompt",
            json!({"sessionId": "session-a", "contentBlocks": [{"type": "image", "data": "AA=="}]}),
            "session/prompt: content block 1 is of type \"image\"; dsh takes text blocks",
        ),
    ];
    for (method, params, message) in cases {
        assert_eq!(refused(&mut sdk, method, params), (-32603, message.to_owned()), "{method}");
    }
    sdk.send_line(b"{not json");
    assert_eq!(sdk.next_line()["error"], json!({"code": -32700, "message": "Parse error"}));
    sdk.send_line(br#"{"id":5,"method":"shutdown"}"#);
    assert_eq!(
        sdk.next_line(),
        json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32600, "message": "Invalid request"}})
    );
    let (_, turn) = sdk.run("session-a", "hi");
    assert_eq!(event_types(&turn).last().map(String::as_str), Some("turn/end"));
    assert_eq!(sdk.shutdown(), 0);
}

#[test]
fn a_request_line_one_byte_over_the_limit_is_refused_unread_and_the_next_is_served() {
    let (home, _mock, patch) = sdk_home("- ok: fine\n", "");
    let mut sdk = runtime(&home, &patch);
    let limit = dsh_host::sdk::wire::MAX_REQUEST_BYTES;
    sdk.send_line(&vec![b'x'; limit + 1]);
    let refused = sdk.next_line();
    assert_eq!(refused["error"]["code"], -32600);
    assert_eq!(refused["id"], Value::Null);
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("a line of {} bytes", limit + 1)), "{message}");
    let cwd = sdk.ok("session/working-directory/get", json!({"sessionId": "session-b"}));
    assert_eq!(cwd["cwd"], home.path().display().to_string());
    assert_eq!(sdk.shutdown(), 0);
}

#[test]
fn two_sessions_run_in_one_runtime_and_an_open_or_held_session_is_refused() {
    let (home, _mock, patch) = sdk_home("- ok: first\n- ok: second\n- ok: third\n", "");
    let mut sdk = runtime(&home, &patch);
    let (_, one) = sdk.run("session-one", "a");
    let (_, two) = sdk.run("session-two", "b");
    assert!(one.iter().all(|n| n["params"]["sessionId"] == "session-one"));
    assert!(two.iter().all(|n| n["params"]["sessionId"] == "session-two"));
    let refused = sdk.call("session/resume", json!({"sessionId": "session-one"})).unwrap_err();
    assert_eq!(refused["message"], "SDK session is already open or opening: session-one");
    let mut other = runtime(&home, &patch);
    let busy = other.call("session/resume", json!({"sessionId": "session-two"})).unwrap_err();
    let busy = busy["message"].as_str().unwrap();
    assert!(busy.contains("session-two") && busy.contains("process"), "a held session names its holder: {busy}");
    assert_eq!(other.shutdown(), 0);
    let (_, again) = sdk.run("session-one", "c");
    assert_eq!(event_types(&again).iter().filter(|name| *name == "turn/start").count(), 1);
    assert_eq!(sdk.shutdown(), 0);
    verify(&home, "session-one");
    verify(&home, "session-two");
}

#[test]
fn kill_9_mid_turn_then_resume_in_a_new_runtime_repairs_and_continues_without_running_the_tool_again() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let script =
        "- tool_calls: [{name: append, arguments: {line: paid}}]\n- hold: after-tool\n  ok: never\n- ok: continued\n";
    let (home, mock, patch) = sdk_home(script, &server_row("side", &ledger, ""));
    let mut sdk = runtime(&home, &patch);
    sdk.send("session/prompt", json!({"sessionId": "session-k", "contentBlocks": [{"type": "text", "text": "pay"}]}));
    mock.wait_for_requests(2);
    dsh_e2e::process::kill_9(&mut sdk.child);
    let mut again = runtime(&home, &patch);
    assert_eq!(again.ok("session/resume", json!({"sessionId": "session-k"})), json!({}));
    let repaired = log_events(&log_of(&home, "session-k"));
    let closed =
        repaired.iter().any(|event| event["type"] == "turn/end" && event["data"]["reason"]["kind"] == "interrupted");
    assert!(closed, "resume answers once the interrupted turn is closed in the log: {}", again.report());
    let (_, turn) = again.run("session-k", "continue");
    assert_eq!(last_event(&turn, "assistant/message")["data"]["message"]["content"][0]["text"], "continued");
    assert_eq!(again.shutdown(), 0);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().collect::<Vec<_>>(), ["paid"], "the tool ran once");
    verify(&home, "session-k");
}

#[test]
fn end_of_input_mid_turn_closes_the_turn_in_the_log_and_exits_0() {
    let (home, mock, patch) = sdk_home("- hold: forever\n  ok: never\n", "");
    let mut sdk = runtime(&home, &patch);
    sdk.send("session/prompt", json!({"sessionId": "session-eof", "contentBlocks": [{"type": "text", "text": "x"}]}));
    mock.wait_for_requests(1);
    assert_eq!(sdk.close_input(), 0, "{}", sdk.report());
    let events = log_events(&log_of(&home, "session-eof"));
    let end = events.iter().rev().find(|event| event["type"] == "turn/end").expect("the turn is closed");
    assert_eq!(end["data"]["reason"]["kind"], "aborted");
    verify(&home, "session-eof");
}

#[test]
fn a_closed_stdout_mid_turn_ends_the_runtime_with_the_turn_closed() {
    let (home, mock, patch) = sdk_home("- hold: forever\n  ok: never\n", "");
    let mut command = runtime_command(&home, &patch);
    command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = command.stderr(std::process::Stdio::null()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    use std::io::Write;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"cwd": home.path()}});
    let blocks = json!([{"type": "text", "text": "x"}]);
    let prompt = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "session-out", "contentBlocks": blocks}});
    writeln!(stdin, "{initialize}\n{prompt}").unwrap();
    mock.wait_for_requests(1);
    drop(child.stdout.take());
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 3, "method": "session/wait", "params": {"sessionId": "x"}}))
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.code().is_some(), "dsh ended by itself: {status}");
    let events = log_events(&log_of(&home, "session-out"));
    assert_eq!(events.iter().rev().find(|e| e["type"] == "turn/end").unwrap()["data"]["reason"]["kind"], "aborted");
    verify(&home, "session-out");
}

#[test]
fn the_working_directory_moves_within_the_session_and_the_move_is_recorded() {
    let (home, _mock, patch) = sdk_home("- ok: fine\n", "");
    std::fs::create_dir(home.path().join("sub")).unwrap();
    let mut sdk = runtime(&home, &patch);
    let get = |sdk: &mut SdkRuntime| sdk.ok("session/working-directory/get", json!({"sessionId": "session-w"}));
    assert_eq!(get(&mut sdk)["cwd"], home.path().display().to_string());
    let moved = sdk.ok("session/working-directory/set", json!({"sessionId": "session-w", "path": "sub"}));
    let sub = home.path().join("sub").canonicalize().unwrap().display().to_string();
    assert_eq!(moved["cwd"], sub.as_str());
    assert_eq!(get(&mut sdk)["cwd"], sub.as_str());
    let missing = sdk.call("session/working-directory/set", json!({"sessionId": "session-w", "path": "nowhere"}));
    let missing = missing.unwrap_err()["message"].as_str().unwrap().to_owned();
    assert!(
        missing.starts_with("working-directory: directory does not exist: \"") && missing.contains("nowhere"),
        "{missing}"
    );
    assert_eq!(sdk.shutdown(), 0);
    let events = log_events(&log_of(&home, "session-w"));
    let changes: Vec<&Value> = events.iter().filter(|event| event["type"] == "working-directory/change").collect();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["data"]["cwd"], sub.as_str());
    verify(&home, "session-w");
}

/// The python of a venv holding the pinned SDK, installed (once, cached) by
/// `tests/fixtures/sdk/install-sdk.sh`.
fn sdk_python() -> PathBuf {
    let script = workspace_root().join("tests/fixtures/sdk/install-sdk.sh");
    let installed = std::process::Command::new("bash").arg(&script).stderr(std::process::Stdio::inherit()).output();
    let installed = installed.unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
    assert!(
        installed.status.success(),
        "{} failed: it needs python3 with venv and the PyPI registry",
        script.display()
    );
    PathBuf::from(String::from_utf8(installed.stdout).unwrap().trim())
}

#[test]
fn programs_written_for_the_python_sdk_run_on_dsh() {
    let python = sdk_python();
    let ledger = TestHome::new();
    let rows = server_row("side", &ledger.path().join("ledger.txt"), "");
    let script = "- ok: \"Hello from the mock.\"\n- status: 503\n- status: 429\n- ok: recovered\n- tool_calls: [{name: append, arguments: {line: paid}}]\n- hold: resume\n  ok: never\n- ok: continued\n- ok: two\n";
    let (home, mock, patch) = sdk_home(script, &rows);
    let program = workspace_root().join("tests/fixtures/sdk/program.py");
    let mut command = std::process::Command::new(&python);
    command.arg(&program).arg(dsh_e2e::artifacts().dsh()).arg(&patch).arg(&mock.record);
    command
        .env("DSH_HOME", home.path())
        .env("DEEPSEEK_API_KEY", SECRET)
        .env("LEDGER", ledger.path().join("ledger.txt"));
    let run = Run::of(&mut command);
    run.expect_code(0);
    let results: Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    let expected = json!({
        "plain": ["Hello from the mock.", "completed"],
        "retried": ["recovered", "completed", 2],
        "resumed": ["continued", "completed"],
        "second_session": ["two", "completed"],
        "busy": true,
        "ledger": ["paid"],
    });
    assert_eq!(results, expected, "{}", run.stderr);
}

#[test]
fn a_session_deepseek_harness_0_2_wrote_is_continued_once_imported() {
    let (home, _mock, patch) = sdk_home("- ok: \"carried on\"\n", "");
    let fixture = workspace_root().join("tests/fixtures/v4/retry-503-429-success.jsonl");
    home.run(&["session", "import", fixture.to_str().unwrap()]).expect_code(0);
    let id = "session-1ce27685-1a71-4388-87f6-a941e7b80c03";
    let mut sdk = runtime(&home, &patch);
    let (_, turn) = sdk.run(id, "and now?");
    let end = last_event(&turn, "turn/end");
    assert_eq!(end["data"]["turn"], 2, "the imported turn is the first");
    assert_eq!(end["data"]["reason"]["kind"], "completed");
    assert_eq!(sdk.shutdown(), 0);
    verify(&home, id);
}
