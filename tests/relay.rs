//! `relay-retry` through the real binary: swapped in and out with `dsh plugin add/remove` (same
//! binary, no rebuild), its schedule, code rules and display, an unbounded tail, and Ctrl-C.

use std::ffi::OsStr;

use dsh_e2e::turns::{route_patch, run_turn_in, spawn_dsh, Turn};
use dsh_e2e::{log_events, only_session_log, wait_until, MockProcess, TestHome, PATIENCE};

/// A home whose `relay` profile has relay-retry installed and a user layer with `schedule` and
/// `tail` (ms).
fn relay_home(schedule: &str, tail: u64) -> TestHome {
    let home = TestHome::new();
    let add = home.run(&["plugin", "--profile", "relay", "add", "relay-retry"]);
    add.expect_code(0);
    home.write(
        "profiles/relay/cordis.patch.yml",
        &format!("- id: relay-retry\n  name: relay-retry\n  config: {{schedule: {schedule}, tailDelayMs: {tail}}}\n"),
    );
    home
}

fn relay_turn(home: &TestHome, script: &str) -> (Turn, MockProcess) {
    let mock = MockProcess::start(home, script);
    let patch = route_patch(home, &mock, "", "");
    (run_turn_in(home, "relay", &patch, "hi"), mock)
}

fn listener_ids(home: &TestHome, profile: &str) -> Vec<String> {
    let run = home.run(&["config", "--profile", profile, "waterfall"]);
    run.expect_code(0);
    run.stdout.lines().map(|line| line.split_whitespace().nth(1).unwrap().to_owned()).collect()
}

#[test]
fn adding_relay_retry_swaps_the_executor_and_removing_it_swaps_back() {
    let home = TestHome::new();
    let add = home.run(&["plugin", "--profile", "relay", "add", "relay-retry"]);
    add.expect_code(0);
    assert!(add.stdout.contains("bundle layer 2 of 2: inserts relay-retry; disables llm-retry"), "{}", add.stdout);
    assert_eq!(listener_ids(&home, "relay"), ["relay-retry"]);
    let check = home.run(&["config", "--profile", "relay", "check"]);
    check.expect_code(0);
    let removed = home.run(&["plugin", "--profile", "relay", "remove", "relay-retry"]);
    removed.expect_code(0);
    assert_eq!(listener_ids(&home, "relay"), ["llm-retry"]);
}

#[test]
fn the_same_binary_runs_llm_retry_then_relay_retry() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n- ok: one\n- status: 503\n- ok: two\n");
    let patch =
        route_patch(&home, &mock, "{mode: normal, backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}", "");
    home.run(&["plugin", "--profile", "swap", "add", "relay-retry"]).expect_code(0);
    home.run(&["plugin", "--profile", "swap", "remove", "relay-retry"]).expect_code(0);
    let before = run_turn_in(&home, "swap", &patch, "hi");
    assert_eq!(before.of_type("llm/retry")[0]["data"]["mode"], "normal");
    home.run(&["plugin", "--profile", "swap", "add", "relay-retry"]).expect_code(0);
    home.write(
        "profiles/swap/cordis.patch.yml",
        "- {id: relay-retry, name: relay-retry, config: {schedule: [5], tailDelayMs: 5}}\n",
    );
    let after = run_turn_in(&home, "swap", &patch, "hi");
    let record = &after.of_type("llm/retry")[0]["data"];
    assert_eq!((record["mode"].as_str(), record["headRetries"].as_u64()), (Some("always"), Some(1)));
}

#[test]
fn a_bare_star_fails_config_check_with_the_reason() {
    let home = relay_home("[10]", 10);
    home.write("profiles/relay/cordis.patch.yml", "- {id: relay-retry, config: {retryableCodes: ['*']}}\n");
    let run = home.run(&["config", "--profile", "relay", "check"]);
    run.expect_code(4);
    assert!(
        run.stderr.contains("row \"relay-retry\": config.retryableCodes: relay-retry: a bare \"*\" would retry every failure, including cancellations and configuration errors; list codes or prefixes such as \"HTTP_*\""),
        "{}",
        run.stderr
    );
}

