//! `dsh run` end to end: the real binary, the real `llm-retry` cdylib, a real `dsh mock-server` on
//! 127.0.0.1. Delays are tiny (a paused clock cannot reach another process); every log written is
//! checked with `dsh session verify`.

use dsh_e2e::turns::{route_patch, run_turn, SECRET, TINY};
use dsh_e2e::{log_events, wait_until, MockProcess, Run, TestHome, PATIENCE};
use serde_json::Value;

#[test]
fn a_rate_limit_hint_is_waited_exactly() {
    let home = TestHome::new();
    let mock = MockProcess::start(
        &home,
        "- status: 429\n  headers: {retry-after: \"1\"}\n  body: {error: {message: slow down}}\n- ok: fine\n",
    );
    let turn = run_turn(&home, &route_patch(&home, &mock, "", ""), "hi");
    turn.run.expect_code(0);
    let retry = turn.of_type("llm/retry")[0];
    assert_eq!(retry["data"]["delayMs"], 1000);
    assert_eq!(retry["data"]["failure"]["providerRetryAfterMs"], 1000);
    assert_eq!(retry["data"]["failure"]["code"], "RATE_LIMIT");
    let waited = turn.of_type("llm/retry-started")[0]["time"].as_u64().unwrap() - retry["time"].as_u64().unwrap();
    assert!(waited >= 1000, "waited {waited} ms");
    assert!(turn.run.stdout.contains("fine"));
}

#[test]
fn a_gateway_html_page_is_a_server_failure_and_is_retried() {
    let home = TestHome::new();
    let mock = MockProcess::start(
        &home,
        "- status: 503\n  headers: {content-type: text/html}\n  body: \"<html><head><title>503 Service Unavailable</title></head><body>cloudflare</body></html>\"\n- ok: recovered\n",
    );
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    turn.run.expect_code(0);
    let failure = dsh_e2e::turns::attempt_failure(turn.of_type("assistant/attempt")[0]);
    assert_eq!(failure["code"], "SERVER");
    assert_eq!(failure["status"], 503);
    assert_eq!(
        failure["message"],
        format!("HTTP 503 from {}/chat/completions: 503 Service Unavailable", mock.base_url)
    );
    assert_eq!(turn.of_type("llm/retry").len(), 1);
    assert!(turn.run.stderr.contains("Retrying model request (1/5)"), "{}", turn.run.stderr);
    assert_eq!(turn.end()["kind"], "completed");
}

#[test]
fn a_truncated_stream_is_stream_closed_and_not_retried_by_default() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- truncate: \"partial answ\"\n- ok: never reached\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    turn.run.expect_code(1);
    assert_eq!(turn.end()["kind"], "error");
    assert_eq!(turn.end()["error"]["code"], "STREAM_CLOSED");
    assert!(turn.of_type("llm/retry").is_empty());
    assert_eq!(dsh_e2e::turns::attempt_text(turn.of_type("assistant/attempt")[0]), "partial answ");
    assert!(turn.run.stderr.contains("STREAM_CLOSED"), "{}", turn.run.stderr);
}

#[test]
fn a_reset_connection_is_transport_and_an_empty_completion_is_empty_response() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- reset: true\n- empty: true\n- malformed: true\n- ok: done\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, "{mode: normal, maxRetries: 5, retryableCodes: [TRANSPORT, EMPTY_RESPONSE, MALFORMED_RESPONSE], backoff: {initialDelayMs: 5, maxDelayMs: 20, jitterRatio: 0}}", ""), "hi");
    turn.run.expect_code(0);
    let codes: Vec<&Value> = turn
        .of_type("assistant/attempt")
        .iter()
        .map(|attempt| &dsh_e2e::turns::attempt_failure(attempt)["code"])
        .collect();
    assert_eq!(codes, ["TRANSPORT", "EMPTY_RESPONSE", "MALFORMED_RESPONSE"]);
}

#[test]
fn a_stalled_stream_times_out() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- stall: 3000\n");
    let turn =
        run_turn(&home, &route_patch(&home, &mock, "{mode: normal, maxRetries: 0}", "\n    idleTimeoutMs: 200"), "hi");
    turn.run.expect_code(1);
    assert_eq!(turn.end()["error"]["code"], "TIMEOUT");
}

