//! Coming from DeepSeek Harness: its package names install their bundled replacements, its old
//! settings point to where they live now, its logs are imported and continued, and `plugin add`
//! keeps the bundle list in step with the installed packages as the reference does.

use dsh_e2e::turns::{route_patch, session_id, SECRET, TINY};
use dsh_e2e::{log_events, workspace_root, MockProcess, Run, TestHome};

fn manifest(home: &TestHome) -> String {
    std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap()
}

#[test]
fn plugin_add_of_syncended_dsh_retry_installs_dsh_retry_and_says_so() {
    let home = TestHome::new();
    let run = home.run(&["plugin", "add", "@syncended/dsh-retry"]);
    run.expect_code(0);
    assert!(
        run.stdout.starts_with("@syncended/dsh-retry is replaced by dsh's bundled dsh-retry: installing dsh-retry\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("installed dsh-retry "), "{}", run.stdout);
    assert!(manifest(&home).contains("- dsh-retry"), "{}", manifest(&home));
}

#[test]
fn imrcpan_dsh_retry_in_either_form_installs_relay_retry() {
    for spec in ["github:imrcpan/dsh-retry", "imrcpan/dsh-retry"] {
        let home = TestHome::new();
        let run = home.run(&["plugin", "add", spec]);
        run.expect_code(0);
        assert!(run.stdout.contains(&format!("{spec} is replaced by dsh's bundled relay-retry")), "{}", run.stdout);
        assert!(manifest(&home).contains("- relay-retry"), "{spec}");
    }
}

#[test]
fn the_reference_llm_retry_is_already_in_the_base_bundle_and_nothing_changes() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let before = manifest(&home);
    let run = home.run(&["plugin", "add", "@deepseek-ai/dsh-llm-retry@0.1.0-rc.8"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("runs from the base bundle dsh-base, so there is nothing to install"),
        "{}",
        run.stdout
    );
    assert_eq!(manifest(&home), before);
}

#[test]
fn another_npm_package_is_not_found_with_what_dsh_installs_instead() {
    let home = TestHome::new();
    let run = home.run(&["plugin", "add", "@someone/dsh-cache"]);
    run.expect_code(3);
    assert!(run.stderr.contains("@someone/dsh-cache is a DeepSeek Harness (npm) package"), "{}", run.stderr);
    assert!(run.stderr.contains("relay-retry"), "{}", run.stderr);
    assert!(!home.path().join("profiles/web").exists(), "a refused add creates no profile");
}

#[test]
fn old_retry_settings_say_where_they_live_now() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let patch = home.write(
        "old.yml",
        "- {id: llm-retry, config: {maxTransientRetries: 3, initialDelayMs: 500}}\n\
         - insert: [{id: dsh-retry, name: dsh-retry, config: {schedule: [2000, 5000]}}]\n",
    );
    let run = home.run(&["config", "check", "--patch", patch.to_str().unwrap()]);
    run.expect_code(4);
    let lines: Vec<&str> = run.stderr.lines().collect();
    let after =
        |line: &str| lines[lines.iter().position(|l| *l == line).unwrap_or_else(|| panic!("{line:?}: {lines:?}")) + 1];
    let retry_hint = after("$DSH_HOME/old.yml: row \"llm-retry\": config.maxTransientRetries: llm-retry: unknown key \"maxTransientRetries\"");
    assert!(
        retry_hint.starts_with("  hint: llm-retry takes no config: each provider row's retryPolicy"),
        "{retry_hint}"
    );
    let schedule_hint =
        after("$DSH_HOME/old.yml: row \"dsh-retry\": config.schedule: dsh-retry: unknown key \"schedule\"");
    assert!(schedule_hint.contains("dsh plugin add relay-retry"), "{schedule_hint}");
}

#[test]
fn a_guard_naming_the_reference_package_meets_the_row_that_replaces_it() {
    let home = TestHome::new();
    let patch =
        home.write("guarded.yml", "- id: llm-retry\n  name: '@deepseek-ai/dsh-llm-retry'\n  config: {maxRetries: 8}\n");
    let run = home.run(&["config", "check", "--patch", patch.to_str().unwrap()]);
    run.expect_code(4)
        .expect_stderr("name \"@deepseek-ai/dsh-llm-retry\" for \"llm-retry\" is DeepSeek Harness's package")
        .expect_stderr("row \"llm-retry\": config.maxRetries: llm-retry: unknown key \"maxRetries\"")
        .expect_stderr("hint: llm-retry takes no config");
    let other = home.write("other.yml", "- id: llm-retry\n  name: '@syncended/dsh-retry'\n  config: {}\n");
    home.run(&["config", "check", "--patch", other.to_str().unwrap()])
        .expect_code(0)
        .expect_stderr("name mismatch for \"llm-retry\"");
}

#[test]
fn a_deepseek_harness_override_of_the_provider_row_is_applied_never_skipped() {
    let home = TestHome::new();
    let whole = "{provider: deepseek-official, baseUrl: 'https://api.deepseek.com/v1', model: deepseek-v4-flash, apiKeyEnv: DEEPSEEK_API_KEY}";
    let patch = home
        .write("h3.yml", &format!("- {{id: llm-deepseek, name: '@deepseek-ai/dsh-llm-deepseek', config: {whole}}}\n"));
    let check = home.run(&["config", "--patch", patch.to_str().unwrap(), "check"]);
    check.expect_code(0).expect_stderr("is DeepSeek Harness's package; in dsh the row is package \"llm-openai\"");
    assert!(!check.stderr.contains("name mismatch"), "{check}");
    let dump = home.run(&["config", "--patch", patch.to_str().unwrap(), "dump"]);
    dump.expect_code(0).expect_stdout("deepseek-v4-flash");
    let partial =
        home.write("h3-model.yml", "- {id: llm-deepseek, name: '@deepseek-ai/dsh-llm-deepseek', config: {model: m}}\n");
    home.run(&["config", "--patch", partial.to_str().unwrap(), "check"])
        .expect_code(4)
        .expect_stderr("row \"llm-deepseek\"");
}

#[test]
fn deepseek_harness_packages_dsh_does_not_have_say_what_to_do_instead() {
    let home = TestHome::new();
    for (package, instead) in [
        ("@deepseek-ai/dsh-tools", "`mcp` row"),
        ("@deepseek-ai/dsh-web-search-deepseek", "searches the web"),
        ("@deepseek-ai/dsh-session-persistence-jsonl", "always keeps session logs"),
    ] {
        home.run(&["plugin", "add", package])
            .expect_code(3)
            .expect_stderr(&format!("{package} is a DeepSeek Harness package dsh does not have: "))
            .expect_stderr(instead);
    }
    home.run(&["plugin", "add", "@deepseek-ai/dsh-llm-deepseek"])
        .expect_code(0)
        .expect_stdout("nothing to install (its row is the base bundle's llm-deepseek");
}

#[test]
fn a_deepseek_harness_row_id_points_to_the_row_that_does_its_job() {
    let home = TestHome::new();
    let patch =
        home.write("models.yml", "- id: agent-default-model\n  config: {provider: deepseek-official, model: m}\n");
    home.run(&["config", "check", "--patch", patch.to_str().unwrap()])
        .expect_code(0)
        .expect_stderr("patch: entry \"agent-default-model\" not found (patch entry 1); agent-default-model is a DeepSeek Harness row; in dsh the agent's route is the `agent` row's config.provider");
}

#[test]
fn a_name_keyed_entry_is_dropped_with_a_warning_naming_its_file_and_entry() {
    let home = TestHome::new();
    let patch = home.write("named.yml", "- {id: llm-retry}\n- {name: llm-retry, config: {}}\n");
    let run = home.run(&["config", "dump", "--patch", patch.to_str().unwrap()]);
    run.expect_code(0);
    let warning = run.stderr.lines().find(|line| line.contains("$DSH_HOME/named.yml")).expect("a warning");
    assert!(warning.ends_with("(patch entry 2)"), "{warning}");
}

#[test]
fn the_base_bundle_cannot_be_removed() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let before = manifest(&home);
    let run = home.run(&["plugin", "remove", "dsh-base"]);
    run.expect_code(1);
    assert!(run.stderr.contains("dsh-base is the base bundle every profile composes from"), "{}", run.stderr);
    assert_eq!(manifest(&home), before);
}

