//! The retry budget through the real binary, the real `retry-budget` library and real stores: two
//! `dsh` processes see one budget through the `machine` store and through a real `redis-server`;
//! an unreachable store is named by `check` and fails open (one warning per turn) or closed (the
//! refusal in the log and in `session show`); a small storm stays near one request per turn.

use std::process::Stdio;

use dsh_e2e::turns::{route_patch, SECRET};
use dsh_e2e::{log_events, MockProcess, RedisServer, Run, TestHome};

/// Waits of 5 ms, up to 5 retries, for every code: a failing relay makes each turn send six
/// requests when nothing holds the retries back.
const FAST: &str = "{mode: normal, maxRetries: 5, retryableCodes: [SERVER], backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}";

/// A profile `b` with the budget, its row configured with `config` (a YAML flow mapping).
fn budget_home(config: &str) -> (TestHome, MockProcess, std::path::PathBuf) {
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "b", "add", "retry-budget"]).expect_code(0);
    let mock = MockProcess::start(&home, "- status: 503\n");
    let patch = route_patch(&home, &mock, FAST, "");
    let budget = format!("\n- id: retry-budget\n  config: {config}\n");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + &budget).unwrap();
    (home, mock, patch)
}

fn turn(home: &TestHome, patch: &std::path::Path) -> Run {
    Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--profile", "b", "--patch"]).arg(patch).arg("hi"))
}

fn counters(home: &TestHome, patch: &std::path::Path, extra: &[&str]) -> Run {
    Run::of(home.dsh().args(["config", "--profile", "b", "--patch"]).arg(patch).arg("counters").args(extra))
}

/// Two runs, one after the other: the second must meet the budget the first spent; `config
/// counters` shows it, and a reset gives the next run its retries back.
fn shared_budget(store: &str) {
    let (home, mock, patch) = budget_home(&format!("{{maxTokens: 4, store: '{store}'}}"));
    let first = turn(&home, &patch);
    first.expect_code(1);
    assert!(
        first.stderr.contains(
            "dsh: retry refused by row \"retry-budget\": the retry budget of route:deepseek-official is spent"
        ),
        "{}",
        first.stderr
    );
    assert_eq!(mock.request_bodies().len(), 2, "4 tokens: one retry goes ahead (3 left), the next would leave 2");
    let second = turn(&home, &patch);
    second.expect_code(1);
    assert_eq!(mock.request_bodies().len(), 3, "the second process found the budget spent: no retry at all");

    let listed = counters(&home, &patch, &["--json"]);
    listed.expect_code(0);
    let stores: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(stores[0]["rows"], serde_json::json!(["retry-budget"]), "{}", listed.stdout);
    assert!(stores[0]["counters"]["retry-budget:route:deepseek-official"].is_number(), "{}", listed.stdout);
    counters(&home, &patch, &["retry-budget:route:"])
        .expect_code(0)
        .expect_stdout("  retry-budget:route:deepseek-official  ");
    counters(&home, &patch, &["--reset"]).expect_code(0).expect_stdout("reset ");
    counters(&home, &patch, &[]).expect_code(0).expect_stdout("  no counters");
    turn(&home, &patch).expect_code(1);
    assert_eq!(mock.request_bodies().len(), 5, "the reset budget let one retry go ahead again");
}

#[test]
fn two_processes_share_one_budget_through_the_machine_store() {
    shared_budget("machine");
}

#[test]
fn two_processes_share_one_budget_through_redis() {
    let redis = RedisServer::start();
    shared_budget(&redis.url);
}

#[test]
fn a_memory_store_is_one_process_budget() {
    let (home, mock, patch) = budget_home("{maxTokens: 4, store: memory}");
    for expected in [2, 4] {
        turn(&home, &patch).expect_code(1);
        assert_eq!(mock.request_bodies().len(), expected, "each process starts with a full bucket");
    }
    counters(&home, &patch, &[]).expect_code(0).expect_stdout("each dsh process keeps its own memory counters");
}

#[test]
fn an_unreachable_store_is_named_by_check_and_a_run_fails_open_with_one_warning_per_turn() {
    let (home, mock, patch) = budget_home("{maxTokens: 4, store: 'redis://127.0.0.1:1'}");
    let check = home.run(&["config", "--profile", "b", "check", "--patch", patch.to_str().unwrap()]);
    check.expect_code(4);
    assert!(
        check.stderr.contains(
            "row \"retry-budget\": config.store: the counter store cannot be reached: cannot reach redis://127.0.0.1:1"
        ),
        "{}",
        check.stderr
    );
    counters(&home, &patch, &[]).expect_code(1).expect_stderr("cannot reach redis://127.0.0.1:1");
    let run = turn(&home, &patch);
    run.expect_code(1);
    assert_eq!(mock.request_bodies().len(), 6, "fail open: every retry goes ahead");
    let warnings = run.stderr.matches("dsh: warning: retry-budget: the budget store cannot be reached").count();
    assert_eq!(warnings, 1, "one warning per turn: {}", run.stderr);
    assert_eq!(run.stderr.matches("warning").count(), 1, "one warning for one cause: {}", run.stderr);
}