#[test]
fn budget_exhaustion_ends_the_turn_with_the_last_failure() {
    let home = TestHome::new();
    let mock = MockProcess::start(
        &home,
        "- status: 500\n  body: {error: {message: first}}\n- status: 502\n  body: {error: {message: upstream down}}\n",
    );
    let turn = run_turn(
        &home,
        &route_patch(
            &home,
            &mock,
            "{mode: normal, maxRetries: 2, backoff: {initialDelayMs: 5, maxDelayMs: 20, jitterRatio: 0}}",
            "",
        ),
        "hi",
    );
    turn.run.expect_code(1);
    let retries: Vec<&Value> = turn.of_type("llm/retry").iter().map(|retry| &retry["data"]["retry"]).collect();
    assert_eq!(retries, [1, 2]);
    let delays: Vec<&Value> = turn.of_type("llm/retry").iter().map(|retry| &retry["data"]["delayMs"]).collect();
    assert_eq!(delays, [5, 10]);
    assert_eq!(turn.end()["error"]["status"], 502);
    assert_eq!(
        turn.end()["error"]["message"],
        format!("HTTP 502 from {}/chat/completions: upstream down", mock.base_url)
    );
    assert_eq!(turn.of_type("step/start").len(), 1, "a retry re-issues the same step");
}

/// The system message every request of the base agent row starts with.
fn system_message() -> Value {
    serde_json::json!({"role": "system", "content": "You are an AI agent powered by DeepSeek Harness."})
}

#[test]
fn the_retried_request_is_rebuilt_from_surface_history_only() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- truncate: \"half an answer\"\n- ok: whole\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, "{mode: normal, retryableCodes: [STREAM_CLOSED], backoff: {initialDelayMs: 5, maxDelayMs: 20, jitterRatio: 0}}", ""), "tell me");
    turn.run.expect_code(0);
    let bodies = mock.request_bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "the retried request equals the first");
    let body: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(body["messages"], serde_json::json!([system_message(), {"role": "user", "content": "tell me"}]));
    assert_eq!(body["stream"], true);
}

#[test]
fn the_api_key_never_reaches_the_log_or_the_output() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 401\n  body: {error: {message: bad key}}\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    assert_eq!(turn.end()["error"]["code"], "AUTH");
    let log = std::fs::read_to_string(&turn.log).unwrap();
    assert!(!log.contains(SECRET) && !turn.run.stdout.contains(SECRET) && !turn.run.stderr.contains(SECRET));
}

#[test]
fn a_missing_key_is_a_missing_credential_naming_the_variable() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: unreachable\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let run = Run::of(home.dsh().args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(1);
    assert!(
        run.stderr.contains("MISSING_CREDENTIAL: the API key variable DEEPSEEK_API_KEY is not set"),
        "{}",
        run.stderr
    );
    assert!(mock.request_bodies().is_empty());
}

#[test]
fn an_interrupt_during_a_wait_ends_the_turn_aborted_without_a_started_record() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n");
    let patch = route_patch(
        &home,
        &mock,
        "{mode: normal, backoff: {initialDelayMs: 30000, maxDelayMs: 30000, jitterRatio: 0}}",
        "",
    );
    let child = home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["run", "--patch"])
        .arg(&patch)
        .arg("hi")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sessions = home.path().join("sessions");
    let log_path = || std::fs::read_dir(&sessions).ok()?.next()?.ok().map(|entry| dsh_e2e::log_in(&entry.path()));
    let scheduled = wait_until(PATIENCE, || {
        log_path().is_some_and(|log| std::fs::read_to_string(log).unwrap_or_default().contains("\"llm/retry\""))
    });
    assert!(scheduled, "the retry was never scheduled");
    dsh_e2e::process::signal(&child, libc::SIGINT);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", String::from_utf8_lossy(&output.stderr));
    let events = log_events(&log_path().unwrap());
    assert!(events.iter().all(|event| event["type"] != "llm/retry-started"));
    assert_eq!(
        events.last().unwrap()["data"]["reason"],
        serde_json::json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    home.run(&["session", "verify", log_path().unwrap().to_str().unwrap()]).expect_code(0);
}

