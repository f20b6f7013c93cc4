//! A retry storm: N `dsh run` sessions at once (`DSH_BENCH_STORM_SESSIONS`, default 50) against
//! one relay that fails every request (503) for the whole of their first turn, then recovers, and
//! each session runs its next turn. Measured without a budget and with `retry-budget` on each
//! store: requests the relay received per turn during the outage (retry amplification), turns
//! completed once it is back, and the median time those turns took. The policy is the default's
//! shape, ten times faster (waits of 50, 100, 200, 400, 800 ms), so a turn ends within the
//! outage when nothing holds its retries back.
//!
//! Then an outage with a backup: the primary fails every request for the whole run and a
//! healthy backup answers, with `route-failover` on each store. Two waves of N concurrent turns:
//! the requests that reach the primary in each (the first wave starts before any circuit has
//! opened; the second shows whether the open circuit is shared), turns completed, and the
//! second wave's median time to answer next to N turns against a healthy primary.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use dsh_e2e::{artifacts, RedisServer, TestHome};

const POLICY: &str = "{mode: normal, maxRetries: 5, backoff: {initialDelayMs: 50, maxDelayMs: 800, jitterRatio: 0}}";

/// `dsh mock-server` on `port` serving `script`, recording requests to `record`.
fn relay(home: &TestHome, port: u16, script: &str, record: &Path) -> Child {
    let script_path = home.write(&format!("relay-{port}-{}.yml", script.len()), script);
    let mut child = Command::new(artifacts().dsh())
        .args(["mock-server", "--listen", &format!("127.0.0.1:{port}"), "--script"])
        .arg(script_path)
        .arg("--record")
        .arg(record)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on"), "{line}");
    child
}

fn requests(record: &Path) -> usize {
    std::fs::read_to_string(record).map(|text| text.lines().count()).unwrap_or(0)
}

