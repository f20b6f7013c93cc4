//! The machine contract: one exit code per meaning (the README's table; 130 is checked by
//! `runtime::an_interrupt_during_a_wait_ends_the_turn_aborted_without_a_started_record`), the
//! `--json` shapes, `config explain`, the warnings of `check`, and `mock-server --loop`.

use dsh_e2e::turns::{route_patch, SECRET, TINY};
use dsh_e2e::{artifacts, workspace_root, MockProcess, Run, TestHome};
use serde_json::Value;

/// The document a `--json` command printed; its numbers are written as JavaScript writes them
/// (`500`, never `500.0`), which a whole number read back as a float would betray.
fn json(run: &Run) -> Value {
    let value: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|err| panic!("{err}: {}\n{}", run.stdout, run.stderr));
    assert_eq!(whole_floats(&value), Vec::<f64>::new(), "numbers JavaScript would write without .0:\n{run}");
    value
}

fn whole_floats(value: &Value) -> Vec<f64> {
    match value {
        Value::Number(number) if number.is_f64() => {
            number.as_f64().filter(|float| float.fract() == 0.0 && float.abs() < 9e15).into_iter().collect()
        }
        Value::Array(items) => items.iter().flat_map(whole_floats).collect(),
        Value::Object(fields) => fields.values().flat_map(whole_floats).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn exit_0_when_the_command_did_what_it_said() {
    TestHome::new().run(&["config", "check"]).expect_code(0);
}

#[test]
fn exit_1_when_the_turn_failed() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 401\n");
    let run = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--patch"])
            .arg(route_patch(&home, &mock, "", ""))
            .arg("hi"),
    );
    run.expect_code(1);
}

