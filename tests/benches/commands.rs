//! Whole-command timings: `dsh config check` on a profile with 4 plugins, cold (a new process
//! each time: compose, open and check every library, validate every config), and `dsh config
//! dump` over a layer of 40,000 `config` overrides of one row (the reference takes 1.1 s), and
//! `dsh session replay` of generated 100,000-event logs against the default configuration.

use std::process::Stdio;
use std::time::Instant;

use dsh_e2e::logs::{self, Shape};
use dsh_e2e::TestHome;

/// The median wall time of `runs` runs of `dsh ARGS` in `home`, in milliseconds.
fn median_ms(home: &TestHome, args: &[&str], runs: usize) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let status = home.dsh().args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
            assert!(status.success(), "dsh {args:?} failed");
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let home = TestHome::new();
    for package in ["relay-retry", "dsh-retry"] {
        assert!(home.run(&["plugin", "--profile", "four", "add", package]).code == Some(0));
    }
    home.write("profiles/four/cordis.patch.yml", "- {id: llm-retry, name: llm-retry, disabled: false}\n");
    let check = home.run(&["config", "--profile", "four", "check"]);
    assert_eq!(check.code, Some(0), "{}", check.stderr);
    assert!(
        check.stdout.contains("plugins: llm-retry, llm-retry-invariant, relay-retry, model-error-retry"),
        "{}",
        check.stdout
    );
    println!(
        "| `dsh config check` cold, 4 plugins (whole process) | ≤ 50 ms | {:.1} ms (31 runs) |",
        median_ms(&home, &["config", "--profile", "four", "check"], 31)
    );
    let overrides: String =
        (0..40_000).map(|n| format!("- {{id: llm-retry-invariant, config: {{mode: report, n: {n}}}}}\n")).collect();
    let layer = home.write("overrides.yml", &overrides);
    let dump = ["config", "--profile", "four", "dump", "--patch", layer.to_str().unwrap()];
    println!(
        "| `dsh config dump` over 40,000 `config` overrides of one row (whole process) | ≤ 1.1 s (the reference) | {:.2} s (5 runs) |",
        median_ms(&home, &dump, 5) / 1e3
    );
    for (name, shape) in [("chunk-heavy", Shape::ChunkHeavy), ("retry-heavy", Shape::RetryHeavy)] {
        let log = home.path().join(format!("replay-{name}.jsonl"));
        let events = logs::write_valid_log(&log, 100_000, shape).unwrap();
        let replay = ["session", "replay", "--profile", "web", log.to_str().unwrap()];
        println!(
            "| `dsh session replay`, {events} events ({name}), default configuration (whole process) | < 1 s | {:.3} s (5 runs) |",
            median_ms(&home, &replay, 5) / 1e3
        );
    }
}
