//! Failover through the real binary, the real `route-failover` library and real stores: a primary
//! `dsh mock-server` that fails every request and a healthy backup. The step moves to the backup
//! at once, recorded (`route/switch`, then a `request/header` naming it) and shown; the circuit
//! opens after `failures` and later turns start on the backup, across processes through the
//! machine store and across two homes through a real `redis-server`; `check`, `explain` and
//! `replay` say what the row does.

use dsh_e2e::turns::{route_patch, run_turn_in, Turn, SECRET};
use dsh_e2e::{MockProcess, RedisServer, Run, TestHome};
use serde_json::Value;

/// No retries below the failover (llm-retry gives up at once), so every request is counted.
const NO_RETRY: &str = "{mode: normal, maxRetries: 0}";

/// A home whose profile `f` runs route-failover between `deepseek-official` (served by
/// `primary`) and `backup`, its circuit opening after two failures, kept in `store`.
fn failover_home(home: &TestHome, primary: &MockProcess, backup: &MockProcess, store: &str) -> std::path::PathBuf {
    home.run(&["plugin", "--profile", "f", "add", "route-failover"]).expect_code(0);
    let patch = route_patch(home, primary, NO_RETRY, "");
    let rows = format!(
        "- insert:\n    - id: llm-backup\n      name: llm-openai\n      config: {{provider: backup, baseUrl: '{}', \
         model: backup-model, apiKeyEnv: DEEPSEEK_API_KEY, retryPolicy: {NO_RETRY}}}\n\
         - id: route-failover\n  config:\n    routes: [deepseek-official, backup]\n    \
         breaker: {{failures: 2, windowMs: 600000, cooldownMs: 600000}}\n    store: '{store}'\n",
        backup.base_url
    );
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + &rows).unwrap();
    patch
}

fn hop_of(turn: &Turn) -> Vec<(String, String)> {
    turn.of_type("route/switch")
        .iter()
        .map(|hop| (hop["data"]["from"].as_str().unwrap().to_owned(), hop["data"]["to"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn a_failing_primary_hands_the_step_to_the_backup_at_once_and_the_log_records_the_hop() {
    let home = TestHome::new();
    let (primary, backup) =
        (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: from the backup\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    let turn = run_turn_in(&home, "f", &patch, "hi");
    turn.run.expect_code(0).expect_stdout("from the backup");
    turn.run.expect_stderr("switching to backup (deepseek-official: SERVER)");
    assert_eq!(hop_of(&turn), [("deepseek-official".to_owned(), "backup".to_owned())]);
    let kinds: Vec<&str> = turn.events.iter().map(|event| event["type"].as_str().unwrap()).collect();
    let hop = kinds.iter().position(|kind| *kind == "route/switch").unwrap();
    assert_eq!(
        kinds[hop - 1..hop + 4],
        ["assistant/attempt", "route/switch", "request/header", "llm/first-token", "assistant/message"]
    );
    let header = &turn.events[hop + 1]["data"];
    assert_eq!(
        (header["reason"].as_str(), header["header"]["config"]["provider"].as_str()),
        (Some("change"), Some("backup"))
    );
    assert_eq!(header["header"]["config"]["model"], "backup-model");
    assert_eq!(turn.events[hop]["ignorable"], Value::Bool(true), "DeepSeek Harness readers skip the hop");
    assert_eq!((primary.request_bodies().len(), backup.request_bodies().len()), (1, 1));
    let show = home.run(&["session", "show", turn.log.to_str().unwrap()]);
    show.expect_code(0).expect_stdout("switched to backup · route-failover · deepseek-official: SERVER");
}

/// Three turns, each its own `dsh` process: the first two fail on the primary (opening its
/// circuit after two failures), the third starts on the backup without touching the primary.
fn circuit_shared_by_processes(store: &str, second_home: bool) {
    let (home, other) = (TestHome::new(), TestHome::new());
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, store);
    let other_patch = failover_home(&other, &primary, &backup, store);
    for (turn, primary_requests) in [(1, 1), (2, 2)] {
        let done = run_turn_in(&home, "f", &patch, &format!("turn {turn}"));
        done.run.expect_code(0);
        assert_eq!(primary.request_bodies().len(), primary_requests);
    }
    let (third_home, third_patch) = if second_home { (&other, &other_patch) } else { (&home, &patch) };
    let third = run_turn_in(third_home, "f", third_patch, "turn 3");
    third.run.expect_code(0).expect_stdout("fine");
    assert!(hop_of(&third).is_empty(), "no hop: the turn started on the backup");
    let header = &third.of_type("request/header")[0]["data"]["header"]["config"]["provider"];
    assert_eq!(header, "backup");
    assert_eq!(primary.request_bodies().len(), 2, "the open circuit kept the third turn off the primary");
}

#[test]
fn an_open_circuit_keeps_later_turns_of_other_processes_off_the_primary_through_the_machine_store() {
    circuit_shared_by_processes("machine", false);
}

#[test]
fn two_homes_sharing_one_redis_server_see_one_circuit() {
    let redis = RedisServer::start();
    circuit_shared_by_processes(&redis.url, true);
}

#[test]
fn a_memory_circuit_is_one_process_only() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    for _ in 0..3 {
        run_turn_in(&home, "f", &patch, "hi").run.expect_code(0);
    }
    assert_eq!(primary.request_bodies().len(), 3, "each process starts with a closed circuit");
}

#[test]
fn bad_failover_rows_are_named_by_row_and_key() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    let bad = "\n- id: route-failover\n  config:\n    routes: [deepseek-official, nowhere, deepseek-official]\n    \
               breaker: {failures: 0, windowMs: -1, cooldownMs: 99999999999}\n\
               - id: llm-backup\n  config:\n    contextWindow: 0\n";
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + bad).unwrap();
    let check = Run::of(home.dsh().args(["config", "--profile", "f", "--patch"]).arg(&patch).arg("check"));
    check.expect_code(4);
    for expected in [
        "row \"route-failover\": config.routes[2]: route-failover: \"deepseek-official\" is listed twice",
        "row \"route-failover\": config.breaker.failures: route-failover: must be an integer from 1 to 1000, got 0",
        "row \"route-failover\": config.breaker.windowMs: route-failover: must be an integer from 1 to 2147483647, got -1",
        "row \"route-failover\": config.breaker.cooldownMs: route-failover: must be an integer from 1 to 2147483647",
        "row \"llm-backup\": config.contextWindow: must be a positive whole number of tokens",
    ] {
        assert!(check.stderr.contains(expected), "missing {expected:?} in:\n{}", check.stderr);
    }
}

#[test]
fn a_route_no_provider_row_serves_is_a_check_problem() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    let bad = "\n- id: route-failover\n  config:\n    routes: [deepseek-official, nowhere]\n";
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + bad).unwrap();
    let check = Run::of(home.dsh().args(["config", "--profile", "f", "--patch"]).arg(&patch).arg("check"));
    check.expect_code(4).expect_stderr(
        "row \"route-failover\": config.routes[1]: no enabled provider row serves route \"nowhere\" (routes: backup, deepseek-official)",
    );
}

