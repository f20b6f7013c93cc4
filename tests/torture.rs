//! Crash torture: `kill -9` the real `dsh` at random moments — while it streams, appends, waits
//! out a retry, or resumes — against a failing mock server, in a profile with the `dsh-retry`
//! bundle. After every kill, `dsh session repair` and `verify` succeed, every event `--json`
//! acknowledged (it prints a line only once it is durable) is in the log byte for byte, and
//! resuming never enqueues a continuation twice.
//!
//! The same rounds run on a PostgreSQL store shared by two homes: each run is killed on one home
//! and repaired, verified and resumed from the other.
//!
//! CI runs a bounded number of rounds; `DSH_TORTURE_ROUNDS=1000` (benches/torture.sh) runs more.

use std::collections::HashSet;
use std::io::BufRead;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_e2e::turns::{route_patch, SECRET};
use dsh_e2e::{session_dirs, wait_until, MockProcess, PostgresServer, Run, TestHome, PATIENCE};
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
    let started = wait_until(PATIENCE, ready);
    assert!(started, "dsh {args:?} did not get as far as a session log");
    std::thread::sleep(after);
    let status = dsh_e2e::process::kill_9(&mut child);
    assert!(status.code().is_none_or(|code| [0, 1, 130].contains(&code)), "dsh {args:?} exited with {status}");
    reader.join().unwrap();
    let lines = printed.lock().unwrap().clone();
    lines
}

/// Where the rounds' sessions live: files in one home, or a PostgreSQL database two homes share
/// (each round runs on one home and is repaired and resumed from the other).
struct Place {
    homes: Vec<TestHome>,
    server: Option<PostgresServer>,
}

impl Place {
    fn files() -> Place {
        Place { homes: vec![TestHome::new()], server: None }
    }

    fn postgres() -> Place {
        let server = PostgresServer::start();
        let homes: Vec<TestHome> = (0..2).map(|_| TestHome::new()).collect();
        for home in &homes {
            server.use_in(home, &server.url("postgres"));
        }
        homes[0].run(&["session", "list"]).expect_code(0);
        server.migrate(&server.url("postgres"));
        Place { homes, server: Some(server) }
    }

    /// Waits, after a `kill -9`, until the killed run holds no writer lock any more.
    fn after_kill(&self) {
        if let Some(server) = &self.server {
            server.wait_until_no_writer();
        }
    }

    /// The ids of the sessions there now.
    fn sessions(&self) -> HashSet<String> {
        match &self.server {
            Some(server) => server.sql("postgres", "SELECT id FROM dsh_sessions").lines().map(str::to_owned).collect(),
            None => session_dirs(&self.homes[0])
                .iter()
                .filter(|dir| dsh_e2e::log_in(dir).exists())
                .map(|dir| dir.file_name().unwrap().to_str().unwrap().to_owned())
                .collect(),
        }
    }

    /// The session's log as written, read through `home` (`session export`).
    fn text(&self, home: &TestHome, id: &str) -> String {
        let export = home.run(&["session", "export", id]);
        export.expect_code(0);
        export.stdout.clone()
    }
}

/// Repair and verify succeed from `home`, and the log still holds every acknowledged event, in
/// order.
fn check_log(place: &Place, home: &TestHome, id: &str, acknowledged: &[String], round: usize) -> String {
    home.run(&["session", "repair", id]).expect_code(0);
    home.run(&["session", "verify", id]).expect_code(0);
    let text = place.text(home, id);
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert!(lines.len() >= acknowledged.len(), "round {round}: acknowledged events were lost");
    for (index, line) in acknowledged.iter().enumerate() {
        assert_eq!(lines[index], line, "round {round}: acknowledged event {index} differs");
    }
    text
}

/// Every continuation id is in the log at most once, and there are no more continuations than
/// interrupted turns.
fn check_continuations(text: &str, round: usize) {
    let events: Vec<Value> = text.lines().skip(1).map(|line| serde_json::from_str(line).unwrap()).collect();
    let continuations: Vec<&str> = events
        .iter()
        .filter(|event| dsh_e2e::turns::from_plugin(event))
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

/// The rounds to run: `DSH_TORTURE_ROUNDS`, else `ci`.
fn rounds(ci: usize) -> usize {
    std::env::var("DSH_TORTURE_ROUNDS").ok().and_then(|rounds| rounds.parse().ok()).unwrap_or(ci)
}

/// Sets up profile `t` (the `dsh-retry` bundle, short waits) in every home; returns the patch
/// pointing the route at a failing mock.
fn prepare(place: &Place, mock: &MockProcess) -> String {
    for home in &place.homes {
        home.run(&["plugin", "--profile", "t", "add", "dsh-retry"]).expect_code(0);
        home.write(
            "profiles/t/cordis.patch.yml",
            "- {id: model-error-retry, name: dsh-retry, config: {initialDelayMs: 20, overloadInitialDelayMs: 20, maxDelayMs: 60, jitterRatio: 0, maxRetries: 3}}\n",
        );
    }
    let policy = "{mode: normal, maxRetries: 3, backoff: {initialDelayMs: 20, maxDelayMs: 60, jitterRatio: 0}}";
    route_patch(&place.homes[0], mock, policy, "").to_str().unwrap().to_owned()
}

/// Runs `rounds` rounds: a run killed at a random moment on one home, then a resume (killed or
/// finished) from the next home, with the checks after each.
fn torture(place: &Place, rounds: usize) {
    let mock = MockProcess::start(&place.homes[0], &script());
    let patch = prepare(place, &mock);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..rounds {
        let (home, other) = (&place.homes[round % place.homes.len()], &place.homes[(round + 1) % place.homes.len()]);
        let before = place.sessions();
        let new_session = || place.sessions().difference(&before).next().cloned();
        let prompt = format!("task {round}");
        let kill_after = Duration::from_millis(rng.below(400));
        let acknowledged = run_and_kill(
            home,
            &["run", "--json", "--profile", "t", "--patch", &patch, &prompt],
            || new_session().is_some(),
            kill_after,
        );
        place.after_kill();
        let id = new_session().expect("the run created its session");
        check_log(place, other, &id, &acknowledged, round);
        let resume = ["session", "resume", id.as_str(), "--profile", "t", "--patch", patch.as_str()];
        if rng.below(2) == 0 {
            run_and_kill(other, &resume, || true, Duration::from_millis(rng.below(400)));
            place.after_kill();
        } else {
            let finished = Run::of(other.dsh().env("DEEPSEEK_API_KEY", SECRET).args(resume));
            assert!(
                matches!(finished.code, Some(0 | 1)),
                "round {round}: resume exited with {:?}: {}",
                finished.code,
                finished.stderr
            );
        }
        let text = check_log(place, home, &id, &acknowledged, round);
        check_continuations(&text, round);
    }
}

#[test]
fn kill_9_at_random_moments_loses_no_committed_event() {
    torture(&Place::files(), rounds(CI_ROUNDS));
}

#[test]
fn kill_9_across_two_homes_on_postgres_loses_no_committed_event_and_sends_no_continuation_twice() {
    torture(&Place::postgres(), rounds(CI_ROUNDS));
}
