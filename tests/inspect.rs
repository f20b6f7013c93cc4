//! `dsh plugin inspect`: every kind of library gives its documented result and the host survives.

use std::path::PathBuf;

use dsh_e2e::{abi_mismatch_library, artifacts, Run, TestHome};

fn inspect(path: &std::path::Path) -> Run {
    Run::of(TestHome::new().dsh().args(["plugin", "inspect"]).arg(path))
}

/// A system shared library this process has loaded (libc), found through /proc/self/maps.
fn loaded_system_library() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/libc.so") || path.contains("/libc-"))
        .map(PathBuf::from)
        .expect("libc is mapped")
}

#[test]
fn a_valid_plugin_prints_its_manifest() {
    let run = inspect(&artifacts().library("fixture-scripted"));
    run.expect_code(0);
    assert!(run.stdout.contains("name:        fixture-scripted"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("abi version: {}", dsh_abi::ABI_VERSION)), "{}", run.stdout);
    assert!(run.stdout.contains("hooks:       agent/request-error"), "{}", run.stdout);
    assert!(run.stdout.contains("afterDownstream"), "{}", run.stdout);
}

#[test]
fn json_output_lists_hooks_and_config_keys() {
    let run = Run::of(
        TestHome::new().dsh().args(["plugin", "inspect", "--json"]).arg(artifacts().library("fixture-scripted")),
    );
    run.expect_code(0);
    let manifest: serde_json::Value = serde_json::from_str(&run.stdout).expect("inspect --json prints JSON");
    assert_eq!(manifest["name"], "fixture-scripted");
    assert_eq!(manifest["abiVersion"], dsh_abi::ABI_VERSION);
    assert_eq!(manifest["hooks"], serde_json::json!(["agent/request-error"]));
    assert_eq!(manifest["configKeys"][0]["name"], "answer");
}

#[test]
fn a_library_without_the_root_module_is_not_a_dsh_plugin() {
    let path = artifacts().library("fixture-not-a-plugin");
    let run = inspect(&path);
    run.expect_code(1);
    assert!(run.stderr.contains(&format!("{}: not a dsh plugin (", path.display())), "{}", run.stderr);
}

#[test]
fn an_executable_is_not_a_dsh_plugin() {
    let run = inspect(std::path::Path::new("/bin/ls"));
    run.expect_code(1);
    assert!(run.stderr.contains("/bin/ls: not a dsh plugin ("), "{}", run.stderr);
}

#[test]
fn a_system_library_is_not_a_dsh_plugin() {
    let libc = loaded_system_library();
    let run = inspect(&libc);
    run.expect_code(1);
    assert!(run.stderr.contains(&format!("{}: not a dsh plugin (", libc.display())), "{}", run.stderr);
}

#[test]
fn a_text_file_is_not_a_shared_library() {
    let home = TestHome::new();
    let file = home.path().join("notes.txt");
    std::fs::write(&file, "not a library\n").unwrap();
    let run = Run::of(home.dsh().args(["plugin", "inspect"]).arg(&file));
    run.expect_code(1);
    assert!(run.stderr.contains("not a dsh plugin (not a shared library"), "{}", run.stderr);
}

#[test]
fn a_missing_file_is_not_found() {
    let run = inspect(std::path::Path::new("/nonexistent/libplugin.so"));
    run.expect_code(3);
    assert!(run.stderr.contains("/nonexistent/libplugin.so: no such file"), "{}", run.stderr);
}

#[test]
fn a_library_for_another_architecture_is_refused_as_wrong_platform() {
    let home = TestHome::new();
    let copy = home.path().join("libthirty_two.so");
    let mut bytes = std::fs::read(artifacts().library("fixture-scripted")).unwrap();
    bytes[4] = 1; // EI_CLASS = ELFCLASS32
    std::fs::write(&copy, bytes).unwrap();
    let run = Run::of(home.dsh().args(["plugin", "inspect"]).arg(&copy));
    run.expect_code(1);
    assert!(run.stderr.contains("built for another platform (wrong ELF class"), "{}", run.stderr);
}

#[test]
fn a_layout_mismatch_names_the_type_and_both_sizes() {
    let run = inspect(abi_mismatch_library());
    run.expect_code(1);
    assert!(run.stderr.contains("plugin interface mismatch:"), "{}", run.stderr);
    assert!(run.stderr.contains("Hooks"), "{}", run.stderr);
    assert!(run.stderr.contains("incompatible type size (plugin: 8, host: 4)"), "{}", run.stderr);
}

#[test]
fn a_library_that_crashes_while_loading_is_reported_and_the_host_survives() {
    let run = inspect(&artifacts().library("fixture-crash-on-load"));
    run.expect_code(1);
    assert!(run.stderr.contains("crashed the inspecting process (signal 6, SIGABRT)"), "{}", run.stderr);
}

#[test]
fn the_same_plugin_inspects_from_two_paths() {
    let home = TestHome::new();
    for name in ["first", "second"] {
        let copy = home.path().join(format!("lib{name}.so"));
        std::fs::copy(artifacts().library("fixture-scripted"), &copy).unwrap();
        let run = Run::of(home.dsh().args(["plugin", "inspect"]).arg(&copy));
        run.expect_code(0);
        assert!(run.stdout.contains("fixture-scripted"));
    }
}

#[test]
fn a_library_built_with_panic_abort_is_refused_with_the_reason() {
    let library = dsh_e2e::panic_abort_library();
    let run = inspect(library);
    run.expect_code(1);
    assert!(run.stderr.contains("it was built with panic = \"abort\""), "{}", run.stderr);
    let home = TestHome::new();
    let dir = home.path().join("pkg");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dsh_e2e::library_file_name("fixture-panic-abort");
    std::fs::copy(library, dir.join(&file)).unwrap();
    std::fs::write(
        dir.join("dsh-plugin.toml"),
        format!("name = \"fixture-panic-abort\"\nversion = \"0.1.0\"\nlibrary = \"{file}\"\n"),
    )
    .unwrap();
    let add = home.run(&["plugin", "add", dir.to_str().unwrap()]);
    add.expect_code(1);
    assert!(add.stderr.contains("panic = \"abort\""), "{}", add.stderr);
    assert!(!home.path().join("profiles/web/plugins/fixture-panic-abort").exists());
}

#[test]
fn a_library_whose_constructor_leaves_a_process_behind_cannot_hold_inspect() {
    let home = TestHome::new();
    let pid_file = home.path().join("forked.pid");
    let run = Run::of(
        home.dsh()
            .env("DSH_FIXTURE_PID_FILE", &pid_file)
            .args(["plugin", "inspect"])
            .arg(artifacts().library("fixture-forking")),
    );
    run.expect_code(1);
    assert!(run.stderr.contains("not a dsh plugin"), "{}", run.stderr);
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the library wrote its forked child's pid while it opened")
        .trim()
        .parse()
        .expect("a pid");
    let gone = dsh_e2e::wait_until(dsh_e2e::PATIENCE, || !dsh_e2e::process::exists(pid));
    assert!(gone, "the process the library left behind was stopped with the inspection");
}
