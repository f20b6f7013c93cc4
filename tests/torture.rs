//! Crash torture: `kill -9` the real `dsh` at random moments — while it streams, appends, waits
//! out a retry, or resumes — against a failing mock server, in a profile with the `dsh-retry`
//! bundle. After every kill, `dsh session repair` and `verify` succeed, every event `--json`
//! acknowledged (it prints a line only once it is durable) is in the log byte for byte, and
//! resuming never enqueues a continuation twice.
//!
//! CI runs a bounded number of rounds; `DSH_TORTURE_ROUNDS=1000` (benches/torture.sh) runs more.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_e2e::turns::{route_patch, SECRET};
use dsh_e2e::{session_dirs, wait_until, MockProcess, Run, TestHome};
use serde_json::Value;

const CI_ROUNDS: usize = 12;

/// A small deterministic generator (xorshift), so a failing round can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// Starts `dsh ARGS`, collects the lines it prints, waits until `ready` holds (the log exists),
/// kills it with SIGKILL `after` later (if it is still running), and returns the lines printed
/// before it died.
fn run_and_kill(home: &TestHome, args: &[&str], ready: impl FnMut() -> bool, after: Duration) -> Vec<String> {
    let mut child = home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dsh");
    let printed = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let printed = Arc::clone(&printed);
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // `run --json` opens with the session object, which is not an event.
                if line.starts_with("{\"type\"") {
                    printed.lock().unwrap().push(line);
                }
            }
        })
    };
    let started = wait_until(Duration::from_secs(30), ready);
    assert!(started, "dsh {args:?} did not get as far as a session log in 30 s");
    std::thread::sleep(after);
    let _ = child.kill();
    let status = child.wait().unwrap();
    assert!(status.code().is_none_or(|code| [0, 1, 130].contains(&code)), "dsh {args:?} exited with {status}");
    reader.join().unwrap();
    let lines = printed.lock().unwrap().clone();
    lines
}

/// Repair and verify succeed, and the log still holds every acknowledged event, in order.
fn check_log(home: &TestHome, log: &Path, acknowledged: &[String], round: usize) {
    let repair = home.run(&["session", "repair", log.to_str().unwrap()]);
    repair.expect_code(0);
    let verify = home.run(&["session", "verify", log.to_str().unwrap()]);
    verify.expect_code(0);
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert!(lines.len() >= acknowledged.len(), "round {round}: acknowledged events were lost");
    for (index, line) in acknowledged.iter().enumerate() {
        assert_eq!(lines[index], line, "round {round}: acknowledged event {index} differs");
    }
}

/// Every continuation id is in the log at most once, and there are no more continuations than
/// interrupted turns.
fn check_continuations(log: &Path, round: usize) {
    let events: Vec<Value> =
        std::fs::read_to_string(log).unwrap().lines().skip(1).map(|line| serde_json::from_str(line).unwrap()).collect();
    let continuations: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "user/message" && event["data"]["source"]["kind"] == "plugin")
        .map(|event| event["data"]["id"].as_str().unwrap())
        .collect();
    let unique: HashSet<&&str> = continuations.iter().collect();
    assert_eq!(
        unique.len(),
        continuations.len(),
        "round {round}: a continuation was enqueued twice: {continuations:?}"
    );
    let interrupted = events
        .iter()
        .filter(|event| event["type"] == "turn/end" && event["data"]["reason"]["kind"] == "interrupted")
        .count();
    assert!(
        continuations.len() <= interrupted,
        "round {round}: {} continuations for {interrupted} interruptions",
        continuations.len()
    );
}

fn script() -> String {
    let round = "\
- truncate: \"a partial answer cut by the relay\"
- status: 503
- reset: true
- ok: \"The answer, streamed slowly in small pieces so a kill can land while it streams. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.\"
  delayMs: 60
  chunkBytes: 16
";
    round.repeat(400)
}

#[test]
fn kill_9_at_random_moments_loses_no_committed_event() {
    let rounds = std::env::var("DSH_TORTURE_ROUNDS").ok().and_then(|rounds| rounds.parse().ok()).unwrap_or(CI_ROUNDS);
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "t", "add", "dsh-retry"]).expect_code(0);
    home.write(
        "profiles/t/cordis.patch.yml",
        "- {id: model-error-retry, name: dsh-retry, config: {initialDelayMs: 20, overloadInitialDelayMs: 20, maxDelayMs: 60, jitterRatio: 0, maxRetries: 3}}\n",
    );
    let mock = MockProcess::start(&home, &script());
    let patch = route_patch(
        &home,
        &mock,
        "{mode: normal, maxRetries: 3, backoff: {initialDelayMs: 20, maxDelayMs: 60, jitterRatio: 0}}",
        "",
    );
    let patch = patch.to_str().unwrap().to_owned();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..rounds {
        let before = session_dirs(&home);
        let new_log = || session_dirs(&home).difference(&before).next().map(|dir| dir.join("session.jsonl"));
        let prompt = format!("task {round}");
        let kill_after = Duration::from_millis(rng.below(400));
        let acknowledged = run_and_kill(
            &home,
            &["run", "--json", "--profile", "t", "--patch", &patch, &prompt],
            || new_log().is_some_and(|log| log.exists()),
            kill_after,
        );
        let log = new_log().expect("the run created its session");
        let dir = log.parent().unwrap().to_owned();
        check_log(&home, &log, &acknowledged, round);
        let id = dir.file_name().unwrap().to_str().unwrap().to_owned();
        let resume = ["session", "resume", id.as_str(), "--profile", "t", "--patch", patch.as_str()];
        if rng.below(2) == 0 {
            run_and_kill(&home, &resume, || true, Duration::from_millis(rng.below(400)));
        } else {
            let finished = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(resume));
            assert!(
                matches!(finished.code, Some(0 | 1)),
                "round {round}: resume exited with {:?}: {}",
                finished.code,
                finished.stderr
            );
        }
        check_log(&home, &log, &acknowledged, round);
        check_continuations(&log, round);
    }
}
