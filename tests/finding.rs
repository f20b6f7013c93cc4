//! Finding things from the command line: session ids by unique prefix, `session list` columns,
//! completion of profiles and session ids, the manual pages, did-you-mean for packages, and the
//! dsh command for a DeepSeek Harness habit.

use dsh_e2e::turns::session_id;
use dsh_e2e::{Run, TestHome};

/// Two demo sessions whose ids are given, so their prefixes are known.
fn home_with_sessions(ids: &[&str]) -> TestHome {
    let home = TestHome::new();
    let first = home.run(&["run", "--profile", "demo", "Say hello"]);
    first.expect_code(0);
    let made = session_id(&first);
    let sessions = home.path().join("sessions");
    let log = home.session_log(&made);
    let log = log.file_name().unwrap().to_str().unwrap();
    for id in ids {
        std::fs::create_dir_all(sessions.join(id)).unwrap();
        for file in [log, "dsh.json"] {
            let text = std::fs::read_to_string(sessions.join(&made).join(file)).unwrap();
            std::fs::write(sessions.join(id).join(file), text.replace(&made, id)).unwrap();
        }
    }
    std::fs::remove_dir_all(sessions.join(&made)).unwrap();
    home
}

#[test]
fn a_unique_id_prefix_names_a_session_and_an_ambiguous_one_lists_the_matches() {
    let home = home_with_sessions(&["764d9a22-1111", "81aa-1", "81ab-2"]);
    let show = home.run(&["session", "show", "764d"]);
    show.expect_code(0);
    assert!(show.stdout.starts_with("session 764d9a22-1111 · "), "{}", show.stdout);
    home.run(&["session", "verify", "764d9a"]).expect_code(0);
    home.run(&["run", "--session", "764d", "again"]).expect_code(0);
    let ambiguous = home.run(&["session", "show", "81a"]);
    ambiguous.expect_code(3);
    ambiguous.expect_stderr(
        "dsh: session id 81a is ambiguous: 2 sessions start with it (81aa-1, 81ab-2); give more of it\n",
    );
    home.run(&["session", "show", "9"]).expect_code(3);
}

#[test]
fn session_list_shows_each_sessions_profile_and_first_prompt() {
    let home = TestHome::new();
    home.run(&["run", "--profile", "demo", "Say hello\nin two lines"]).expect_code(0);
    let list = home.run(&["session", "list"]);
    list.expect_code(0);
    assert!(list.stdout.contains("  demo  1 turn  completed  \"Say hello in two lines\"\n"), "{}", list.stdout);
    let json: serde_json::Value = serde_json::from_str(&home.run(&["session", "list", "--json"]).stdout).unwrap();
    assert_eq!(
        (json[0]["profile"].as_str(), json[0]["firstPrompt"].as_str()),
        (Some("demo"), Some("Say hello\nin two lines"))
    );
}

/// What the shell gets for completing the last of `words` (`dsh` first).
fn completions(home: &TestHome, words: &[&str]) -> Vec<String> {
    let run = Run::of(
        home.dsh()
            .env("COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
            .env("_CLAP_COMPLETE_COMP_TYPE", "9")
            .env("_CLAP_COMPLETE_SPACE", "true")
            .env("_CLAP_IFS", "\n")
            .arg("--")
            .args(words),
    );
    run.expect_code(0);
    run.stdout.lines().map(str::to_owned).collect()
}

#[test]
fn the_shell_completes_profiles_and_session_ids_of_the_home() {
    let home = home_with_sessions(&["a1-session"]);
    home.run(&["plugin", "--profile", "relay", "add", "relay-retry"]).expect_code(0);
    assert_eq!(completions(&home, &["dsh", "run", "--profile", ""]), ["demo", "relay", "sdk", "web"]);
    assert_eq!(completions(&home, &["dsh", "session", "show", "a"]), ["a1-session"]);
    assert_eq!(completions(&home, &["dsh", "run", "--session", ""]), ["a1-session"]);
    let script = home.run(&["completions", "bash"]);
    script.expect_code(0);
    assert!(script.stdout.contains("COMPLETE=\"bash\""), "{}", script.stdout);
}

#[test]
fn every_page_the_manual_names_exists_and_dsh_1_has_exit_status_environment_and_files() {
    let home = TestHome::new();
    let main = home.run(&["man"]);
    main.expect_code(0);
    for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH FILES", "dsh\\-session\\-repair(1)"] {
        assert!(main.stdout.contains(section), "{section}: {}", main.stdout);
    }
    let repair = home.run(&["man", "session", "repair"]);
    repair.expect_code(0);
    assert!(repair.stdout.contains(".TH dsh-session-repair 1"), "{}", repair.stdout);
    assert!(repair.stdout.contains("Exit 5 if the log is damaged"), "{}", repair.stdout);
    home.run(&["man", "session", "nope"]).expect_code(3);
    let dir = home.path().join("man1");
    home.run(&["man", "--dir", dir.to_str().unwrap()]).expect_code(0);
    for page in ["dsh.1", "dsh-run.1", "dsh-session-repair.1", "dsh-plugin-add.1"] {
        assert!(dir.join(page).is_file(), "{page} missing");
    }
    assert!(!dir.join("dsh-plugin-probe.1").exists(), "a hidden command has no page");
}