#[test]
fn two_auth_failures_are_retried_with_the_configured_waits() {
    let home = relay_home("[10, 20]", 30);
    let (turn, _mock) = relay_turn(&home, "- status: 401\n- status: 401\n- ok: through another account\n");
    turn.run.expect_code(0);
    let delays: Vec<u64> =
        turn.of_type("llm/retry").iter().map(|retry| retry["data"]["delayMs"].as_u64().unwrap()).collect();
    assert_eq!(delays, [10, 20]);
    let shown: Vec<&str> = turn.run.stderr.lines().filter(|line| line.starts_with("Retrying")).collect();
    assert!(shown[0].starts_with("Retrying model request (1/2, then ∞) · 0.1s (AUTH: HTTP 401"), "{shown:?}");
    assert!(shown[1].starts_with("Retrying model request (2/2, then ∞) · 0.1s"), "{shown:?}");
    for (retry, started) in turn.of_type("llm/retry").iter().zip(turn.of_type("llm/retry-started")) {
        let waited = started["time"].as_u64().unwrap() - retry["time"].as_u64().unwrap();
        assert!(waited >= retry["data"]["delayMs"].as_u64().unwrap(), "waited {waited} ms");
    }
}

#[test]
fn unclassified_4xx_codes_are_retried_through_the_prefix_rule() {
    let home = relay_home("[10]", 10);
    let (turn, _mock) = relay_turn(&home, "- status: 404\n- ok: found\n");
    turn.run.expect_code(0);
    assert_eq!(turn.of_type("llm/retry")[0]["data"]["failure"]["code"], "HTTP_404");
}

#[test]
fn invalid_requests_and_context_overflows_are_not_retried() {
    for (body, code) in [
        ("{error: {message: 'messages: field required'}}", "INVALID_REQUEST"),
        ("{error: {message: \"This model's maximum context length is 65536 tokens\"}}", "CONTEXT_WINDOW_EXCEEDED"),
    ] {
        let home = relay_home("[10]", 10);
        let (turn, _mock) = relay_turn(&home, &format!("- status: 400\n  body: {body}\n- ok: never\n"));
        turn.run.expect_code(1);
        assert_eq!(turn.end()["error"]["code"], code);
        assert!(turn.of_type("llm/retry").is_empty());
    }
}

#[test]
fn the_tail_keeps_going_until_success() {
    let home = relay_home("[1]", 1);
    let script: String = "- status: 503\n".repeat(50) + "- ok: at last\n";
    let (turn, _mock) = relay_turn(&home, &script);
    turn.run.expect_code(0);
    let retries = turn.of_type("llm/retry");
    assert_eq!(retries.len(), 50);
    assert_eq!(retries[49]["data"]["retry"], 50);
    assert!(turn.run.stderr.contains("Retrying model request (1/1, then ∞) · 0.1s"), "{}", turn.run.stderr);
    assert!(turn.run.stderr.contains("Retrying model request (50/∞) · 0.1s"), "{}", turn.run.stderr);
    assert!(turn.run.stdout.contains("at last"));
}

#[test]
fn ctrl_c_ends_an_unbounded_chain_cleanly() {
    let home = relay_home("[]", 20);
    let mock = MockProcess::start(&home, "- status: 503\n");
    let patch = route_patch(&home, &mock, "", "");
    let child = spawn_dsh(
        &home,
        [
            OsStr::new("run"),
            "--profile".as_ref(),
            "relay".as_ref(),
            "--patch".as_ref(),
            patch.as_os_str(),
            "hi".as_ref(),
        ],
    );
    let log = || only_session_log(&home);
    let retried = wait_until(PATIENCE, || {
        log().is_some_and(|path| {
            std::fs::read_to_string(path).unwrap_or_default().matches("\"llm/retry-started\"").count() >= 3
        })
    });
    assert!(retried);
    dsh_e2e::process::signal(&child, libc::SIGINT);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    let events = log_events(&log().unwrap());
    assert_eq!(events.last().unwrap()["data"]["reason"]["kind"], "aborted");
    home.run(&["session", "verify", log().unwrap().to_str().unwrap()]).expect_code(0);
}
