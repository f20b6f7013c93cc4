//! Several `dsh` processes at once on one session or one profile: one writer at a time (OS locks),
//! a second writer refused at once with exit 6, naming the session or profile and the holder,
//! touching nothing; readers never take a lock; a lock dies with its process; no acknowledged
//! event lost, no continuation sent twice, no file lost.

use std::path::{Path, PathBuf};
use std::process::Child;

use dsh_e2e::turns::{route_patch, session_id, spawn_collecting as start, SECRET};
use dsh_e2e::{log_events, wait_until, MockProcess, Run, TestHome, PATIENCE};

/// A finished quick turn's session id.
fn session_with_one_turn(home: &TestHome) -> String {
    let mock = MockProcess::start(home, "- ok: first answer\n");
    let patch = route_patch(home, &mock, "", "");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("one"));
    run.expect_code(0);
    session_id(&run)
}

fn log_of(home: &TestHome, id: &str) -> PathBuf {
    home.session_log(id)
}

/// Waits until the log holds `needle` (the writer got that far).
fn wait_for_log(log: &Path, needle: &str) {
    let found = wait_until(PATIENCE, || std::fs::read_to_string(log).unwrap_or_default().contains(needle));
    assert!(found, "{} never held {needle}", log.display());
}

fn assert_busy(run: &Run, what: &str, holder: u32) {
    run.expect_code(6);
    let expected = format!("{what} is busy: process {holder} is writing it");
    assert!(run.stderr.contains(&expected), "expected {expected:?} in {}", run.stderr);
}

#[test]
fn two_runs_on_one_session_the_second_is_refused_and_touches_nothing() {
    let home = TestHome::new();
    let id = session_with_one_turn(&home);
    let log = log_of(&home, &id);
    let held = MockProcess::start(&home, "- ok: the second answer\n  hold: answer\n");
    let patch = route_patch(&home, &held, "", "");
    let patch = patch.to_str().unwrap();
    let (first, _) = start(&home, &["run", "--session", &id, "--patch", patch, "two"]);
    held.wait_for_requests(1);
    let before = std::fs::read(&log).unwrap();
    let second =
        Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--session", &id, "--patch", patch, "three"]));
    assert_busy(&second, &format!("session {id}"), first.id());
    assert_eq!(std::fs::read(&log).unwrap(), before, "the refused run wrote nothing");
    held.release("answer");
    let output = first.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let events = log_events(&log);
    let seqs: Vec<u64> = events.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>(), "no duplicate or missing seq");
    assert_eq!(events.iter().filter(|event| event["type"] == "turn/start").count(), 2);
    assert!(!events.iter().any(|event| event["data"]["reason"]["kind"] == "interrupted"));
    home.run(&["session", "verify", &id]).expect_code(0);
}

#[test]
fn repair_during_a_run_is_refused_and_no_acknowledged_event_is_lost() {
    let home = TestHome::new();
    let mock = MockProcess::start(
        &home,
        "- status: 503\n- status: 503\n- ok: \"a streamed answer\"\n  chunkBytes: 8\n  hold: answer\n",
    );
    let patch = route_patch(
        &home,
        &mock,
        "{mode: normal, maxRetries: 5, backoff: {initialDelayMs: 300, maxDelayMs: 300, jitterRatio: 0}}",
        "",
    );
    let (run, acknowledged) = start(&home, &["run", "--json", "--patch", patch.to_str().unwrap(), "hi"]);
    let sessions = home.path().join("sessions");
    let new_log = || std::fs::read_dir(&sessions).ok()?.next()?.ok().map(|dir| dsh_e2e::log_in(&dir.path()));
    assert!(wait_until(PATIENCE, || new_log().is_some_and(|log| log.exists())));
    let id = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().file_name().into_string().unwrap();
    // While the run retries and while its answer is held, every repair is refused.
    while mock.request_bodies().len() < 3 {
        assert_busy(&home.run(&["session", "repair", &id]), &format!("session {id}"), run.id());
    }
    for _ in 0..3 {
        assert_busy(&home.run(&["session", "repair", &id]), &format!("session {id}"), run.id());
    }
    mock.release("answer");
    let output = run.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let written = std::fs::read_to_string(log_of(&home, &id)).unwrap();
    let lines: Vec<&str> = written.lines().skip(1).collect();
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(!acknowledged.is_empty());
    for line in &acknowledged {
        assert!(lines.contains(&line.as_str()), "an acknowledged event was lost: {line}");
    }
    home.run(&["session", "repair", &id]).expect_code(0);
    home.run(&["session", "verify", &id]).expect_code(0);
}

/// A session whose second turn is waiting out a one-minute retry in a running `dsh run`.
fn a_run_waiting_on_a_retry(home: &TestHome) -> (String, PathBuf, Child, MockProcess) {
    let id = session_with_one_turn(home);
    let log = log_of(home, &id);
    let failing = MockProcess::start(home, "- status: 503\n");
    let patch = route_patch(
        home,
        &failing,
        "{mode: normal, maxRetries: 5, backoff: {initialDelayMs: 60000, maxDelayMs: 60000, jitterRatio: 0}}",
        "",
    );
    let (run, _) = start(home, &["run", "--session", &id, "--patch", patch.to_str().unwrap(), "two"]);
    wait_for_log(&log, "\"llm/retry\"");
    (id, log, run, failing)
}

