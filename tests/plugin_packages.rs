//! `dsh plugin add/remove/list` through the real binary: building a plugin crate, installing a
//! prebuilt package, refusing a broken library without touching the profile, and removing a
//! package so that the composition is exactly what it was.

use std::path::{Path, PathBuf};

use dsh_e2e::{artifacts, files_under, library_file_name, package_dir, workspace_root, TestHome};

const SCRIPTED_LAYER: &str = "- insert:\n    - {id: scripted, name: fixture-scripted, config: {answer: pass}}\n";

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(dir).into_iter().map(|path| (path.clone(), std::fs::read(path).unwrap())).collect()
}

#[test]
fn a_prebuilt_package_installs_under_a_content_hash_and_lists_with_its_bundle() {
    let home = TestHome::new();
    let package =
        package_dir(&home, "fixture-scripted", &artifacts().library("fixture-scripted"), Some(SCRIPTED_LAYER));
    let run = home.run(&["plugin", "--profile", "web", "add", package.to_str().unwrap()]);
    run.expect_code(0);
    assert!(
        run.stdout.contains(
            "installed fixture-scripted 0.1.0 into profile web (plugins/fixture-scripted/libfixture_scripted-"
        ),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("bundle layer 2 of 2: inserts scripted"), "{}", run.stdout);
    let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
    assert!(manifest.contains("- fixture-scripted") && manifest.contains("sha256:"), "{manifest}");
    let list = home.run(&["plugin", "list", "--json"]);
    let entries: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(entries[0]["name"], "fixture-scripted");
    assert_eq!(entries[0]["abiVersion"], dsh_abi::ABI_VERSION);
    assert_eq!(entries[0]["bundle"], 2);
    assert_eq!(entries[1]["name"], "dsh-base");
    let waterfall = home.run(&["config", "waterfall"]);
    let rows: Vec<&str> = waterfall.stdout.lines().map(|line| line.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(rows, ["llm-retry", "scripted"], "{}", waterfall.stderr);
}

#[test]
fn a_broken_library_is_refused_and_the_profile_is_left_byte_identical() {
    let home = TestHome::new();
    home.run(&["config", "dump"]).expect_code(0);
    let profile = home.path().join("profiles/web");
    let before = snapshot(&profile);
    let package =
        package_dir(&home, "fixture-not-a-plugin", &artifacts().library("fixture-not-a-plugin"), Some(SCRIPTED_LAYER));
    let run = home.run(&["plugin", "add", package.to_str().unwrap()]);
    run.expect_code(1);
    assert!(run.stderr.contains("not a dsh plugin ("), "{}", run.stderr);
    assert_eq!(snapshot(&profile), before);
}

#[test]
fn a_library_whose_name_differs_from_its_package_is_refused() {
    let home = TestHome::new();
    let package = package_dir(&home, "llm-retry", &artifacts().library("fixture-scripted"), None);
    let run = home.run(&["plugin", "--profile", "fresh", "add", package.to_str().unwrap()]);
    run.expect_code(1);
    assert!(
        run.stderr.contains("the library is plugin \"fixture-scripted\", but the package is named \"llm-retry\""),
        "{}",
        run.stderr
    );
    assert!(!home.path().join("profiles/fresh").exists(), "a failed add leaves no new profile behind");
}

#[test]
fn adding_to_a_new_profile_creates_it_with_the_base_bundle() {
    let home = TestHome::new();
    let package = package_dir(&home, "fixture-scripted", &artifacts().library("fixture-scripted"), None);
    let run = home.run(&["plugin", "--profile", "work", "add", package.to_str().unwrap()]);
    run.expect_code(0);
    assert!(run.stdout.contains("declares no bundle, so it is installed but has no rows"), "{}", run.stdout);
    let dump = home.run(&["config", "--profile", "work", "dump", "--json"]);
    dump.expect_code(0);
    assert_eq!(serde_json::from_str::<Vec<serde_json::Value>>(&dump.stdout).unwrap().len(), 4);
}

#[test]
fn unknown_names_are_not_found() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "no-such-plugin"]).expect_code(3);
    home.run(&["config", "dump"]).expect_code(0);
    let run = home.run(&["plugin", "remove", "no-such-plugin"]);
    run.expect_code(3);
    assert!(run.stderr.contains("package \"no-such-plugin\" is not installed in profile web"), "{}", run.stderr);
}