/// Runs `sessions` turns at once; returns how many completed and their median wall time (s).
fn turns(home: &TestHome, patch: &Path, sessions: usize) -> (usize, f64) {
    let started = Instant::now();
    let children: Vec<Child> = (0..sessions)
        .map(|_| {
            home.dsh()
                .env("DEEPSEEK_API_KEY", "sk-bench")
                .args(["run", "--profile", "storm", "--patch"])
                .arg(patch)
                .arg("hi")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut times = Vec::new();
    let mut completed = 0;
    for mut child in children {
        let status = child.wait().unwrap();
        times.push(started.elapsed().as_secs_f64());
        completed += usize::from(status.success());
    }
    times.sort_by(f64::total_cmp);
    (completed, times[times.len() / 2])
}

fn storm(label: &str, budget: Option<&str>, sessions: usize) {
    let home = TestHome::new();
    let port = dsh_e2e::free_port();
    home.write("profiles/storm/profile.yml", "bundles: [dsh-base]\n");
    if budget.is_some() {
        assert_eq!(home.run(&["plugin", "--profile", "storm", "add", "retry-budget"]).code, Some(0));
    }
    let mut patch_text = format!(
        "- id: llm-deepseek\n  config: {{provider: deepseek-official, baseUrl: 'http://127.0.0.1:{port}/v1', model: m, apiKeyEnv: DEEPSEEK_API_KEY, retryPolicy: {POLICY}}}\n"
    );
    if let Some(config) = budget {
        patch_text.push_str(&format!("- id: retry-budget\n  config: {config}\n"));
    }
    let patch: PathBuf = home.write("storm.yml", &patch_text);
    let outage_record = home.path().join("outage.jsonl");
    let mut outage = relay(&home, port, "- status: 503\n", &outage_record);
    let (failed_turns_completed, _) = turns(&home, &patch, sessions);
    dsh_e2e::process::kill_9(&mut outage);
    let amplification = requests(&outage_record) as f64 / sessions as f64;
    let recovered_record = home.path().join("recovered.jsonl");
    let mut recovered = relay(&home, port, "- ok: back\n", &recovered_record);
    let (completed, median) = turns(&home, &patch, sessions);
    dsh_e2e::process::kill_9(&mut recovered);
    println!(
        "| {label} | {amplification:.2} | {failed_turns_completed} of {sessions} | {completed} of {sessions} | {median:.2} s |"
    );
}

/// A home whose profile `storm` sends to a primary on `primary` with `route-failover` (in
/// `store`) to a backup on `backup`; `None`: no failover row.
fn failover_home(primary: u16, backup: u16, store: Option<&str>) -> (TestHome, PathBuf) {
    let home = TestHome::new();
    home.write("profiles/storm/profile.yml", "bundles: [dsh-base]\n");
    let mut patch_text = format!(
        "- id: llm-deepseek\n  config: {{provider: deepseek-official, baseUrl: 'http://127.0.0.1:{primary}/v1', model: m, apiKeyEnv: DEEPSEEK_API_KEY, retryPolicy: {POLICY}}}\n\
         - insert: [{{id: llm-backup, name: llm-openai, config: {{provider: backup, baseUrl: 'http://127.0.0.1:{backup}/v1', model: m, apiKeyEnv: DEEPSEEK_API_KEY, retryPolicy: {POLICY}}}}}]\n"
    );
    if let Some(store) = store {
        assert_eq!(home.run(&["plugin", "--profile", "storm", "add", "route-failover"]).code, Some(0));
        patch_text.push_str(&format!(
            "- id: route-failover\n  config: {{routes: [deepseek-official, backup], breaker: {{failures: 3, windowMs: 60000, cooldownMs: 60000}}, store: '{store}'}}\n"
        ));
    }
    let patch = home.write("storm.yml", &patch_text);
    (home, patch)
}

/// The median time to answer of `sessions` turns against a healthy primary.
fn healthy_median(sessions: usize) -> f64 {
    let (primary, backup) = (dsh_e2e::free_port(), dsh_e2e::free_port());
    let (home, patch) = failover_home(primary, backup, None);
    let mut relay = relay(&home, primary, "- ok: fine\n", &home.path().join("healthy.jsonl"));
    let (completed, median) = turns(&home, &patch, sessions);
    assert_eq!(completed, sessions);
    dsh_e2e::process::kill_9(&mut relay);
    median
}

fn failover_storm(label: &str, store: &str, sessions: usize, healthy: f64) {
    let (primary_port, backup_port) = (dsh_e2e::free_port(), dsh_e2e::free_port());
    let (home, patch) = failover_home(primary_port, backup_port, Some(store));
    let primary_record = home.path().join("primary.jsonl");
    let mut primary = relay(&home, primary_port, "- status: 503\n", &primary_record);
    let mut backup = relay(&home, backup_port, "- ok: from the backup\n", &home.path().join("backup.jsonl"));
    let (first_completed, _) = turns(&home, &patch, sessions);
    let first_wave = requests(&primary_record);
    let (second_completed, median) = turns(&home, &patch, sessions);
    let second_wave = requests(&primary_record) - first_wave;
    for child in [&mut primary, &mut backup] {
        dsh_e2e::process::kill_9(child);
    }
    println!(
        "| {label} | {} of {} | {first_wave} / {second_wave} | {median:.2} s | {:.2}× |",
        first_completed + second_completed,
        2 * sessions,
        median / healthy
    );
}

fn main() {
    let sessions: usize = std::env::var("DSH_BENCH_STORM_SESSIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(50);
    println!("### A retry storm: {sessions} sessions against a relay that fails their first turn, then recovers\n");
    println!("| budget | requests per turn during the outage | turns completed during the outage | turns completed after recovery | median time to answer after recovery |");
    println!("|---|---:|---:|---:|---:|");
    storm("none", None, sessions);
    storm("`retry-budget`, `store: memory` (one bucket per process)", Some("{store: memory}"), sessions);
    storm("`retry-budget`, `store: machine`", Some("{store: machine}"), sessions);
    let redis = RedisServer::start();
    storm("`retry-budget`, `store: redis://…`", Some(&format!("{{store: '{}'}}", redis.url)), sessions);
    println!();
    println!("### An outage with a backup: {sessions} sessions, two waves of turns, the primary down throughout\n");
    let healthy = healthy_median(sessions);
    println!("| `route-failover` store | turns completed during the outage | requests reaching the primary: first wave / second wave | median time to answer (second wave) | against a healthy primary ({healthy:.2} s) |");
    println!("|---|---:|---:|---:|---:|");
    failover_storm("`memory` (one circuit per process)", "memory", sessions, healthy);
    failover_storm("`machine`", "machine", sessions, healthy);
    failover_storm("`redis://…`", &redis.url, sessions, healthy);
    println!();
}