#[test]
fn json_mode_streams_every_event_and_show_and_list_render_the_session() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n- ok: Hello there\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let run =
        Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--json", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    let mut lines = run.stdout.lines().map(|line| serde_json::from_str::<Value>(line).unwrap());
    let opening = lines.next().unwrap();
    let id = run.stderr.lines().last().unwrap().strip_prefix("session ").unwrap();
    assert_eq!((&opening["session"], &opening["profile"]), (&Value::from(id), &Value::from("web")));
    let types: Vec<String> = lines.map(|event| event["type"].as_str().unwrap().to_owned()).collect();
    let v0 = ["turn/start", "step/start", "user/message", "request/header", "assistant/attempt"];
    let v4 = [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "step/start",
        "system/message",
        "user/message",
        "system/message",
        "request/header",
        "assistant/attempt",
    ];
    let opening: &[&str] = if home.format() == "v0" { &v0 } else { &v4 };
    let rest = ["llm/retry", "llm/retry-started", "llm/first-token", "assistant/message", "step/end", "turn/end"];
    assert_eq!(types, [opening, &rest].concat());
    let log = std::fs::read_to_string(home.session_log(id)).unwrap();
    let version = &home.format()[1..];
    assert!(log.starts_with(&format!("{{\"type\":\"session\",\"version\":{version},\"id\":\"{id}\",\"createdAt\":")));
    for (seq, line) in log.lines().skip(1).enumerate() {
        assert_eq!(serde_json::from_str::<Value>(line).unwrap()["seq"], seq, "contiguous seqs");
    }
    let show = home.run(&["session", "show", id]);
    show.expect_code(0);
    assert!(show.stdout.contains("    retry 1/5 · SERVER · 0.1s · HTTP 503 from"), "{}", show.stdout);
    assert!(show.stdout.contains("    assistant: Hello there"), "{}", show.stdout);
    let list = home.run(&["session", "list"]);
    assert!(list.stdout.starts_with(id) && list.stdout.contains("1 turn  completed"), "{}", list.stdout);
}

#[test]
fn the_demo_profile_answers_after_two_visible_retries() {
    let home = TestHome::new();
    let run = home.run(&["run", "--profile", "demo", "Say hello"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("Hello! I am the dsh demo provider."), "{}", run.stdout);
    let retries: Vec<&str> = run.stderr.lines().filter(|line| line.starts_with("Retrying model request")).collect();
    assert_eq!(retries.len(), 2, "{}", run.stderr);
    assert!(
        retries[0].starts_with("Retrying model request (1/5) · 0.") && retries[0].contains("(SERVER: HTTP 503"),
        "{}",
        retries[0]
    );
    assert!(retries[1].starts_with("Retrying model request (2/5) · 1.0s (RATE_LIMIT"), "{}", retries[1]);
}

#[test]
fn a_continued_session_sends_the_whole_conversation() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: first answer\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let first = run_turn(&home, &patch, "one");
    let id = dsh_e2e::turns::session_id(&first.run);
    let second = Run::of(
        home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--session", &id, "--patch"]).arg(&patch).arg("two"),
    );
    second.expect_code(0);
    let body: Value = serde_json::from_str(&mock.request_bodies()[1]).unwrap();
    assert_eq!(
        body["messages"],
        serde_json::json!([system_message(), {"role": "user", "content": "one"}, {"role": "assistant", "content": "first answer"}, {"role": "user", "content": "two"}])
    );
    let events = log_events(&first.log);
    assert_eq!(
        events.iter().filter(|event| event["type"] == "request/header").count(),
        1,
        "an unchanged header is not repeated"
    );
    home.run(&["session", "verify", &id]).expect_code(0);
}