#[test]
fn a_crate_directory_is_built_installed_and_removed_restoring_the_dump() {
    let home = TestHome::new();
    home.write("profiles/web/cordis.patch.yml", "# mine\n[]\n");
    let before = home.run(&["config", "dump", "--origins"]);
    before.expect_code(0);
    let crate_dir = workspace_root().join("tests/fixtures/scripted");
    let run = add_crate(&home, &crate_dir);
    run.expect_code(0);
    assert!(run.stdout.contains("installed fixture-scripted 0.1.0"), "{}", run.stdout);
    let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
    assert!(manifest.contains(&format!("source: crate:{}", crate_dir.display())), "{manifest}");
    let during = home.run(&["config", "dump", "--json"]);
    assert!(during.stdout.contains("\"scripted\""), "{}", during.stdout);
    let removed = home.run(&["plugin", "remove", "fixture-scripted"]);
    removed.expect_code(0);
    assert!(!home.path().join("profiles/web/plugins/fixture-scripted").exists());
    assert_eq!(std::fs::read_to_string(home.path().join("profiles/web/cordis.patch.yml")).unwrap(), "# mine\n[]\n");
    let after = home.run(&["config", "dump", "--origins"]);
    assert_eq!(after.stdout, before.stdout);
}

#[test]
fn re_adding_a_package_that_dropped_its_bundle_drops_its_bundle_entry() {
    let home = TestHome::new();
    let library = artifacts().library("fixture-scripted");
    let with_layer = package_dir(&home, "fixture-scripted", &library, Some(SCRIPTED_LAYER));
    home.run(&["plugin", "add", with_layer.to_str().unwrap()]).expect_code(0);
    std::fs::remove_file(with_layer.join("cordis.patch.yml")).unwrap();
    let without = package_dir(&home, "fixture-scripted", &library, None);
    let run = home.run(&["plugin", "add", without.to_str().unwrap()]);
    run.expect_code(0);
    assert!(run.stdout.contains("dropped the bundle entry of fixture-scripted"), "{}", run.stdout);
    let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
    assert!(!manifest.contains("- fixture-scripted"), "{manifest}");
    let dump = home.run(&["config", "dump"]);
    dump.expect_code(0);
}

/// Runs `dsh plugin add DIR` the way these tests build crates: a shared target directory, an
/// unoptimised release profile.
fn add_crate(home: &TestHome, dir: &Path) -> dsh_e2e::Run {
    let build_dir = artifacts().dir.parent().unwrap().join("plugin-add-release");
    dsh_e2e::Run::of(
        home.dsh()
            .args(["plugin", "add"])
            .arg(dir)
            .env("CARGO_TARGET_DIR", &build_dir)
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "true"),
    )
}