#[test]
fn a_closed_row_refuses_when_its_store_is_unreachable_and_the_log_says_why() {
    let (home, mock, patch) = budget_home("{store: 'redis://127.0.0.1:1', onStoreError: closed}");
    let run = turn(&home, &patch);
    run.expect_code(1);
    assert_eq!(mock.request_bodies().len(), 1);
    let id = run.stderr.lines().last().unwrap().strip_prefix("session ").unwrap();
    let events = log_events(&home.session_log(id));
    let refused = events.iter().find(|event| event["type"] == "llm/retry-refused").expect("the refusal is logged");
    assert_eq!(refused["ignorable"], true);
    assert_eq!(refused["data"]["row"], "retry-budget");
    assert!(refused["data"]["reason"].as_str().unwrap().contains("onStoreError: closed"));
    home.run(&["session", "verify", id]).expect_code(0);
    let show = home.run(&["session", "show", id]);
    assert!(
        show.stdout.contains("    retry refused by retry-budget · the retry budget's store cannot be reached"),
        "{}",
        show.stdout
    );
}

#[test]
fn config_explain_shows_the_budget_in_front_of_every_retry() {
    let (home, _mock, patch) = budget_home("{store: machine}");
    let explain = home.run(&["config", "--profile", "b", "explain", "--json", "--patch", patch.to_str().unwrap()]);
    explain.expect_code(0);
    let routes: serde_json::Value = serde_json::from_str(&explain.stdout).unwrap();
    let server = &routes["routes"][0]["codes"]["SERVER"];
    assert_eq!(server["row"], "llm-retry");
    assert_eq!(server["action"], "retry");
    assert_eq!(server["delaysMs"].as_array().unwrap().len(), 4, "the budget lets four retries through: {server}");
    assert!(
        !home.path().join("stores/counters.json").exists() || {
            let counters = std::fs::read_to_string(home.path().join("stores/counters.json")).unwrap();
            !counters.contains("deepseek-official")
        },
        "explain spends no real budget"
    );
}

#[test]
fn a_small_storm_stays_near_one_request_per_turn_with_the_budget() {
    let sessions = 6;
    let storm = |config: Option<&str>| -> f64 {
        let (home, mock, patch) = budget_home(config.unwrap_or("{store: machine}"));
        if config.is_none() {
            home.run(&["plugin", "--profile", "b", "remove", "retry-budget"]).expect_code(0);
            let unbudgeted = std::fs::read_to_string(&patch)
                .unwrap()
                .replace("- id: retry-budget\n  config: {store: machine}\n", "");
            std::fs::write(&patch, unbudgeted).unwrap();
        }
        let children: Vec<_> = (0..sessions)
            .map(|_| {
                home.dsh()
                    .env("DEEPSEEK_API_KEY", SECRET)
                    .args(["run", "--profile", "b", "--patch"])
                    .arg(&patch)
                    .arg("hi")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let _ = child.wait_with_output();
        }
        mock.request_bodies().len() as f64 / sessions as f64
    };
    let without = storm(None);
    let with = storm(Some("{store: machine, maxTokens: 10}"));
    assert_eq!(without, 6.0, "every turn sends one request and five retries");
    assert!(with <= 2.0, "with the budget: {with} requests per turn");
}

#[test]
fn a_counter_of_the_wrong_type_in_the_machine_store_is_a_warning_not_a_silent_reset() {
    let (home, _mock, patch) = budget_home("{maxTokens: 4, store: machine}");
    std::fs::create_dir_all(home.path().join("stores")).unwrap();
    std::fs::write(home.path().join("stores/counters.json"), r#"{"retry-budget:route:deepseek-official": "full"}"#)
        .unwrap();
    turn(&home, &patch)
        .expect_code(1)
        .expect_stderr("\"retry-budget:route:deepseek-official\" holds \"full\", which is not what dsh keeps there; starting it again from 4");
}

/// The Redis counter script and `dsh_abi::store` answer the same on the same updates, a ceiling
/// below the floor included, against a real `redis-server` (whole numbers: the script keeps a
/// value's text as Lua prints it).
#[test]
fn the_redis_counter_script_follows_the_counter_maths() {
    use dsh_host::counters::{CounterStore, MemoryStore, RedisStore};
    use proptest::prelude::*;
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url).unwrap();
    let updates = proptest::collection::vec((-5i32..5, -3i32..8, -3i32..8), 1..30);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&updates, |updates| {
            let key = format!("equivalence-{}", case.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
            let (mut counters, memory) = (std::collections::HashMap::new(), MemoryStore::default());
            for (delta, floor, ceiling) in updates {
                let (delta, floor, ceiling) = (f64::from(delta), f64::from(floor), f64::from(ceiling));
                let expected = dsh_abi::store::add_in(&mut counters, &key, delta, 4.0, floor, ceiling);
                prop_assert_eq!(store.add(&key, delta, 4.0, floor, ceiling).unwrap(), expected);
                prop_assert_eq!(memory.add(&key, delta, 4.0, floor, ceiling).unwrap(), expected);
            }
            Ok(())
        })
        .unwrap();
}