#[test]
fn exit_1_when_a_profile_file_cannot_be_parsed() {
    let home = TestHome::new();
    home.run(&["config", "check"]).expect_code(0);
    home.write("profiles/web/profile.yml", "bundles: {\n");
    for command in [vec!["config", "check"], vec!["run", "hi"], vec!["config", "explain"]] {
        let run = home.run(&command);
        run.expect_code(1);
        assert!(
            run.stderr.contains("invalid $DSH_HOME/profiles/web/profile.yml: ") && run.stderr.contains("line 2"),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn exit_2_on_a_usage_error() {
    TestHome::new().run(&["run"]).expect_code(2);
    TestHome::new().run(&["no-such-command"]).expect_code(2);
}

#[test]
fn exit_3_when_what_was_named_does_not_exist() {
    let home = TestHome::new();
    for args in [
        vec!["session", "show", "nope"],
        vec!["run", "--session", "nope", "hi"],
        vec!["config", "--profile", "nope", "dump"],
        vec!["plugin", "inspect", "/nonexistent/libx.so"],
        vec!["plugin", "remove", "nope"],
    ] {
        let run = home.run(&args);
        run.expect_code(3);
    }
}

#[test]
fn exit_4_on_a_configuration_problem() {
    let home = TestHome::new();
    let patch = home.write("bad.yml", "- {id: agent, config: {provider: nowhere}}\n");
    for command in [vec!["config", "check"], vec!["run", "hi"], vec!["config", "explain"]] {
        let mut args = command.clone();
        args.extend(["--patch", patch.to_str().unwrap()]);
        let run = home.run(&args);
        run.expect_code(4);
    }
}

#[test]
fn exit_5_on_log_violations_or_damage() {
    let home = TestHome::new();
    let log = home.write(
        "bad.jsonl",
        "{\"type\":\"session\",\"version\":0,\"id\":\"b\",\"createdAt\":1,\"delegationDepth\":0}\n\
         {\"type\":\"step/start\",\"seq\":0,\"time\":2,\"data\":{\"turn\":1,\"step\":1}}\n",
    );
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(5);
    home.run(&["session", "repair", log.to_str().unwrap()]).expect_code(5);
}

#[test]
fn exit_6_when_another_process_writes_the_session() {
    let home = TestHome::new();
    let log = home.write(
        "sessions/s/session.jsonl",
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n",
    );
    let lock = std::fs::File::create(log.with_file_name("session.jsonl.lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns; released when `lock` is dropped.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    let run = home.run(&["session", "repair", "s"]);
    run.expect_code(6);
    drop(lock);
}

#[test]
fn config_explain_names_llm_retry_for_server_and_nobody_for_auth() {
    let home = TestHome::new();
    let run = home.run(&["config", "explain", "--json"]);
    run.expect_code(0);
    let explained = json(&run);
    assert!(explained["layer"].as_str().unwrap().ends_with("profiles/web/cordis.patch.yml"));
    let route = &explained["routes"][0];
    assert_eq!(route["provider"], "deepseek-official");
    assert_eq!(route["agentRoute"], true);
    assert_eq!(route["policy"]["mode"], "normal");
    assert_eq!(route["codes"]["SERVER"]["row"], "llm-retry");
    assert_eq!(route["codes"]["SERVER"]["delaysMs"], serde_json::json!([500, 1000, 2000, 4000, 8000]));
    assert_eq!(route["codes"]["AUTH"], serde_json::json!({"row": null, "action": "no-retry"}));
    assert_eq!(route["codes"].as_object().unwrap().len(), 15, "every code the adapter produces");
    let text = home.run(&["config", "explain"]);
    assert!(
        text.stdout.contains("\nroute deepseek-official (model deepseek-chat, the agent's route): "),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("  SERVER                   llm-retry            retries 5 times, after 0.5s, 1s, 2s, 4s, 8s"),
        "{}",
        text.stdout
    );
}

#[test]
fn check_warns_about_settings_that_do_nothing() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "relay-retry"]).expect_code(0);
    let patch = home.write(
        "noop.yml",
        "- id: llm-deepseek\n  config: {provider: deepseek-official, baseUrl: 'https://api.deepseek.com/v1', model: m, retryPolicy: {mode: normal}}\n\
         - {id: relay-retry, config: {retryableCodes: [server]}}\n\
         - {id: llm-retry-invariant, disable: true}\n",
    );
    let run = home.run(&["config", "check", "--json", "--patch", patch.to_str().unwrap()]);
    run.expect_code(0);
    let warnings: Vec<String> =
        json(&run)["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned()).collect();
    let expect = [
        "row \"llm-deepseek\": config.retryPolicy: has no effect: no enabled row runs llm-retry",
        "row \"relay-retry\": config.retryableCodes[0]: \"server\" is not a failure code dsh produces (codes are case-sensitive: SERVER)",
        "patch entry key \"disable\" is not one dsh reads (did you mean \"disabled\"?)",
    ];
    for expected in expect {
        assert!(warnings.iter().any(|warning| warning.contains(expected)), "missing {expected:?} in {warnings:#?}");
    }
}

#[test]
fn json_shapes_of_check_waterfall_dump_plugin_and_inspect() {
    let home = TestHome::new();
    let check = json(&home.run(&["config", "check", "--json"]));
    assert_eq!((&check["profile"], &check["valid"]), (&"web".into(), &true.into()));
    let waterfall = json(&home.run(&["config", "waterfall", "--json"]));
    assert_eq!((&waterfall[0]["index"], &waterfall[0]["row"]), (&1.into(), &"llm-retry".into()));
    let origins = json(&home.run(&["config", "dump", "--origins", "--json"]));
    assert_eq!(origins[0]["origin"], "dsh-base");
    assert_eq!(origins[0]["row"]["id"], "agent");
    let added = json(&home.run(&["plugin", "add", "relay-retry", "--json"]));
    assert_eq!(added["packages"][0]["name"], "relay-retry");
    assert_eq!(added["packages"][0]["disables"], serde_json::json!(["llm-retry"]));
    let removed = json(&home.run(&["plugin", "remove", "relay-retry", "--json"]));
    assert_eq!(removed["removed"], serde_json::json!(["relay-retry"]));
    let refused = home.run(&["plugin", "inspect", "--json", artifacts().dsh().to_str().unwrap()]);
    refused.expect_code(1);
    assert!(json(&refused)["error"].as_str().unwrap().contains("not a dsh plugin"), "{}", refused.stdout);
    let imported = home.run(&[
        "session",
        "import",
        "--json",
        workspace_root().join("tests/fixtures/conformance/dsh-logs/smoke-success.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(json(&imported)["session"], "oracle-smoke-success");
    let repaired = json(&home.run(&["session", "repair", "--json", "oracle-smoke-success"]));
    assert_eq!(repaired["sound"], true);
    let explained = json(&home.run(&["config", "explain", "--json"]));
    assert!(explained.to_string().contains("\"initialDelayMs\":500,"), "{explained}");
    json(&home.run(&["session", "list", "--json"]));
    json(&home.run(&["session", "verify", "--json", "oracle-smoke-success"]));
}

#[test]
fn a_looping_mock_server_serves_trial_after_trial() {
    let home = TestHome::new();
    let mock = MockProcess::start_with(&home, "- status: 503\n- ok: again\n", &["--loop"]);
    let patch = route_patch(&home, &mock, TINY, "");
    for trial in 0..2 {
        let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
        run.expect_code(0);
        assert!(run.stderr.contains("Retrying model request (1/5)"), "trial {trial} met the 503: {}", run.stderr);
    }
}