#[test]
fn a_lock_dies_with_its_process() {
    let home = TestHome::new();
    let (id, _, mut run, _mock) = a_run_waiting_on_a_retry(&home);
    home.run(&["session", "repair", &id]).expect_code(6);
    dsh_e2e::process::kill_9(&mut run);
    let repair = home.run(&["session", "repair", &id]);
    repair.expect_code(0);
    assert!(repair.stderr.contains("closed the interrupted turn"), "{}", repair.stderr);
}

#[test]
fn readers_take_no_lock_and_see_a_live_log() {
    let home = TestHome::new();
    let (id, log, mut run, _mock) = a_run_waiting_on_a_retry(&home);
    for args in [["session", "show", &id], ["session", "verify", &id], ["session", "list", "--json"]] {
        let read = home.run(&args);
        read.expect_code(0);
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut file| std::io::Write::write_all(&mut file, b"{\"type\":\"assistant/chunk\",\"se"))
        .unwrap();
    let verify = home.run(&["session", "verify", &id]);
    verify.expect_code(0);
    assert!(
        verify.stderr.contains(&format!("the last line is still being written by process {}", run.id())),
        "{}",
        verify.stderr
    );
    let list: serde_json::Value =
        serde_json::from_str(&home.run(&["session", "list", "--json"]).stdout).expect("session list --json");
    assert_eq!(list[0]["writer"], run.id(), "{list}");
    assert_eq!(list[0]["damage"], serde_json::Value::Null, "a live writer's last line is not damage: {list}");
    dsh_e2e::process::kill_9(&mut run);
}

#[test]
fn two_resumes_at_once_send_one_continuation() {
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "fb", "add", "dsh-retry"]).expect_code(0);
    home.write(
        "profiles/fb/cordis.patch.yml",
        "- id: model-error-retry\n  name: dsh-retry\n  config: {initialDelayMs: 60000, maxDelayMs: 60000}\n",
    );
    let failing = MockProcess::start(&home, "- truncate: \"half\"\n");
    let patch = route_patch(&home, &failing, "", "");
    let (mut run, _) = start(&home, &["run", "--profile", "fb", "--patch", patch.to_str().unwrap(), "hi"]);
    let sessions = home.path().join("sessions");
    let scheduled = wait_until(PATIENCE, || {
        std::fs::read_dir(&sessions).ok().and_then(|mut dir| dir.next()).is_some_and(|entry| {
            std::fs::read_to_string(dsh_e2e::log_in(&entry.unwrap().path()))
                .unwrap_or_default()
                .contains("dsh-retry/v1")
        })
    });
    assert!(scheduled);
    dsh_e2e::process::kill_9(&mut run);
    let id = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().file_name().into_string().unwrap();
    let answering = MockProcess::start(&home, "- ok: continued\n  hold: answer\n");
    let patch = route_patch(&home, &answering, "", "");
    let patch = patch.to_str().unwrap();
    let resume = ["session", "resume", id.as_str(), "--profile", "fb", "--patch", patch];
    let (first, _) = start(&home, &resume);
    answering.wait_for_requests(1);
    let second = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(resume));
    answering.release("answer");
    let first_pid = first.id();
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let winner = String::from_utf8_lossy(&first.stderr).into_owned();
    let loser = second;
    assert!(winner.contains("Continuing pending retry 1 after a restart."), "{winner}");
    assert_busy(&loser, &format!("session {id}"), first_pid);
    assert_eq!(answering.request_bodies().len(), 1, "the continuation was sent once");
    let continuations =
        log_events(&log_of(&home, &id)).iter().filter(|event| dsh_e2e::turns::from_plugin(event)).count();
    assert_eq!(continuations, 1);
}

#[test]
fn two_plugin_adds_at_once_both_land() {
    for round in 0..3 {
        let home = TestHome::new();
        home.run(&["config", "dump"]).expect_code(0);
        let adds: Vec<std::thread::JoinHandle<Run>> = ["relay-retry", "dsh-retry"]
            .into_iter()
            .map(|package| {
                let mut command = home.dsh();
                command.args(["plugin", "--profile", "web", "add", package]);
                std::thread::spawn(move || Run::of(&mut command))
            })
            .collect();
        for add in adds {
            let add = add.join().unwrap();
            add.expect_code(0);
        }
        let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
        for package in ["relay-retry", "dsh-retry"] {
            assert!(manifest.contains(&format!("{package}:")), "round {round}: {package} was lost:\n{manifest}");
        }
    }
}