#[test]
fn a_plugin_from_plugin_new_edited_to_retry_only_503s_acts_on_the_first_503_of_the_web_profile() {
    let home = TestHome::new();
    let dir = home.path().join("only-503");
    let new = home.run(&["plugin", "new", "only-503", "--dir", dir.to_str().unwrap()]);
    new.expect_code(0);
    let source = dir.join("src/lib.rs");
    let rule = "self.codes.iter().any(|code| code == payload.failure.code.as_str())";
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(text.contains(rule), "the template's rule moved");
    std::fs::write(&source, text.replace(rule, "payload.failure.status == dsh_abi::ROption::RSome(503)")).unwrap();
    let layer = dir.join("cordis.patch.yml");
    let waits = std::fs::read_to_string(&layer).unwrap().replace("delayMs: 1000", "delayMs: 5");
    std::fs::write(&layer, waits).unwrap();
    std::fs::copy(workspace_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let add = add_crate(&home, &dir);
    add.expect_code(0);
    assert!(add.stdout.contains("installed only-503 0.1.0"), "{}", add.stdout);
    let waterfall = home.run(&["config", "waterfall"]);
    let order: Vec<&str> = waterfall.stdout.lines().filter_map(|line| line.split_whitespace().nth(1)).collect();
    assert_eq!(order.first(), Some(&"only-503"), "{}", waterfall.stdout);
    let mock = dsh_e2e::MockProcess::start(&home, "- status: 503\n- status: 503\n- ok: through\n");
    let patch = dsh_e2e::turns::route_patch(&home, &mock, "", "");
    let turn = dsh_e2e::turns::run_turn(&home, &patch, "hi");
    turn.run.expect_code(0);
    let keys: Vec<&str> =
        turn.of_type("llm/retry").iter().map(|retry| retry["data"]["policyKey"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|key| key.starts_with("[\"only-503\"")), "{keys:?}");
}

#[test]
fn an_installed_library_changed_after_install_is_refused_with_the_way_out() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "relay-retry"]).expect_code(0);
    let installed = files_under(&home.path().join("profiles/web/plugins/relay-retry"))
        .into_iter()
        .find(|path| path.extension().is_some_and(|extension| extension == std::env::consts::DLL_EXTENSION))
        .unwrap();
    std::fs::copy(artifacts().library("llm-retry"), &installed).unwrap();
    let check = home.run(&["config", "check"]);
    check.expect_code(4);
    assert!(check.stderr.contains("is not the library that was installed (sha256 "), "{}", check.stderr);
    assert!(
        check.stderr.contains("hint: install the package again with `dsh plugin --profile web add"),
        "{}",
        check.stderr
    );
    assert!(check.stderr.contains("remove it with `dsh plugin --profile web remove relay-retry`"), "{}", check.stderr);
    let run = home.run(&["run", "hi"]);
    run.expect_code(4);
    assert!(run.stderr.contains("disable the row with `- {id: relay-retry, disabled: true}`"), "{}", run.stderr);
    let list = home.run(&["plugin", "list", "--json"]);
    list.expect_code(0);
    let listed: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let relay = listed.as_array().unwrap().iter().find(|package| package["name"] == "relay-retry").unwrap();
    assert!(relay["error"].as_str().unwrap().contains("is not the library that was installed"), "{relay}");
    assert!(relay["abiVersion"].is_null(), "the changed library was not opened to list it: {relay}");
}

#[test]
fn a_bundled_library_that_no_longer_loads_says_how_to_get_past_it() {
    let home = TestHome::new();
    let prefix = home.path().join("prefix");
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib/dsh")).unwrap();
    std::fs::copy(artifacts().dsh(), prefix.join("bin/dsh")).unwrap();
    for package in ["llm-retry", "llm-retry-invariant"] {
        std::fs::copy(artifacts().library(package), prefix.join("lib/dsh").join(library_file_name(package))).unwrap();
    }
    std::fs::write(prefix.join("lib/dsh").join(library_file_name("llm-retry")), b"\x7fELF broken").unwrap();
    let run = dsh_e2e::Run::of(
        std::process::Command::new(prefix.join("bin/dsh"))
            .env("DSH_HOME", home.path())
            .env_remove("DSH_PLUGIN_PATH")
            .args(["config", "check"]),
    );
    run.expect_code(4);
    assert!(run.stderr.contains("row \"llm-retry\": "), "{}", run.stderr);
    assert!(run.stderr.contains("hint: it ships with dsh: reinstall dsh (./install.sh PREFIX)"), "{}", run.stderr);
}

#[test]
fn plugin_list_shows_every_package_of_the_profile_under_a_header() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "relay-retry"]).expect_code(0);
    let list = home.run(&["plugin", "list"]);
    list.expect_code(0);
    let lines: Vec<Vec<&str>> = list.stdout.lines().skip(1).map(|line| line.split_whitespace().collect()).collect();
    assert_eq!(lines[0][..3], ["PACKAGE", "VERSION", "BUNDLE"]);
    let names: Vec<&str> = lines[1..].iter().map(|line| line[0]).collect();
    assert_eq!(names, ["relay-retry", "dsh-base", "llm-retry", "llm-retry-invariant"]);
    assert!(list.stdout.contains("llm-retry (disabled)"), "{}", list.stdout);
}
