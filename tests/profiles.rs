//! Profiles and patch layers through the real binary: first-use creation, the exact composition
//! semantics and warnings, refused layers, `dump --origins`, `config check` and `config waterfall`.

use dsh_e2e::{artifacts, library_file_name, Run, TestHome};
use serde_json::{json, Value};

fn dump_json(home: &TestHome, extra: &[&str]) -> (Vec<Value>, Run) {
    let mut args = vec!["config", "--profile", "web", "dump", "--json"];
    args.extend_from_slice(extra);
    let run = home.run(&args);
    run.expect_code(0);
    (serde_json::from_str(&run.stdout).expect("dump --json prints JSON"), run)
}

fn ids(rows: &[Value]) -> Vec<&str> {
    rows.iter().map(|row| row["id"].as_str().unwrap()).collect()
}

#[test]
fn a_fresh_home_composes_the_web_profile_and_creates_it() {
    let home = TestHome::new();
    let (rows, _) = dump_json(&home, &[]);
    assert_eq!(ids(&rows), ["agent", "llm-deepseek", "llm-retry", "llm-retry-invariant"]);
    assert_eq!(rows[1]["config"]["apiKeyEnv"], "DEEPSEEK_API_KEY");
    let profile = home.path().join("profiles/web");
    for file in ["profile.yml", "cordis.yml", "cordis.patch.yml"] {
        assert!(profile.join(file).is_file(), "{file} was not created");
    }
    let manifest = std::fs::read_to_string(profile.join("profile.yml")).unwrap();
    assert!(manifest.contains("- dsh-base"), "{manifest}");
}

#[test]
fn later_layers_win_and_configs_are_replaced_not_merged() {
    let home = TestHome::new();
    let bundle_a = home.write("a.yml", "[{insert: [{id: a, name: pkg-a}]}]\n");
    let bundle_b = home.write("b.yml", "[{id: a, config: {v: 2}}]\n");
    let user = home.write("user.yml", "[{id: a, config: {v: 3}}]\n");
    let (rows, _) = dump_json(
        &home,
        &[
            "--patch",
            bundle_a.to_str().unwrap(),
            "--patch",
            bundle_b.to_str().unwrap(),
            "--patch",
            user.to_str().unwrap(),
        ],
    );
    assert_eq!(rows.last().unwrap(), &json!({"id": "a", "name": "pkg-a", "config": {"v": 3}}));
}

#[test]
fn an_override_of_a_missing_id_warns_on_stderr_with_the_file_name() {
    let home = TestHome::new();
    let first = home.write("first.yml", "[{insert: [{id: x, name: pkg-x, config: {a: 1}}]}]\n");
    let second = home.write("second.yml", "[{id: x, config: {a: 2}}, {id: missing, config: {}}]\n");
    let (rows, run) = dump_json(&home, &["--patch", first.to_str().unwrap(), "--patch", second.to_str().unwrap()]);
    assert_eq!(rows.last().unwrap(), &json!({"id": "x", "name": "pkg-x", "config": {"a": 2}}));
    assert_eq!(run.stderr.trim(), "dsh: [$DSH_HOME/second.yml] patch: entry \"missing\" not found (patch entry 2)");
}

#[test]
fn the_name_guard_protects_a_rebound_row() {
    let home = TestHome::new();
    let patch = home.write("guard.yml", "[{id: llm-retry, name: relay-retry, disabled: true}]\n");
    let (rows, run) = dump_json(&home, &["--patch", patch.to_str().unwrap()]);
    assert_eq!(rows[2], json!({"id": "llm-retry", "name": "llm-retry"}));
    assert!(
        run.stderr
            .contains("patch: name mismatch for \"llm-retry\" (expected \"llm-retry\", got \"relay-retry\"), skipping"),
        "{}",
        run.stderr
    );
}

fn refused(contents: Option<&str>) -> Run {
    let home = TestHome::new();
    let path = match contents {
        Some(text) => home.write("bad.yml", text),
        None => {
            std::fs::create_dir_all(home.path().join("bad.yml")).unwrap();
            home.path().join("bad.yml")
        }
    };
    home.run(&["config", "dump", "--patch", path.to_str().unwrap()])
}

#[test]
fn a_top_level_mapping_is_refused() {
    let run = refused(Some("id: agent\ndisabled: true\n"));
    run.expect_code(1);
    assert!(run.stderr.contains("overlay $DSH_HOME/bad.yml must be a top-level YAML array of loader patch entries (`[]` is the empty layer)"), "{}", run.stderr);
}