#[test]
fn plugin_add_restores_a_bundle_entry_deleted_by_hand() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "relay-retry"]).expect_code(0);
    let path = home.path().join("profiles/web/profile.yml");
    let edited = manifest(&home).replace("  - relay-retry\n", "");
    std::fs::write(&path, &edited).unwrap();
    let dump = home.run(&["config", "dump"]);
    assert!(!dump.stdout.contains("id: relay-retry"), "the hand edit took relay-retry out");
    let run = home.run(&["plugin", "add", "dsh-retry"]);
    run.expect_code(0);
    assert!(run.stdout.contains("restored the bundle entry of relay-retry"), "{}", run.stdout);
    assert!(home.run(&["config", "dump"]).stdout.contains("id: relay-retry"));
}

#[test]
fn a_listed_bundle_whose_package_folder_is_missing_is_named_missing() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "relay-retry"]).expect_code(0);
    std::fs::remove_dir_all(home.path().join("profiles/web/plugins/relay-retry")).unwrap();
    let run = home.run(&["config", "dump"]);
    assert_ne!(run.code, Some(0));
    assert!(
        run.stderr.contains(
            "the folder of profile bundle \"relay-retry\" is missing ($DSH_HOME/profiles/web/plugins/relay-retry)"
        ),
        "{}",
        run.stderr
    );
}