#[test]
fn config_explain_shows_the_failover_target_next_to_the_retry_action() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    let explain = |json: bool| {
        let mut command = home.dsh();
        command.args(["config", "--profile", "f", "--patch"]).arg(&patch).arg("explain");
        if json {
            command.arg("--json");
        }
        Run::of(&mut command)
    };
    let shown = explain(false);
    shown.expect_code(0).expect_stdout("SERVER                   route-failover       switches to backup right away");
    let document: Value = serde_json::from_str(&explain(true).stdout).unwrap();
    let route = |name: &str| {
        document["routes"].as_array().unwrap().iter().find(|route| route["provider"] == name).unwrap().clone()
    };
    let server = &route("deepseek-official")["codes"]["SERVER"];
    assert_eq!(server["failover"], serde_json::json!({"row": "route-failover", "route": "backup"}));
    assert_eq!(server["action"], "no-retry", "maxRetries 0 below the failover");
    assert!(route("deepseek-official")["codes"]["AUTH"].get("failover").is_none(), "AUTH is not an outage code");
    assert!(route("backup")["codes"]["SERVER"].get("failover").is_none(), "the last route falls through");
}

#[test]
fn replay_says_how_many_failed_turns_a_failover_would_have_completed() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    let without = home.write("without.yml", "- id: route-failover\n  disabled: true\n");
    let failed = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--profile", "f", "--patch"])
            .arg(&patch)
            .arg("--patch")
            .arg(&without)
            .arg("hi"),
    );
    failed.expect_code(1);
    let replay = Run::of(
        home.dsh()
            .args(["session", "replay", "--all", "--profile", "f", "--patch"])
            .arg(&patch)
            .arg("--patch")
            .arg(&without)
            .arg("--vs")
            .arg(format!("f:{}", patch.display())),
    );
    replay.expect_code(0).expect_stdout(
        "candidate B: with this failover, 1 of the 1 failed turns would have completed (1 request went to a route this log never sent to, assumed to answer",
    );
}