#[test]
fn a_string_entry_is_refused_naming_entry_one() {
    let run = refused(Some("- just-a-string\n"));
    run.expect_code(1);
    assert!(
        run.stderr.contains("overlay entry 1 in $DSH_HOME/bad.yml must be a mapping (a loader patch entry)"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_empty_or_comment_only_file_is_refused() {
    for text in ["", "# nothing yet\n"] {
        let run = refused(Some(text));
        run.expect_code(1);
        assert!(run.stderr.contains("must be a top-level YAML array"), "{}", run.stderr);
    }
}

#[test]
fn an_unreadable_layer_fails_loudly_and_a_missing_patch_file_is_not_found() {
    let run = refused(None);
    run.expect_code(1);
    assert!(run.stderr.contains("failed to read overlay $DSH_HOME/bad.yml: "), "{}", run.stderr);
    let missing = TestHome::new().run(&["config", "dump", "--patch", "/nonexistent/patch.yml"]);
    missing.expect_code(3);
    assert!(missing.stderr.contains("the --patch file /nonexistent/patch.yml does not exist"), "{}", missing.stderr);
}

#[test]
fn a_js_tag_is_refused_with_what_to_use_instead() {
    let run = refused(Some("- id: llm-deepseek\n  config:\n    apiKey: !!js process.env.DEEPSEEK_API_KEY\n"));
    run.expect_code(1);
    assert!(
        run.stderr.contains("failed to parse overlay $DSH_HOME/bad.yml: line 3, column 13: `!!js` tags"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("apiKeyEnv: NAME"), "{}", run.stderr);
}

#[test]
fn invalid_yaml_names_line_and_column() {
    let run = refused(Some("- id: a\n  config: {unclosed\n"));
    run.expect_code(1);
    assert!(
        run.stderr.contains("failed to parse overlay $DSH_HOME/bad.yml: ") && run.stderr.contains("line"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_duplicated_mapping_key_is_refused_with_file_and_line() {
    for config in ["{1: first, \"1\": second}", "{true: a, \"true\": b}", "{~: a, \"null\": b}", "{1.5: a, \"1.5\": b}"]
    {
        let run = refused(Some(&format!("- id: llm-retry-invariant\n  config: {config}\n")));
        run.expect_code(1);
        assert!(
            run.stderr.contains("failed to parse overlay $DSH_HOME/bad.yml: line 2, column ")
                && run.stderr.contains("duplicated mapping key"),
            "{config}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_byte_order_mark_before_a_list_is_ignored() {
    let home = TestHome::new();
    let patch = home
        .write("bom.yml", "\u{feff}- {id: llm-retry, disabled: true}\n- {id: llm-retry-invariant, disabled: true}\n");
    let (rows, run) = dump_json(&home, &["--patch", patch.to_str().unwrap()]);
    run.expect_code(0);
    assert_eq!(rows.iter().filter(|row| row["disabled"] == true).count(), 2);
}

#[test]
fn the_home_layer_is_named_patches_in_errors_as_the_reference_names_it() {
    let home = TestHome::new();
    home.write("cordis.patch.yml", "id: agent\n");
    let run = home.run(&["config", "dump"]);
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("patches $DSH_HOME/cordis.patch.yml must be a top-level YAML array of loader patch entries"),
        "{}",
        run.stderr
    );
    home.write("cordis.patch.yml", "- [\n");
    let run = home.run(&["config", "dump"]);
    assert!(run.stderr.contains("failed to parse patches $DSH_HOME/cordis.patch.yml: "), "{}", run.stderr);
}

#[test]
fn what_cordis_yml_holds_is_never_composed() {
    let home = TestHome::new();
    let (before, _) = dump_json(&home, &[]);
    for contents in ["# only a comment\n", "- {id: stray, name: llm-retry}\n", "{not: [a list\n"] {
        home.write("profiles/web/cordis.yml", contents);
        let (rows, run) = dump_json(&home, &[]);
        run.expect_code(0);
        assert_eq!(rows, before, "{contents}");
    }
}

#[test]
fn duplicate_row_ids_are_refused_by_check_and_run() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let patch =
        home.write("dup.yml", "- insert:\n    - {id: model-error-retry, name: dsh-retry, config: {maxRetries: 4}}\n");
    let expected =
        "$DSH_HOME/dup.yml: row \"model-error-retry\": another enabled row has this id (inserted by dsh-retry)";
    for command in [vec!["config", "check"], vec!["run", "hi"]] {
        let mut args = command.clone();
        args.extend(["--patch", patch.to_str().unwrap()]);
        let run = home.run(&args);
        run.expect_code(4);
        assert!(run.stderr.contains(expected), "{command:?}: {}", run.stderr);
    }
}

#[test]
fn before_and_after_place_rows_and_show_in_waterfall_and_origins() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let patch = home.write(
        "place.yml",
        "- {id: model-error-retry, before: llm-retry}\n- insert: [{id: late, name: llm-retry, disabled: true}]\n  after: nope\n",
    );
    let waterfall = home.run(&["config", "waterfall", "--patch", patch.to_str().unwrap()]);
    waterfall.expect_code(0);
    let rows: Vec<&str> = waterfall.stdout.lines().filter_map(|line| line.split_whitespace().nth(1)).collect();
    assert_eq!(rows, ["model-error-retry", "llm-retry"], "{}", waterfall.stdout);
    assert!(
        waterfall
            .stderr
            .contains("[$DSH_HOME/place.yml] patch: after \"nope\" not found; the rows stay appended (patch entry 2)"),
        "{}",
        waterfall.stderr
    );
    let origins = home.run(&["config", "dump", "--origins", "--patch", patch.to_str().unwrap()]);
    assert!(origins.stdout.contains("dsh-retry, patched by $DSH_HOME/place.yml"), "{}", origins.stdout);
}

#[test]
fn an_unknown_profile_does_not_exist() {
    let run = TestHome::new().run(&["config", "--profile", "work", "dump"]);
    run.expect_code(3);
    assert!(
        run.stderr
            .contains("profile \"work\" does not exist; create it with 'dsh profile new work' (or 'dsh plugin --profile work add <package>')"),
        "{}",
        run.stderr
    );
}

#[test]
fn layers_apply_in_order_bundles_profile_home_then_patch_files() {
    let home = TestHome::new();
    dump_json(&home, &[]);
    home.write("profiles/web/cordis.patch.yml", "[{id: agent, config: {provider: from-profile}}]\n");
    assert_eq!(dump_json(&home, &[]).0[0]["config"]["provider"], "from-profile");
    home.write("cordis.patch.yml", "[{id: agent, config: {provider: from-home}}]\n");
    assert_eq!(dump_json(&home, &[]).0[0]["config"]["provider"], "from-home");
    let patch = home.write("cli.yml", "[{id: agent, config: {provider: from-patch}}]\n");
    assert_eq!(dump_json(&home, &["--patch", patch.to_str().unwrap()]).0[0]["config"]["provider"], "from-patch");
}

#[test]
fn bundles_only_ignores_a_broken_user_layer() {
    let home = TestHome::new();
    dump_json(&home, &[]);
    home.write("profiles/web/cordis.patch.yml", "not: [a list\n");
    home.run(&["config", "dump"]).expect_code(1);
    let run = home.run(&["config", "dump", "--bundles-only", "--json"]);
    run.expect_code(0);
    assert_eq!(ids(&serde_json::from_str::<Vec<Value>>(&run.stdout).unwrap()).len(), 4);
}

#[test]
fn origins_name_the_inserting_layer_and_the_layers_that_patched_a_run() {
    let home = TestHome::new();
    let patch = home
        .write("p.yml", "[{id: llm-retry-invariant, config: {mode: report}}, {insert: [{id: extra, name: extra}]}]\n");
    let run = home.run(&["config", "dump", "--origins", "--patch", patch.to_str().unwrap()]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        "# == dsh-base\n- id: agent\n  name: agent\n  config:\n    provider: deepseek-official\n- id: llm-deepseek\n  name: llm-openai\n  config:\n    provider: deepseek-official\n    baseUrl: https://api.deepseek.com/v1\n    model: deepseek-chat\n    apiKeyEnv: DEEPSEEK_API_KEY\n- id: llm-retry\n  name: llm-retry\n# == dsh-base, patched by $DSH_HOME/p.yml\n- id: llm-retry-invariant\n  name: llm-retry-invariant\n  config:\n    mode: report\n# == $DSH_HOME/p.yml\n- id: extra\n  name: extra\n"
    );
}

#[test]
fn dump_never_resolves_packages() {
    let home = TestHome::new();
    let patch = home.write("p.yml", "[{insert: [{id: ghost, name: no-such-package}]}]\n");
    let (rows, _) = dump_json(&home, &["--patch", patch.to_str().unwrap()]);
    assert_eq!(rows.last().unwrap()["name"], "no-such-package");
}

#[test]
fn check_accepts_the_shipped_profiles() {
    let home = TestHome::new();
    for profile in ["web", "demo"] {
        let run = home.run(&["config", "--profile", profile, "check"]);
        run.expect_code(0);
        assert!(run.stdout.contains("plugins: llm-retry, llm-retry-invariant"), "{}", run.stdout);
    }
}

#[test]
fn check_reports_every_problem_with_file_row_and_key() {
    let home = TestHome::new();
    let patch = home.write(
        "p.yml",
        "- {id: llm-retry, config: {retryPolicy: {}}}\n\
         - {id: llm-retry-invariant, config: {mode: loud}}\n\
         - id: llm-deepseek\n  config: {provider: deepseek-official, model: m, baseUrl: 'https://x/v1', retryPolicy: {mode: normal, backoff: {jitterRatio: 2}}}\n\
         - {id: agent, config: {provider: deepseek-official, tools: []}}\n",
    );
    let run = home.run(&["config", "check", "--patch", patch.to_str().unwrap()]);
    run.expect_code(4);
    for expected in [
        "$DSH_HOME/p.yml: row \"llm-retry\": config.retryPolicy: llm-retry: retryPolicy belongs under each provider configuration",
        "$DSH_HOME/p.yml: row \"llm-retry-invariant\": config.mode: llm-retry-invariant: must be \"enforce\" or \"report\", got \"loud\"",
        "$DSH_HOME/p.yml: row \"llm-deepseek\": config.retryPolicy.backoff.jitterRatio: must be between 0 and 1",
        "$DSH_HOME/p.yml: row \"agent\": config.tools: unknown key \"tools\"",
        "dsh: profile web: 4 problems found",
    ] {
        assert!(run.stderr.contains(expected), "missing {expected:?} in:\n{}", run.stderr);
    }
}

#[test]
fn an_unbuilt_library_is_a_problem_of_check_and_waterfall() {
    let home = TestHome::new();
    let lonely = home.path().join("bin");
    std::fs::create_dir_all(&lonely).unwrap();
    std::fs::copy(artifacts().dsh(), lonely.join("dsh")).unwrap();
    for command in ["check", "waterfall"] {
        let run = Run::of(
            std::process::Command::new(lonely.join("dsh"))
                .env("DSH_HOME", home.path())
                .env_remove("DSH_PLUGIN_PATH")
                .args(["config", command]),
        );
        run.expect_code(4);
        let expected = format!(
            "row \"llm-retry\": the library {} of bundled package \"llm-retry\" is not in {}, {}, $DSH_PLUGIN_PATH (unset): install dsh with ./install.sh PREFIX",
            library_file_name("llm-retry"),
            lonely.display(),
            home.path().join("lib/dsh").display()
        );
        assert!(run.stderr.contains(&expected), "{command}: {}", run.stderr);
    }
}

#[test]
fn a_dsh_installed_under_a_prefix_finds_its_libraries_in_lib_dsh_and_runs_the_demo() {
    let home = TestHome::new();
    let prefix = tempfile::tempdir().unwrap();
    let install = Run::of(
        std::process::Command::new("sh")
            .arg(dsh_e2e::workspace_root().join("install.sh"))
            .arg(prefix.path())
            .env("DSH_INSTALL_FROM", &artifacts().dir),
    );
    install.expect_code(0);
    let bin = prefix.path().join("bin");
    let hint = format!(
        "note: {} is not on PATH; add it (export PATH=\"{}:$PATH\") to run plain dsh",
        bin.display(),
        bin.display()
    );
    assert!(install.stdout.contains(&hint), "{}", install.stdout);
    let libraries: Vec<String> = std::fs::read_dir(prefix.path().join("lib/dsh"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let plugins = std::fs::read_dir(dsh_e2e::workspace_root().join("plugins")).unwrap().count();
    assert_eq!(libraries.len(), plugins, "{libraries:?}");
    let run = Run::of(
        std::process::Command::new(prefix.path().join("bin/dsh"))
            .env("DSH_HOME", home.path())
            .env_remove("DSH_PLUGIN_PATH")
            .current_dir(prefix.path())
            .args(["run", "--profile", "demo", "hi"]),
    );
    run.expect_code(0);
    assert!(run.stdout.contains("Hello! I am the dsh demo provider"), "{}", run.stdout);
}

/// The README's first command, `./install.sh && dsh run --profile demo "Say hello"`, on a
/// machine whose cargo runs from a folder on PATH (as rustup's `~/.cargo/bin` is).
#[test]
fn install_without_a_prefix_puts_dsh_beside_cargo_and_the_first_run_says_where_the_home_is() {
    let cargo_home = tempfile::tempdir().unwrap();
    let bin = cargo_home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("cargo"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(bin.join("cargo"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let home = TestHome::new();
    let dsh_home = home.path().join("fresh/.dsh");
    let script = format!(
        "sh '{}' && dsh run --profile demo 'Say hello'",
        dsh_e2e::workspace_root().join("install.sh").display()
    );
    let first = Run::of(
        std::process::Command::new("sh")
            .args(["-c", &script])
            .env("PATH", &path)
            .env("DSH_INSTALL_FROM", &artifacts().dir)
            .env("DSH_HOME", &dsh_home)
            .env_remove("DSH_PLUGIN_PATH"),
    );
    first.expect_code(0);
    assert!(first.stdout.contains(&format!("into {}", cargo_home.path().display())), "{}", first.stdout);
    assert!(!first.stdout.contains("is not on PATH"), "{}", first.stdout);
    assert!(first.stdout.contains("Hello! I am the dsh demo provider"), "{}", first.stdout);
    let note = format!(
        "dsh: created the dsh home {} (sessions, profiles); DSH_HOME or --home puts it elsewhere",
        dsh_home.display()
    );
    assert!(first.stderr.contains(&note), "{}", first.stderr);
    let again = Run::of(std::process::Command::new(bin.join("dsh")).env("DSH_HOME", &dsh_home).args([
        "run",
        "--profile",
        "demo",
        "hi",
    ]));
    again.expect_code(0);
    assert!(!again.stderr.contains("created the dsh home"), "{}", again.stderr);
}

#[test]
fn bundled_libraries_are_also_found_in_the_plugin_path() {
    let home = TestHome::new();
    let lonely = home.path().join("bin");
    std::fs::create_dir_all(&lonely).unwrap();
    std::fs::copy(artifacts().dsh(), lonely.join("dsh")).unwrap();
    let run = Run::of(
        std::process::Command::new(lonely.join("dsh"))
            .env("DSH_HOME", home.path())
            .env("DSH_PLUGIN_PATH", &artifacts().dir)
            .args(["config", "check"]),
    );
    run.expect_code(0);
}

#[test]
fn the_waterfall_follows_composed_row_order_and_skips_disabled_rows() {
    let home = TestHome::new();
    let run = home.run(&["config", "waterfall"]);
    run.expect_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    let columns: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(columns, ["1", "llm-retry", "llm-retry", artifacts().library("llm-retry").to_str().unwrap()]);
    let disable = home.write("off.yml", "[{id: llm-retry, name: llm-retry, disabled: true}]\n");
    let run = home.run(&["config", "waterfall", "--patch", disable.to_str().unwrap()]);
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""));
}

#[test]
fn profile_new_copy_list_and_remove_manage_whole_profiles() {
    let home = TestHome::new();
    home.run(&["profile", "new", "tools"])
        .expect_code(0)
        .expect_stdout("created profile tools at $DSH_HOME/profiles/tools");
    home.run(&["profile", "new", "tools"]).expect_code(1).expect_stderr("profile tools exists already");
    home.run(&["plugin", "--profile", "relay", "add", "relay-retry"]).expect_code(0);
    home.run(&["profile", "copy", "relay", "relay2"]).expect_code(0);
    let check = home.run(&["config", "--profile", "relay2", "check"]);
    check.expect_code(0).expect_stdout("plugins: llm-retry-invariant, relay-retry");
    home.run(&["profile", "new", "trial", "--from", "demo"]).expect_code(0);
    home.run(&["profile", "new", "nowhere", "--from", "missing"]).expect_code(3);

    let listed: Value = serde_json::from_str(&home.run(&["profile", "list", "--json"]).expect_code(0).stdout).unwrap();
    let names: Vec<(&str, bool)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|profile| (profile["name"].as_str().unwrap(), profile["created"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("demo", false),
            ("relay", true),
            ("relay2", true),
            ("sdk", false),
            ("tools", true),
            ("trial", true),
            ("web", false)
        ]
    );
    assert_eq!(listed[2]["packages"], json!(["relay-retry"]));

    home.run(&["profile", "remove", "relay"]).expect_code(0).expect_stdout("removed profile relay");
    assert!(!home.path().join("profiles/relay").exists());
    home.run(&["profile", "remove", "relay"]).expect_code(3);
    home.run(&["config", "--profile", "relay2", "check"]).expect_code(0);
}

#[test]
fn a_profile_holding_a_link_is_not_copied_and_nothing_is_left_behind() {
    let home = TestHome::new();
    home.run(&["profile", "new", "linked"]).expect_code(0);
    std::os::unix::fs::symlink("/etc/passwd", home.path().join("profiles/linked/passwd")).unwrap();
    home.run(&["profile", "copy", "linked", "copied"])
        .expect_code(1)
        .expect_stderr("is not a regular file or folder; a profile holding it is not copied");
    let left: Vec<_> =
        std::fs::read_dir(home.path().join("profiles")).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("linked")], "no copy and no staging folder");
}