#[test]
fn a_failed_add_on_a_hand_made_profile_folder_removes_only_what_it_made() {
    let home = TestHome::new();
    home.write("profiles/mine/cordis.patch.yml", "- {id: agent, disabled: true}\n");
    home.write("profiles/mine/notes.txt", "my notes");
    let add = home.run(&["plugin", "--profile", "mine", "add", "relay-retyr"]);
    add.expect_code(3);
    assert!(add.stderr.contains("unknown package \"relay-retyr\""), "{}", add.stderr);
    let mut left: Vec<String> = std::fs::read_dir(home.path().join("profiles/mine"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["cordis.patch.yml", "notes.txt"]);
    assert_eq!(std::fs::read_to_string(home.path().join("profiles/mine/notes.txt")).unwrap(), "my notes");
}

#[test]
fn a_package_name_that_leaves_the_profile_is_refused() {
    let home = TestHome::new();
    home.run(&["config", "dump"]).expect_code(0);
    let victim = home.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep.txt"), "keep").unwrap();
    home.write(
        "profiles/web/profile.yml",
        "bundles: [dsh-base]\npackages:\n  ../../victim: {version: '1', source: bundled, library: plugins/x/l.so, sha256: ab}\n",
    );
    let remove = home.run(&["plugin", "--profile", "web", "remove", "../../victim"]);
    assert_ne!(remove.code, Some(0));
    assert!(remove.stderr.contains("one path component"), "{}", remove.stderr);
    assert!(victim.join("keep.txt").exists(), "nothing outside the profile is deleted");
    let run = home.run(&["config", "check"]);
    assert!(
        run.stderr.contains("package name \"../../victim\" is refused: a package name is one path component"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_scoped_bundle_composes_from_its_folder_under_its_scope() {
    let home = TestHome::new();
    home.run(&["config", "dump"]).expect_code(0);
    home.write(
        "profiles/web/profile.yml",
        "bundles: [dsh-base, '@acme/bundle-x']\npackages:\n  '@acme/bundle-x': {version: '1.0.0', source: 'npm:@acme/bundle-x', library: plugins/@acme/bundle-x/libbundle_x.so, sha256: ab}\n",
    );
    home.write(
        "profiles/web/plugins/@acme/bundle-x/cordis.patch.yml",
        "- id: agent\n  config: {provider: deepseek-official, model: acme-model}\n",
    );
    home.run(&["config", "check"]).expect_code(0);
    let dump = home.run(&["config", "dump", "--origins"]);
    dump.expect_code(0).expect_stdout("acme-model");
    home.run(&["plugin", "--profile", "web", "remove", "@acme/bundle-x"]).expect_code(0);
    let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
    assert!(!manifest.contains("@acme"), "{manifest}");
    assert!(!home.path().join("profiles/web/plugins/@acme").exists(), "the emptied scope folder is removed");
}

#[test]
fn a_session_being_written_is_neither_deleted_nor_pruned() {
    let home = TestHome::new();
    let (id, log, mut run, _mock) = a_run_waiting_on_a_retry(&home);
    assert_busy(&home.run(&["session", "delete", &id]), &format!("session {id}"), run.id());
    let prune = home.run(&["session", "prune", "--older-than", "0s"]);
    prune.expect_code(0).expect_stderr(&format!("dsh: session {id} is busy: process {} is writing it", run.id()));
    prune.expect_stderr("dsh: deleted 0 sessions");
    assert!(log.exists(), "the session being written was removed");
    dsh_e2e::process::kill_9(&mut run);
    home.run(&["session", "delete", &id]).expect_code(0).expect_stdout(&format!("deleted {id}"));
    assert!(!log.parent().unwrap().exists());
}

#[test]
fn delete_removes_a_session_with_its_kept_files_and_prune_keeps_the_newest() {
    let home = TestHome::new();
    let ids: Vec<String> = (0..3).map(|_| session_with_one_turn(&home)).collect();
    let folder = log_of(&home, &ids[0]).parent().unwrap().to_owned();
    assert!(folder.join("patch-1.yml").exists());
    home.run(&["session", "delete", &ids[0][..8]]).expect_code(0).expect_stdout(&format!("deleted {}", ids[0]));
    assert!(!folder.exists(), "the folder and its kept files are gone");
    home.run(&["session", "delete", &ids[0], &ids[1]]).expect_code(3).expect_stderr(&format!("no session {}", ids[0]));
    assert!(!log_of(&home, &ids[1]).exists(), "a missing id does not stop the others");
    let session = session_with_one_turn(&home);
    let dry = home.run(&["session", "prune", "--older-than", "0s", "--keep", "1", "--dry-run", "--json"]);
    let dry: serde_json::Value = serde_json::from_str(&dry.expect_code(0).stdout).unwrap();
    assert_eq!((dry["deleted"].clone(), dry["kept"].clone()), (serde_json::json!([ids[2]]), serde_json::json!(1)));
    assert!(log_of(&home, &ids[2]).exists(), "a dry run removes nothing");
    home.run(&["session", "prune", "--older-than", "30d"]).expect_code(0).expect_stderr("deleted 0 sessions; 2 kept");
    let pruned = home.run(&["session", "prune", "--older-than", "0s", "--keep", "1"]);
    pruned.expect_code(0).expect_stdout(&format!("deleted {}", ids[2]));
    let listed = home.run(&["session", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed.expect_code(0).stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().iter().map(|s| s["id"].clone()).collect::<Vec<_>>(), [session]);
}
