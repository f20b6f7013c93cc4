//! `dsh plugin add/remove/list` through the real binary: building a plugin crate, installing a
//! prebuilt package, refusing a broken library without touching the profile, and removing a
//! package so that the composition is exactly what it was.

use std::path::{Path, PathBuf};

use dsh_e2e::{artifacts, files_under, library_file_name, workspace_root, TestHome};

/// A prebuilt package directory holding a copy of `library` (and, optionally, a bundle layer).
fn package_dir(home: &TestHome, name: &str, library: &Path, layer: Option<&str>) -> PathBuf {
    let dir = home.path().join(format!("pkg-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = library_file_name(name);
    std::fs::copy(library, dir.join(&file)).unwrap();
    let mut manifest = format!("name = \"{name}\"\nversion = \"0.1.0\"\nlibrary = \"{file}\"\n");
    if let Some(layer) = layer {
        std::fs::write(dir.join("cordis.patch.yml"), layer).unwrap();
        manifest.push_str("\n[bundle]\npatch = \"cordis.patch.yml\"\n");
    }
    std::fs::write(dir.join("dsh-plugin.toml"), manifest).unwrap();
    dir
}

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
    assert_eq!(run.code, Some(0), "{}", run.stderr);
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
    assert_eq!(entries[0]["abi"], "ok (abi 1)");
    assert_eq!(entries[0]["bundle"], 2);
    assert_eq!(entries[1]["name"], "dsh-base");
    let waterfall = home.run(&["config", "waterfall"]);
    let rows: Vec<&str> = waterfall.stdout.lines().map(|line| line.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(rows, ["llm-retry", "scripted"], "{}", waterfall.stderr);
}

#[test]
fn a_broken_library_is_refused_and_the_profile_is_left_byte_identical() {
    let home = TestHome::new();
    assert_eq!(home.run(&["config", "dump"]).code, Some(0));
    let profile = home.path().join("profiles/web");
    let before = snapshot(&profile);
    let package =
        package_dir(&home, "fixture-not-a-plugin", &artifacts().library("fixture-not-a-plugin"), Some(SCRIPTED_LAYER));
    let run = home.run(&["plugin", "add", package.to_str().unwrap()]);
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("not a dsh plugin ("), "{}", run.stderr);
    assert_eq!(snapshot(&profile), before);
}

#[test]
fn a_library_whose_name_differs_from_its_package_is_refused() {
    let home = TestHome::new();
    let package = package_dir(&home, "llm-retry", &artifacts().library("fixture-scripted"), None);
    let run = home.run(&["plugin", "--profile", "fresh", "add", package.to_str().unwrap()]);
    assert_eq!(run.code, Some(1));
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
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("declares no bundle, so it is installed but has no rows"), "{}", run.stdout);
    let dump = home.run(&["config", "--profile", "work", "dump", "--json"]);
    assert_eq!(dump.code, Some(0), "{}", dump.stderr);
    assert_eq!(serde_json::from_str::<Vec<serde_json::Value>>(&dump.stdout).unwrap().len(), 4);
}

#[test]
fn unknown_names_are_not_found() {
    let home = TestHome::new();
    assert_eq!(home.run(&["plugin", "add", "no-such-plugin"]).code, Some(3));
    assert_eq!(home.run(&["config", "dump"]).code, Some(0));
    let run = home.run(&["plugin", "remove", "no-such-plugin"]);
    assert_eq!(run.code, Some(3));
    assert!(run.stderr.contains("package \"no-such-plugin\" is not installed in profile web"), "{}", run.stderr);
}

#[test]
fn a_crate_directory_is_built_installed_and_removed_restoring_the_dump() {
    let home = TestHome::new();
    home.write("profiles/web/cordis.patch.yml", "# mine\n[]\n");
    let before = home.run(&["config", "dump", "--origins"]);
    assert_eq!(before.code, Some(0), "{}", before.stderr);
    let crate_dir = workspace_root().join("tests/fixtures/scripted");
    let build_dir = artifacts().dir.parent().unwrap().join("plugin-add-release");
    let run = dsh_e2e::Run::of(
        home.dsh()
            .args(["plugin", "add"])
            .arg(&crate_dir)
            .env("CARGO_TARGET_DIR", &build_dir)
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "true"),
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("installed fixture-scripted 0.1.0"), "{}", run.stdout);
    let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
    assert!(manifest.contains(&format!("source: crate:{}", crate_dir.display())), "{manifest}");
    let during = home.run(&["config", "dump", "--json"]);
    assert!(during.stdout.contains("\"scripted\""), "{}", during.stdout);
    let removed = home.run(&["plugin", "remove", "fixture-scripted"]);
    assert_eq!(removed.code, Some(0), "{}", removed.stderr);
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
    assert_eq!(home.run(&["plugin", "add", with_layer.to_str().unwrap()]).code, Some(0));
    std::fs::remove_file(with_layer.join("cordis.patch.yml")).unwrap();
    let without = package_dir(&home, "fixture-scripted", &library, None);
    let run = home.run(&["plugin", "add", without.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("dropped the bundle entry of fixture-scripted"), "{}", run.stdout);
    let manifest = std::fs::read_to_string(home.path().join("profiles/web/profile.yml")).unwrap();
    assert!(!manifest.contains("- fixture-scripted"), "{manifest}");
    let dump = home.run(&["config", "dump"]);
    assert_eq!(dump.code, Some(0), "{}", dump.stderr);
}