/// Installs the scripted fixture as a package whose bundle inserts one row with `config`.
fn install_scripted(home: &TestHome, config: &str) {
    let dir = home.path().join("pkg-scripted");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dsh_e2e::library_file_name("fixture-scripted");
    std::fs::copy(dsh_e2e::artifacts().library("fixture-scripted"), dir.join(&file)).unwrap();
    std::fs::write(
        dir.join("cordis.patch.yml"),
        format!("- insert:\n    - {{id: scripted, name: fixture-scripted, config: {config}}}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("dsh-plugin.toml"),
        format!("name = \"fixture-scripted\"\nversion = \"0.1.0\"\nlibrary = \"{file}\"\n[bundle]\npatch = \"cordis.patch.yml\"\n"),
    )
    .unwrap();
    let add = home.run(&["plugin", "add", dir.to_str().unwrap()]);
    add.expect_code(0);
}

#[test]
fn a_panicking_listener_does_not_take_the_host_down() {
    let home = TestHome::new();
    install_scripted(&home, "{answer: panic}");
    let mock = MockProcess::start(&home, "- status: 404\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    turn.run.expect_code(1);
    assert!(
        turn.run.stderr.contains(
            "row \"scripted\": agent/request-error listener panicked: fixture-scripted: row scripted was told to panic"
        ),
        "{}",
        turn.run.stderr
    );
    assert_eq!(turn.end()["error"]["code"], "HTTP_404");
}

#[test]
fn a_retry_decision_the_host_cannot_carry_out_is_no_retry_for_its_row_and_nothing_is_written() {
    for (delays, why) in [
        ("delayMs: 1e308", "its retry delay 1e+308 is not a finite number of milliseconds within 0..2147483647"),
        ("delayMs: NaN, recordDelayMs: 1", "its retry delay NaN is not a finite number"),
        ("delayMs: -1", "its retry delay -1 is not a finite number"),
        ("delayMs: 5, recordDelayMs: 6", "its retry delay 5 differs from its record's delayMs 6"),
    ] {
        let home = TestHome::new();
        install_scripted(&home, &format!("{{answer: retry, {delays}}}"));
        let mock = MockProcess::start(&home, "- status: 404\n");
        let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
        turn.run.expect_code(1);
        assert!(
            turn.run.stderr.contains("row \"scripted\": returned a retry decision the host cannot carry out: ")
                && turn.run.stderr.contains(why),
            "{delays}: {}",
            turn.run.stderr
        );
        assert!(turn.of_type("llm/retry").is_empty(), "{delays}: nothing is written for it");
        assert_eq!(turn.end()["error"]["code"], "HTTP_404", "{delays}: the turn ends with the provider's failure");
        assert_eq!(turn.of_type("turn/end").len(), 1, "{delays}: the turn is closed");
    }
}

#[test]
fn a_record_spread_over_several_lines_is_written_as_one_line_even_without_the_invariant() {
    // Without the invariant only a v0 log takes a record the scripted plugin makes (a v4 log's
    // own gate refuses its turn-less llm/retry).
    let home = TestHome::v0();
    install_scripted(&home, "{answer: retry, recordFormat: pretty}");
    home.write("profiles/web/cordis.patch.yml", "- {id: llm-retry-invariant, disabled: true}\n");
    let mock = MockProcess::start(&home, "- status: 404\n- ok: fine\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    let id = dsh_e2e::turns::session_id(&run);
    let log = home.session_log(&id);
    let text = std::fs::read_to_string(&log).unwrap();
    let record = text.lines().find(|line| line.contains("\"type\":\"llm/retry\"")).expect("the record is written");
    assert!(
        record.ends_with(
            r#""data":{"retryId":"scripted-chain","retry":1,"delayMs":1.0,"row":"scripted","saw":"nothing"}}"#
        ),
        "{record}"
    );
    assert!(text.lines().skip(1).all(|line| serde_json::from_str::<Value>(line).is_ok()), "every line is one event");
    let continued = Run::of(
        home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--session", &id, "--patch"]).arg(&patch).arg("more"),
    );
    continued.expect_code(0);
}

#[test]
fn a_record_that_is_not_json_is_never_written_even_without_the_invariant() {
    let home = TestHome::new();
    install_scripted(&home, "{answer: retry, recordFormat: broken}");
    home.write("profiles/web/cordis.patch.yml", "- {id: llm-retry-invariant, disabled: true}\n");
    let mock = MockProcess::start(&home, "- status: 404\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    turn.run.expect_code(1);
    assert!(
        turn.run.stderr.contains("row \"scripted\": returned a retry decision the host cannot carry out: its llm/retry record is not valid JSON"),
        "{}",
        turn.run.stderr
    );
    assert!(turn.of_type("llm/retry").is_empty());
    let repair = home.run(&["session", "repair", turn.log.to_str().unwrap()]);
    repair.expect_code(0);
}

#[test]
fn a_retry_record_the_invariant_refuses_ends_the_turn_with_invariant() {
    // The llm-retry-invariant plugin guards v0 logs; a v4 log's own gate refuses the record first.
    let home = TestHome::v0();
    install_scripted(&home, "{answer: retry}");
    let mock = MockProcess::start(&home, "- status: 404\n");
    let turn = run_turn(&home, &route_patch(&home, &mock, TINY, ""), "hi");
    turn.run.expect_code(1);
    assert_eq!(turn.end()["error"]["code"], "INVARIANT");
    assert_eq!(
        turn.end()["error"]["message"],
        "llm/retry failure must be an object (llm/retry record from row \"scripted\", refused by row \"llm-retry-invariant\")"
    );
    assert!(turn.of_type("llm/retry").is_empty(), "a refused record is never written");
}

#[test]
fn the_mock_server_answers_other_paths_404_without_taking_a_step_of_its_script() {
    use std::io::{Read, Write};
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: the first step\n");
    let address = mock.base_url.trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    let mut probe = std::net::TcpStream::connect(&address).unwrap();
    probe
        .write_all(format!("GET /v1/models HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    probe.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let patch = route_patch(&home, &mock, "", "");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0).expect_stdout("the first step");
}