/// The Redis script and `dsh_abi::breaker::apply` answer the same on the same events: random
/// sequences of admits, failures and successes at random times, against a real `redis-server`.
#[test]
fn the_redis_breaker_script_follows_the_breaker_maths() {
    use dsh_abi::breaker::{apply, BreakerEvent, BreakerPolicy, BreakerState};
    use dsh_host::counters::{CounterStore, MemoryStore, RedisStore};
    use proptest::prelude::*;
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url).unwrap();
    let policy = BreakerPolicy { failures: 3, window_ms: 1_000.0, cooldown_ms: 400.0 };
    let events = proptest::collection::vec((0usize..3, 0u32..600), 1..60);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&events, |steps| {
            let key = format!("equivalence-{}", case.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
            let (mut state, memory) = (BreakerState::default(), MemoryStore::default());
            let mut now = 1_700_000_000_000.0;
            for (event, gap) in steps {
                now += f64::from(gap);
                let event = [BreakerEvent::Admit, BreakerEvent::Failure, BreakerEvent::Success][event];
                let expected = apply(&mut state, event, &policy, now);
                prop_assert_eq!(store.breaker(&key, event, &policy, now).unwrap(), expected);
                prop_assert_eq!(memory.breaker(&key, event, &policy, now).unwrap(), expected);
            }
            Ok(())
        })
        .unwrap();
}

/// A turn moved to the backup and interrupted there by `kill -9` is resumed on the backup, the
/// route the log's last header names, without a request to the primary.
#[test]
fn a_resumed_turn_continues_on_the_route_the_log_says() {
    use std::ffi::OsStr;
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "f", "add", "dsh-retry"]).expect_code(0);
    home.write(
        "profiles/f/cordis.patch.yml",
        "- id: model-error-retry\n  config: {initialDelayMs: 60000, maxDelayMs: 60000}\n",
    );
    let primary = MockProcess::start(&home, "- status: 503\n");
    let backup = MockProcess::start(&home, "- truncate: \"half an answer\"\n- ok: continued on the backup\n");
    let patch = failover_home(&home, &primary, &backup, "memory");
    let only_server = "\n- id: llm-backup\n  config: {provider: backup, baseUrl: 'BASE', model: backup-model, apiKeyEnv: DEEPSEEK_API_KEY, \
                       retryPolicy: {mode: normal, maxRetries: 0, retryableCodes: [SERVER]}}\n";
    let text = std::fs::read_to_string(&patch).unwrap() + &only_server.replace("BASE", &backup.base_url);
    std::fs::write(&patch, text).unwrap();
    let args =
        [OsStr::new("run"), "--profile".as_ref(), "f".as_ref(), "--patch".as_ref(), patch.as_os_str(), "hi".as_ref()];
    let mut child = dsh_e2e::turns::spawn_dsh(&home, args);
    let waiting = dsh_e2e::wait_until(dsh_e2e::PATIENCE, || {
        dsh_e2e::only_session_log(&home)
            .is_some_and(|log| std::fs::read_to_string(log).unwrap_or_default().contains("dsh-retry/v1"))
    });
    assert!(waiting, "dsh-retry never scheduled its retry on the backup");
    dsh_e2e::process::kill_9(&mut child);
    let log = dsh_e2e::only_session_log(&home).unwrap();
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    let resumed = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["session", "resume", &id, "--profile", "f", "--patch"])
            .arg(&patch),
    );
    resumed.expect_code(0).expect_stdout("continued on the backup");
    let events = dsh_e2e::log_events(&log);
    let headers: Vec<&Value> = events.iter().filter(|event| event["type"] == "request/header").collect();
    let last = &headers.last().unwrap()["data"];
    assert_eq!(
        (last["reason"].as_str(), last["header"]["config"]["provider"].as_str()),
        (Some("resume"), Some("backup"))
    );
    assert_eq!((primary.request_bodies().len(), backup.request_bodies().len()), (1, 2));
    home.run(&["session", "verify", &id]).expect_code(0);
}

