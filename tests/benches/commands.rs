//! Whole-command timings: `dsh config check` on a profile with 4 plugins, cold (a new process
//! each time: compose, open and check every library, validate every config).

use std::process::Stdio;
use std::time::Instant;

use dsh_e2e::TestHome;

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
    let mut times: Vec<f64> = (0..31)
        .map(|_| {
            let started = Instant::now();
            let status = home
                .dsh()
                .args(["config", "--profile", "four", "check"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "| `dsh config check` cold, 4 plugins (whole process) | ≤ 50 ms | {:.1} ms (31 runs) |",
        times[times.len() / 2]
    );
}
