//! `dsh-retry` through the real binary: what it retries and what it leaves to provider policies,
//! and cold resume after `kill -9` — exactly one continuation, never for a user abort.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;

use dsh_e2e::turns::{route_patch, run_turn_in, session_id, spawn_dsh, SECRET};
use dsh_e2e::{log_events, only_session_log, wait_until, MockProcess, Run, TestHome, PATIENCE};
use serde_json::Value;

/// A home whose `fb` profile has the dsh-retry bundle and `config` for its row.
fn fallback_home(config: &str) -> TestHome {
    let home = TestHome::new();
    let add = home.run(&["plugin", "--profile", "fb", "add", "dsh-retry"]);
    add.expect_code(0);
    assert!(add.stdout.contains("inserts model-error-retry"), "{}", add.stdout);
    home.write(
        "profiles/fb/cordis.patch.yml",
        &format!("- id: model-error-retry\n  name: dsh-retry\n  config: {config}\n"),
    );
    home
}

const QUICK: &str = "{initialDelayMs: 5, overloadInitialDelayMs: 5, maxDelayMs: 20, jitterRatio: 0}";
const SLOW: &str = "{initialDelayMs: 60000, maxDelayMs: 60000}";

fn own_retries(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| {
            event["type"] == "llm/retry"
                && event["data"]["policyKey"].as_str().unwrap().starts_with("[\"dsh-retry/v1\"")
        })
        .collect()
}

#[test]
fn a_truncated_stream_is_retried_twice_then_fails() {
    let home = fallback_home(QUICK);
    let mock = MockProcess::start(&home, "- truncate: \"half\"\n");
    let turn = run_turn_in(&home, "fb", &route_patch(&home, &mock, "", ""), "hi");
    turn.run.expect_code(1);
    let retries = own_retries(&turn.events);
    assert_eq!(retries.len(), 2);
    assert_eq!(retries[1]["data"]["maxRetries"], 2);
    assert_eq!(turn.end()["error"]["code"], "STREAM_CLOSED");
    assert!(turn.run.stderr.contains("Retrying model request (1/2) · 0.1s (STREAM_CLOSED: "), "{}", turn.run.stderr);
    assert!(!turn.run.stderr.contains("warning"), "one line per retry:\n{}", turn.run.stderr);
    let patch = route_patch(&home, &mock, "", "");
    let verbose = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["-v", "run", "--profile", "fb", "--patch"])
            .arg(&patch)
            .arg("hi"),
    );
    assert!(
        verbose
            .stderr
            .contains("dsh: info: dsh-retry: retrying provider \"deepseek-official\" after 5ms (1/2, STREAM_CLOSED: "),
        "{}",
        verbose.stderr
    );
}

#[test]
fn a_failure_the_provider_policy_owns_is_never_retried_by_it() {
    let home = fallback_home(QUICK);
    let mock = MockProcess::start(&home, "- status: 503\n");
    let policy = "{mode: normal, maxRetries: 1, backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}";
    let turn = run_turn_in(&home, "fb", &route_patch(&home, &mock, policy, ""), "hi");
    turn.run.expect_code(1);
    assert_eq!(turn.of_type("llm/retry").len(), 1, "only llm-retry's one retry; its budget spent, SERVER stays owned");
    assert!(own_retries(&turn.events).is_empty());
    assert_eq!(turn.end()["error"]["code"], "SERVER");
}

#[test]
fn configured_codes_are_normalised_and_retried_with_the_ordinary_budget() {
    let home = fallback_home("{initialDelayMs: 5, overloadInitialDelayMs: 5, maxDelayMs: 20, jitterRatio: 0, retryableCodes: [' http_418 ']}");
    let mock = MockProcess::start(&home, "- status: 418\n  body: {error: {message: 'model overloaded'}}\n");
    let turn = run_turn_in(&home, "fb", &route_patch(&home, &mock, "", ""), "hi");
    assert_eq!(own_retries(&turn.events).len(), 2, "HTTP_418 is not PI_AI_ERROR, so it is no overload");
}

