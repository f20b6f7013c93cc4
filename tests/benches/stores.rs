//! The session stores side by side in one run: a log in files under the home and the same log in
//! a real PostgreSQL server (started here with `initdb` and `pg_ctl` on 127.0.0.1, `fsync` and
//! synchronous commits on, as shipped). Appends through the session-log writer with commits
//! batched as fsyncs are (and one commit per event), `dsh session verify` of a 2,000,020-event
//! log, and `dsh session replay --all` over 1,000 stored sessions — whole processes for the last
//! two.
//!
//! `DSH_BENCH_STORE_EVENTS` and `DSH_BENCH_STORE_SESSIONS` make the log and the fleet smaller.

use std::path::Path;
use std::time::{Duration, Instant};

use dsh_e2e::logs::{self, Shape};
use dsh_e2e::{artifacts, PostgresServer, TestHome, PG_PASSWORD};
use dsh_session::store::SessionStore;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// The median wall time of `dsh ARGS` in `home` over `runs` runs (each must exit 0).
fn timed(home: &TestHome, args: &[&str], runs: usize) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let started = Instant::now();
                let output = home.dsh().args(args).output().unwrap();
                assert!(output.status.success(), "dsh {args:?}: {}", String::from_utf8_lossy(&output.stderr));
                started.elapsed()
            })
            .collect(),
    )
}

fn import(home: &TestHome, log: &Path) {
    let output = home.dsh().args(["session", "import"]).arg(log).output().unwrap();
    assert!(output.status.success(), "import {}: {}", log.display(), String::from_utf8_lossy(&output.stderr));
}

/// `count` small retry-heavy sessions, each with its own id, imported into both homes.
fn fleet(homes: [&TestHome; 2], count: u64, scratch: &Path) {
    let template = scratch.join("fleet-template.jsonl");
    logs::write_valid_log(&template, 48, Shape::RetryHeavy).unwrap();
    let text = std::fs::read_to_string(&template).unwrap();
    let (header, body) = text.split_once('\n').unwrap();
    for index in 0..count {
        let id = format!("fleet-{index:04}");
        let path = scratch.join(format!("{id}.jsonl"));
        std::fs::write(&path, format!("{}\n{body}", header.replace("\"id\":\"bench\"", &format!("\"id\":\"{id}\""))))
            .unwrap();
        for home in homes {
            import(home, &path);
        }
    }
}

fn row(what: &str, files: String, stored: String, ratio: f64) {
    println!("| {what} | {files} | {stored} | {ratio:.2}× |");
}

fn main() {
    let events = env_number("DSH_BENCH_STORE_EVENTS", 2_000_000);
    let sessions = env_number("DSH_BENCH_STORE_SESSIONS", 1_000);
    // Before any thread starts: the in-process store reads the password as dsh does.
    std::env::set_var("PGPASSWORD", PG_PASSWORD);
    let server = PostgresServer::start();
    let (files, stored) = (TestHome::new(), TestHome::new());
    server.use_in(&stored, &server.url("postgres"));
    artifacts();
    let scratch = tempfile::tempdir().unwrap();
    let stores = [
        SessionStore::files(files.path().join("sessions")),
        SessionStore::for_home(stored.path()).expect("the bench database"),
    ];
    let measured: Vec<(f64, f64)> =
        stores.iter().map(|store| logs::appends_per_second(store, "appends", 100_000, 500)).collect();
    fleet([&files, &stored], sessions, scratch.path());
    let replay_files = timed(&files, &["session", "replay", "--all"], 3);
    let replay_stored = timed(&stored, &["session", "replay", "--all"], 3);
    let log = scratch.path().join("big.jsonl");
    let written = logs::write_valid_log(&log, events, Shape::ChunkHeavy).unwrap();
    import(&stored, &log);
    let verify_files = timed(&files, &["session", "verify", log.to_str().unwrap()], 3);
    let verify_stored = timed(&stored, &["session", "verify", "bench"], 3);
    println!("### Session stores side by side: files and PostgreSQL (one run; PostgreSQL on 127.0.0.1, fsync and synchronous commits on)\n");
    println!("| what | files | PostgreSQL | PostgreSQL / files |");
    println!("|---|---:|---:|---:|");
    let rate = |value: f64| format!("{value:.0} events/s");
    let (file_rates, stored_rates) = (measured[0], measured[1]);
    row(
        "appends, committed as the writer commits (at the latest every 200 ms)",
        rate(file_rates.0),
        rate(stored_rates.0),
        stored_rates.0 / file_rates.0,
    );
    row(
        "appends, one commit (fsync or database commit) per event",
        rate(file_rates.1),
        rate(stored_rates.1),
        stored_rates.1 / file_rates.1,
    );
    let seconds = |value: Duration| format!("{:.2} s", value.as_secs_f64());
    row(
        &format!("`dsh session verify`, {written} events chunk-heavy (whole process, median of 3)"),
        seconds(verify_files),
        seconds(verify_stored),
        verify_stored.as_secs_f64() / verify_files.as_secs_f64(),
    );
    row(
        &format!("`dsh session replay --all` over {sessions} sessions of 48 events (whole process, median of 3)"),
        seconds(replay_files),
        seconds(replay_stored),
        replay_stored.as_secs_f64() / replay_files.as_secs_f64(),
    );
}
