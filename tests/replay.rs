//! `dsh session replay` through the real binary and real plugin libraries: a hand-built failure
//! history replayed against three configurations with the expected attempts and waits computed
//! by hand, a session replayed against its own profile, several candidates in one table, and a
//! home left byte for byte as it was.

use std::collections::BTreeMap;

use dsh_e2e::turns::{route_patch, run_turn, TINY};
use dsh_e2e::{files_under, MockProcess, Run, TestHome};
use serde_json::Value;

const T: u64 = 1_795_000_000_000;

/// A turn whose requests got 503 (sent at 0), 503 (sent at 600), 429 asking for 2 s (sent at
/// 1700), then the answer (sent at 3800): each attempt takes 100 ms, and the waits recorded are
/// 500, 1000 and 2000 ms (the default policy's, with its jitter at the middle).
fn known_history() -> String {
    let mut seq = 0;
    let mut lines =
        vec![r#"{"type":"session","version":0,"id":"known","createdAt":1795000000000,"delegationDepth":0}"#.to_owned()];
    let mut event = |at: u64, kind: &str, data: String| {
        lines.push(format!(r#"{{"type":"{kind}","seq":{seq},"time":{},"data":{data}}}"#, T + at));
        seq += 1;
    };
    event(0, "turn/start", r#"{"turn":1}"#.into());
    event(0, "step/start", r#"{"turn":1,"step":1}"#.into());
    event(
        0,
        "user/message",
        r#"{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#.into(),
    );
    event(
        0,
        "request/header",
        r#"{"header":{"config":{"provider":"deepseek-official","model":"m"}},"reason":"initial"}"#.into(),
    );
    let failures = [
        (100, r#"{"message":"HTTP 503","code":"SERVER","status":503}"#, 500),
        (700, r#"{"message":"HTTP 503","code":"SERVER","status":503}"#, 1000),
        (1800, r#"{"message":"HTTP 429","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":2000}"#, 2000),
    ];
    for (retry, (at, failure, delay)) in failures.iter().enumerate() {
        let retry = retry + 1;
        event(*at, "assistant/attempt", format!(r#"{{"turn":1,"step":1,"failure":{failure}}}"#));
        event(
            *at,
            "llm/retry",
            format!(
                r#"{{"retryId":"r","turn":1,"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"k","retry":{retry},"maxRetries":5,"delayMs":{delay},"failure":{failure}}}"#
            ),
        );
        event(at + delay, "llm/retry-started", format!(r#"{{"retryId":"r","turn":1,"step":1,"retry":{retry}}}"#));
    }
    event(
        4000,
        "assistant/message",
        r#"{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"ok"}]}}"#.into(),
    );
    event(4000, "step/end", r#"{"turn":1,"step":1}"#.into());
    event(4000, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#.into());
    lines.join("\n") + "\n"
}

fn replay(home: &TestHome, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["session", "replay", "--json"];
    all.extend_from_slice(args);
    let run = home.run(&all);
    run.expect_code(0);
    run.stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn attempts_and_waits(result: &Value) -> (u64, Vec<f64>, String) {
    let waits = result["waitsMs"].as_array().unwrap().iter().map(|wait| wait.as_f64().unwrap()).collect();
    (result["attempts"].as_u64().unwrap(), waits, result["outcome"].as_str().unwrap().to_owned())
}

#[test]
fn a_known_history_replays_against_the_default_policy_relay_retry_and_one_retry() {
    let home = TestHome::new();
    let log = home.write("known.jsonl", &known_history());
    home.run(&["plugin", "--profile", "relay", "add", "relay-retry"]).expect_code(0);
    let one_retry = home.write(
        "one.yml",
        "- id: llm-deepseek\n  config: {provider: deepseek-official, baseUrl: 'https://api.deepseek.com/v1', model: m, retryPolicy: {mode: normal, maxRetries: 1}}\n",
    );
    let lines = replay(
        &home,
        &[log.to_str().unwrap(), "--profile", "web", "--vs", "relay", "--vs", &format!(":{}", one_retry.display())],
    );
    let turn = &lines[0];
    assert_eq!((&turn["session"], &turn["turn"]), (&"known".into(), &1.into()));
    assert_eq!(attempts_and_waits(&turn["recorded"]), (4, vec![500.0, 1000.0, 2000.0], "completed".into()));
    assert_eq!(turn["recorded"]["answerAfterMs"], 4000.0);
    let candidates = turn["candidates"].as_array().unwrap();
    // llm-retry's default policy, jitter at the middle: 500, 1000, then the 2 s hint.
    assert_eq!(attempts_and_waits(&candidates[0]), (4, vec![500.0, 1000.0, 2000.0], "completed".into()));
    // relay-retry: 2 s (sent at 2100: the 429 of 1700), then 5 s (sent at 7200: the answer).
    assert_eq!(attempts_and_waits(&candidates[1]), (3, vec![2000.0, 5000.0], "completed".into()));
    assert_eq!(candidates[1]["answerAfterMs"], 7400.0);
    // maxRetries 1: one wait, then the second 503 ends it.
    assert_eq!(attempts_and_waits(&candidates[2]), (2, vec![500.0], "gave-up".into()));
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["candidates"][2]["lost"], 1);
    assert_eq!(summary["recorded"]["requests"], 4);
}

#[test]
fn a_session_replayed_against_its_own_profile_reproduces_its_decisions() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n- status: 502\n- ok: through\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let turn = run_turn(&home, &patch, "hi");
    turn.run.expect_code(0);
    let id = turn.log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    let lines = replay(&home, &[&id, "--patch", patch.to_str().unwrap()]);
    let (recorded, candidate) = (attempts_and_waits(&lines[0]["recorded"]), attempts_and_waits(&lines[0]["candidate"]));
    assert_eq!(recorded, (3, vec![5.0, 10.0], "completed".into()));
    assert_eq!(candidate, recorded);
}

#[test]
fn a_demo_session_replayed_against_its_own_profile_waits_its_recorded_jittered_waits() {
    let home = TestHome::new();
    let run = home.run(&["run", "--profile", "demo", "hi"]);
    run.expect_code(0);
    let id = dsh_e2e::turns::session_id(&run);
    let lines = replay(&home, &[&id]);
    let recorded = attempts_and_waits(&lines[0]["recorded"]);
    assert!(recorded.1.len() >= 2, "the demo retries: {recorded:?}");
    assert_eq!(attempts_and_waits(&lines[0]["candidate"]), recorded);
    let candidate = &lines.last().unwrap()["summary"]["candidates"][0];
    assert_eq!(candidate["sampledWaits"], 0, "{candidate}");
    assert_eq!(candidate["recordedWaits"].as_u64(), Some(recorded.1.len() as u64), "{candidate}");

    let other = home.write("other.yml", "- id: llm-demo
  config: {provider: demo, model: dsh-demo, script: [ok: x], retryPolicy: {mode: normal, backoff: {initialDelayMs: 7, jitterRatio: 0}}}\n");
    let text = home.run(&["session", "replay", &id, "--vs", &format!(":{}", other.display())]);
    text.expect_code(0).expect_stdout("waits sampled anew, at the middle of their range");
}

#[test]
fn replay_over_the_home_changes_no_file_and_prints_a_table() {
    let home = TestHome::new();
    for _ in 0..2 {
        home.run(&["run", "--profile", "demo", "hi"]).expect_code(0);
    }
    home.write("known.jsonl", &known_history());
    let snapshot = || -> BTreeMap<String, Vec<u8>> {
        files_under(home.path())
            .into_iter()
            .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
            .collect()
    };
    let before = snapshot();
    let run = home.run(&["session", "replay", "--all", "--since", "2020-01-01", "--profile", "demo"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("Assumption: the provider answers a request sent at time t"), "{}", run.stdout);
    assert!(run.stdout.contains("2 sessions, 2 turns replayed"), "{}", run.stdout);
    assert!(run.stdout.contains("  recorded          6"), "{}", run.stdout);
    let later = Run::of(home.dsh().args(["session", "replay", "--all", "--since", "2999-01-01"]));
    assert!(later.stdout.contains("0 sessions, 0 turns replayed"), "{}", later.stdout);
    assert_eq!(snapshot(), before, "replay wrote under the home");
}

/// The README's replay example, read from the README and run as written (with `dsh` the built
/// binary). The candidates and the table's rows are the README's; the figures depend on when the
/// recorded requests really went out, so they are not compared.
#[test]
fn the_readme_replay_example_runs_as_written() {
    let readme = std::fs::read_to_string(dsh_e2e::workspace_root().join("README.md")).unwrap();
    let start = readme.find("```sh\ndsh run --profile demo \"Say hello\"                    #").expect("the example");
    let script = &readme[start + "```sh\n".len()..];
    let script = &script[..script.find("```").unwrap()];
    let shown = &readme[start..];
    let shown = &shown[shown.find("```\ncandidate A").unwrap() + 4..];
    let shown = &shown[..shown.find("```").unwrap()];
    let home = TestHome::new();
    let run = Run::of(&mut home.shell(&format!("dsh() {{ \"$DSH\" \"$@\"; }}\n{script}")));
    run.expect_code(0);
    let printed = &run.stdout[run.stdout.find("candidate A").unwrap()..];
    let labels = |text: &str| -> Vec<String> {
        let label = |line: &str| match line.split_once(": ").filter(|_| line.contains(" sampled anew")) {
            Some((candidate, _)) => format!("{candidate}: … sampled anew"),
            None => line.split("  ").find(|part| !part.is_empty()).unwrap_or_default().to_owned(),
        };
        text.lines().filter(|line| !line.starts_with("session ")).map(label).collect()
    };
    assert_eq!(labels(printed), labels(shown), "{printed}");
}