#[test]
fn a_typo_of_a_bundled_package_gets_a_did_you_mean_and_the_list() {
    let add = TestHome::new().run(&["plugin", "add", "relay_retry"]);
    add.expect_code(3);
    assert!(add.stderr.contains("unknown package \"relay_retry\" (did you mean \"relay-retry\"?)"), "{}", add.stderr);
    assert!(
        add.stderr.contains("(bundled: dsh-retry, llm-retry, llm-retry-invariant, relay-retry, retry-budget"),
        "{}",
        add.stderr
    );
}

#[test]
fn deepseek_harness_invocations_are_answered_with_the_dsh_command() {
    let home = TestHome::new();
    let dump = home.run(&["--profile", "demo", "--dump-config"]);
    dump.expect_code(2);
    assert!(
        dump.stderr.ends_with("hint: DeepSeek Harness's --dump-config is `dsh config --profile demo dump` in dsh\n"),
        "{}",
        dump.stderr
    );
    let task = home.run(&["--profile", "demo", "fix the bug"]);
    task.expect_code(2);
    assert!(
        task.stderr.ends_with("hint: dsh runs a task through a command: `dsh run --profile demo 'fix the bug'`\n"),
        "{}",
        task.stderr
    );
    let bare = home.run(&["Say hello"]);
    assert!(
        bare.stderr.ends_with("hint: dsh runs a task through a command: `dsh run 'Say hello'`\n"),
        "{}",
        bare.stderr
    );
    let inside = home.run(&["run", "--bogus", "x"]);
    inside.expect_code(2);
    assert!(!inside.stderr.contains("hint: dsh runs"), "{}", inside.stderr);
}

#[test]
fn adding_what_is_installed_already_says_nothing_changed() {
    let home = TestHome::new();
    let first = home.run(&["plugin", "add", "relay-retry"]);
    first.expect_code(0);
    assert!(first.stdout.contains("pick this up at their next turn"), "{}", first.stdout);
    let again = home.run(&["plugin", "add", "relay-retry"]);
    again.expect_code(0);
    again.expect_stdout("relay-retry 0.1.0 is already installed in profile web; nothing changed\n");
}

#[test]
fn adding_again_a_package_whose_library_went_missing_puts_it_back() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "relay-retry"]).expect_code(0);
    let folder = home.path().join("profiles/web/plugins/relay-retry");
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|extension| extension == std::env::consts::DLL_EXTENSION) {
            std::fs::remove_file(path).unwrap();
        }
    }
    let broken = home.run(&["config", "check"]);
    broken.expect_code(4);
    assert!(broken.stderr.contains("install it again"), "{}", broken.stderr);
    let again = home.run(&["plugin", "add", "relay-retry"]);
    again.expect_code(0);
    assert!(again.stdout.starts_with("installed relay-retry 0.1.0 into profile web"), "{}", again.stdout);
    home.run(&["config", "check"]).expect_code(0);
}