/// Starts `dsh run` on profile `fb` and waits until the log holds a dsh-retry record.
fn run_until_own_retry(home: &TestHome, patch: &Path) -> (Child, PathBuf) {
    let child = spawn_dsh(
        home,
        [OsStr::new("run"), "--profile".as_ref(), "fb".as_ref(), "--patch".as_ref(), patch.as_os_str(), "hi".as_ref()],
    );
    let scheduled = wait_until(PATIENCE, || {
        only_session_log(home)
            .is_some_and(|path| std::fs::read_to_string(path).unwrap_or_default().contains("dsh-retry/v1"))
    });
    assert!(scheduled, "dsh-retry never scheduled a retry");
    (child, only_session_log(home).unwrap())
}

fn resume(home: &TestHome, id: &str, patch: &Path) -> Run {
    Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["session", "resume", id, "--profile", "fb", "--patch"])
            .arg(patch),
    )
}

#[test]
fn after_kill_9_during_its_wait_resume_runs_exactly_one_continuation() {
    let home = fallback_home(SLOW);
    let failing = MockProcess::start(&home, "- truncate: \"half an answer\"\n");
    let (mut child, log) = run_until_own_retry(&home, &route_patch(&home, &failing, "", ""));
    dsh_e2e::process::kill_9(&mut child);
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    let answering = MockProcess::start(&home, "- ok: picking up where we left off\n");
    let patch = route_patch(&home, &answering, "", "");
    let first = resume(&home, &id, &patch);
    first.expect_code(0);
    assert!(first.stderr.contains("closed the interrupted turn (step/end, turn/end)"), "{}", first.stderr);
    assert!(first.stderr.contains("Continuing pending retry 1 after a restart. (dsh-retry)"), "{}", first.stderr);
    assert!(first.stdout.contains("picking up where we left off"), "{}", first.stdout);
    let second = resume(&home, &id, &patch);
    second.expect_code(0);
    assert!(second.stdout.contains("nothing to resume"), "{}", second.stdout);
    let events = log_events(&log);
    let continuations: Vec<&Value> = events.iter().filter(|event| dsh_e2e::turns::from_plugin(event)).collect();
    assert_eq!(continuations.len(), 1);
    let retry_id = own_retries(&events)[0]["data"]["retryId"].as_str().unwrap().to_owned();
    assert_eq!(continuations[0]["data"]["id"], format!("dsh-retry:resume:{id}:retry:{retry_id}:1"));
    assert_eq!(continuations[0]["data"]["source"]["summary"], "Continuing pending retry 1 after a restart.");
    let headers: Vec<&Value> = events.iter().filter(|event| event["type"] == "request/header").collect();
    assert_eq!(headers.last().unwrap()["data"]["reason"], "resume");
    // (A v4 log then ends with the restore mark the second resume wrote, as 0.2's restores do.)
    let last_end = events.iter().rev().find(|event| event["type"] == "turn/end").unwrap();
    assert_eq!(last_end["data"]["reason"]["kind"], "completed");
    let verify = home.run(&["session", "verify", &id]);
    verify.expect_code(0);
    assert_eq!(answering.request_bodies().len(), 1);
}

#[test]
fn a_user_abort_is_not_resumed() {
    let home = fallback_home(SLOW);
    let failing = MockProcess::start(&home, "- truncate: \"half\"\n");
    let patch = route_patch(&home, &failing, "", "");
    let (child, log) = run_until_own_retry(&home, &patch);
    dsh_e2e::process::signal(&child, libc::SIGINT);
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(130));
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    let run = resume(&home, &id, &patch);
    run.expect_code(0);
    assert!(run.stdout.contains("nothing to resume"), "{}", run.stdout);
    assert!(failing.request_bodies().len() == 1, "no new request was sent");
}

#[test]
fn a_completed_session_and_a_profile_without_the_plugin_have_nothing_to_resume() {
    let home = fallback_home(QUICK);
    let mock = MockProcess::start(&home, "- ok: done\n");
    let patch = route_patch(&home, &mock, "", "");
    let turn = run_turn_in(&home, "fb", &patch, "hi");
    let id = session_id(&turn.run);
    assert!(resume(&home, &id, &patch).stdout.contains("nothing to resume"));
    let plain = Run::of(home.dsh().args(["session", "resume", &id, "--patch"]).arg(&patch));
    assert!(plain.stdout.contains("nothing to resume"), "{}", plain.stdout);
}
