//! The API key never appears in a session log, an error message, `--json` output, a debug log or
//! any file under the home, whatever command runs.

use dsh_e2e::turns::{route_patch, session_id, SECRET};
use dsh_e2e::{files_under, MockProcess, Run, TestHome};

#[test]
fn the_key_appears_in_no_file_output_or_log() {
    let home = TestHome::new();
    home.run(&["plugin", "--profile", "web", "add", "dsh-retry"]).expect_code(0);
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
    first.expect_code(0);
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

#[test]
fn a_provider_that_echoes_the_key_never_gets_it_into_a_log_or_an_output() {
    let home = TestHome::new();
    let script = format!(
        r#"- status: 401
  headers: {{x-request-id: "req-{SECRET}"}}
  body: {{error: {{message: "invalid api key {SECRET}"}}}}
- status: 503
  headers: {{content-type: text/html}}
  body: "<html><head><title>503 for {SECRET}</title></head></html>"
- frames: ['{{"error":{{"message":"key {SECRET} rejected mid-stream"}}}}']
- frames: ['{{"choices":[{{"delta":{{"content":"your key is {SECRET}, "}}}}]}}', '{{"choices":[{{"delta":{{"content":"kept safe"}},"finish_reason":"{SECRET}\u001b[2J"}}]}}', "[DONE]"]
- frames: ['{{"choices":[{{"delta":{{"content":"echo {head}"}}}}]}}', '{{"choices":[{{"delta":{{"content":"{tail} split across chunks"}},"finish_reason":"stop"}}]}}', "[DONE]"]
"#,
        head = &SECRET[..7],
        tail = &SECRET[7..],
    );
    let mock = MockProcess::start(&home, &script);
    let patch =
        route_patch(&home, &mock, "{mode: always, backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}", "");
    let run =
        Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--json", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    assert!(!run.stdout.contains(SECRET) && !run.stderr.contains(SECRET), "{}\n{}", run.stdout, run.stderr);
    let plain =
        Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi again"));
    assert!(!plain.stdout.contains(SECRET) && !plain.stderr.contains(SECRET), "{}\n{}", plain.stdout, plain.stderr);
    for file in files_under(home.path()).iter().filter(|file| file.to_string_lossy().contains("sessions")) {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(!text.contains(SECRET), "{} holds the key", file.display());
    }
    let events: Vec<serde_json::Value> = run.stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let codes: Vec<&str> = events
        .iter()
        .filter(|event| event["type"] == "assistant/attempt")
        .map(|event| event["data"]["failure"]["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["AUTH", "SERVER", "SERVER", "UNKNOWN"], "a finish_reason becomes a known code");
    let answer = events.iter().find(|event| event["type"] == "assistant/message").unwrap();
    assert_eq!(answer["data"]["message"]["content"][0]["text"], "echo [redacted] split across chunks");
    assert!(events.iter().all(|event| !event.to_string().contains('\u{1b}')), "no control sequence in a code");
}