fn dsh_log(name: &str) -> std::path::PathBuf {
    workspace_root().join("tests/fixtures/conformance/dsh-logs").join(name)
}

#[test]
fn an_imported_reference_log_is_continued_by_run() {
    let home = TestHome::new();
    for (file, id) in [
        ("smoke-success.jsonl", "oracle-smoke-success"),
        ("rate-limit-2x-packed-zstd.jsonl.zstd", "oracle-rate-limit-2x-packed-zstd"),
    ] {
        let run = Run::of(home.dsh().args(["session", "import"]).arg(dsh_log(file)));
        run.expect_code(0);
        assert!(run.stdout.contains(&format!("as session {id} (")), "{}", run.stdout);
        let log = home.path().join("sessions").join(id).join("session.jsonl");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!text.contains("-chunks\""), "a v0 log is imported as v0, its packed rows written out as events");
        home.run(&["session", "verify", id]).expect_code(0);
    }
    let mock = MockProcess::start(&home, "- ok: continued\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let run = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--session", "oracle-smoke-success", "--patch"])
            .arg(&patch)
            .arg("and now?"),
    );
    run.expect_code(0);
    assert_eq!(session_id(&run), "oracle-smoke-success");
    let body: serde_json::Value = serde_json::from_str(&mock.request_bodies()[0]).unwrap();
    let messages = body["messages"].as_array().unwrap();
    assert!(messages.len() >= 4, "the imported conversation is sent: {messages:?}");
    assert_eq!(messages.last().unwrap()["content"], "and now?");
    let events = log_events(&home.path().join("sessions/oracle-smoke-success/session.jsonl"));
    assert_eq!(events.last().unwrap()["data"]["reason"]["kind"], "completed");
}

#[test]
fn import_refuses_a_log_that_breaks_the_rules_and_one_already_there() {
    let home = TestHome::new();
    let broken = home.write(
        "broken.jsonl",
        "{\"type\":\"session\",\"version\":0,\"id\":\"b\",\"createdAt\":1,\"delegationDepth\":0}\n\
         {\"type\":\"step/start\",\"seq\":0,\"time\":2,\"data\":{\"turn\":1,\"step\":1}}\n",
    );
    let run = home.run(&["session", "import", broken.to_str().unwrap()]);
    run.expect_code(5);
    assert!(run.stdout.contains(":0: step/start outside an open turn"), "{}", run.stdout);
    assert!(!home.path().join("sessions/b").exists());
    let source = dsh_log("smoke-success.jsonl");
    Run::of(home.dsh().args(["session", "import"]).arg(&source)).expect_code(0);
    let again = Run::of(home.dsh().args(["session", "import"]).arg(&source));
    again.expect_code(1);
    assert!(again.stderr.contains("a session oracle-smoke-success is already in the home"), "{}", again.stderr);
}
