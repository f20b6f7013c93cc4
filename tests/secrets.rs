//! The API key never appears in a session log, an error message, `--json` output, a debug log or
//! any file under the home, whatever command runs.

use dsh_e2e::turns::{route_patch, session_id, SECRET};
use dsh_e2e::{files_under, MockProcess, Run, TestHome};

#[test]
fn the_key_appears_in_no_file_output_or_log() {
    let home = TestHome::new();
    assert_eq!(home.run(&["plugin", "--profile", "web", "add", "dsh-retry"]).code, Some(0));
    let mock = MockProcess::start(
        &home,
        "- status: 401\n  body: {error: {message: invalid api key}}\n- truncate: half\n- ok: hello\n",
    );
    let patch = route_patch(
        &home,
        &mock,
        "{mode: normal, retryableCodes: [AUTH], backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}",
        "",
    );
    let patch = patch.to_str().unwrap().to_owned();
    let with_key = |args: &[&str]| Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(args));
    let first = with_key(&["-vv", "run", "--json", "--patch", &patch, "hello"]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let id = session_id(&first);
    let mut outputs = vec![first];
    for args in [
        vec!["-vv", "run", "--session", &id, "--patch", &patch, "again"],
        vec!["session", "list", "--json"],
        vec!["session", "show", &id],
        vec!["session", "show", &id, "--json"],
        vec!["session", "verify", &id, "--json"],
        vec!["session", "repair", &id],
        vec!["-vv", "session", "resume", &id, "--patch", &patch],
        vec!["config", "dump", "--json", "--patch", &patch],
        vec!["config", "dump", "--origins", "--patch", &patch],
        vec!["-vv", "config", "check", "--patch", &patch],
        vec!["config", "waterfall", "--patch", &patch],
        vec!["plugin", "list", "--json"],
    ] {
        outputs.push(with_key(&args));
    }
    for (index, output) in outputs.iter().enumerate() {
        assert!(!output.stdout.contains(SECRET) && !output.stderr.contains(SECRET), "command {index} printed the key");
    }
    assert!(mock.request_bodies().len() >= 3);
    for file in files_under(home.path()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "{} holds the key", file.display());
    }
}