/// `config counters` shows an open circuit and `--reset` closes it: the next turn tries the
/// primary again.
#[test]
fn an_open_circuit_is_listed_and_reset_from_the_command_line() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "machine");
    for turn in ["one", "two"] {
        run_turn_in(&home, "f", &patch, turn).run.expect_code(0);
    }
    let counters = |extra: &[&str]| {
        Run::of(home.dsh().args(["config", "--profile", "f", "--patch"]).arg(&patch).arg("counters").args(extra))
    };
    counters(&[]).expect_code(0).expect_stdout("  route-failover:deepseek-official  open until 20");
    let listed: Value = serde_json::from_str(&counters(&["--json"]).stdout).unwrap();
    assert_eq!(listed[0]["circuits"]["route-failover:deepseek-official"]["phase"], "open");
    counters(&["--reset", "route-failover:deepseek"]).expect_code(0).expect_stdout("reset 1 counter");
    counters(&[]).expect_code(0).expect_stdout("no counters");
    run_turn_in(&home, "f", &patch, "three").run.expect_code(0);
    assert_eq!(primary.request_bodies().len(), 3, "the closed circuit let the turn try the primary again");
}

/// A store that cannot be reached is a `check` problem; a run fails over as if every circuit were
/// closed (`onStoreError: open`), with one warning for the turn.
#[test]
fn an_unreachable_circuit_store_fails_over_with_one_warning() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: fine\n"));
    let patch = failover_home(&home, &primary, &backup, "redis://127.0.0.1:1");
    let check = Run::of(home.dsh().args(["config", "--profile", "f", "--patch"]).arg(&patch).arg("check"));
    check.expect_code(4).expect_stderr("row \"route-failover\": config.store: the counter store cannot be reached");
    let turn = run_turn_in(&home, "f", &patch, "hi");
    turn.run.expect_code(0).expect_stdout("fine");
    let warnings = turn.run.stderr.matches("route-failover: the circuit store cannot be reached").count();
    assert_eq!(warnings, 1, "{}", turn.run.stderr);
    assert_eq!(hop_of(&turn), [("deepseek-official".to_owned(), "backup".to_owned())]);
}

#[test]
fn failover_rows_of_opposite_orders_are_warned_about_and_a_step_they_bounce_ends_with_failover_loop() {
    let home = TestHome::new();
    let (primary, backup) =
        (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- status: 503\n"));
    let patch = failover_home(&home, &primary, &backup, "memory");
    let reversed = "- insert:\n    - id: failover-back\n      name: route-failover\n      config:\n        routes: [backup, deepseek-official]\n        breaker: {failures: 1000, windowMs: 1, cooldownMs: 1}\n";
    let never_opening = std::fs::read_to_string(&patch)
        .unwrap()
        .replace("failures: 2, windowMs: 600000, cooldownMs: 600000", "failures: 1000, windowMs: 1, cooldownMs: 1");
    std::fs::write(&patch, never_opening + reversed).unwrap();
    let check = home.run(&["config", "--profile", "f", "check", "--patch", patch.to_str().unwrap()]);
    check.expect_code(0).expect_stderr(
        "row \"failover-back\": config.routes: orders backup before deepseek-official, which row \"route-failover\" orders the other way",
    );
    let turn = run_turn_in(&home, "f", &patch, "hi");
    turn.run.expect_code(1);
    assert_eq!(turn.end()["error"]["code"], "FAILOVER_LOOP", "{}", turn.end());
    assert_eq!(turn.of_type("route/switch").len(), 8, "MAX_HOPS_IN_A_ROW hops, then the step ends");
    assert_eq!(primary.request_bodies().len() + backup.request_bodies().len(), 9);
}

#[test]
fn a_turn_never_starts_on_a_route_whose_context_window_is_below_the_request() {
    let home = TestHome::new();
    let (primary, backup) = (MockProcess::start(&home, "- status: 503\n"), MockProcess::start(&home, "- ok: tiny\n"));
    let patch = failover_home(&home, &primary, &backup, "machine");
    let text = std::fs::read_to_string(&patch)
        .unwrap()
        .replace("model: backup-model,", "model: backup-model, contextWindow: 10,");
    std::fs::write(&patch, text).unwrap();
    for _ in 0..2 {
        run_turn_in(&home, "f", &patch, "open the primary's circuit").run.expect_code(1);
    }
    let third = run_turn_in(&home, "f", &patch, "a prompt far longer than the backup's ten-token window can hold");
    third.run.expect_code(1);
    let header = &third.of_type("request/header")[0]["data"]["header"]["config"]["provider"];
    assert_eq!(header, "deepseek-official", "the turn started where the request fits, though its circuit is open");
    assert!(backup.request_bodies().is_empty(), "the small backup never got a request");
}
