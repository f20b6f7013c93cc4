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
        .map(|event| dsh_e2e::turns::attempt_failure(event)["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["AUTH", "SERVER", "SERVER", "UNKNOWN"], "a finish_reason becomes a known code");
    let answer = events.iter().find(|event| event["type"] == "assistant/message").unwrap();
    assert_eq!(answer["data"]["message"]["content"][0]["text"], "echo [redacted] split across chunks");
    assert!(events.iter().all(|event| !event.to_string().contains('\u{1b}')), "no control sequence in a code");
}

/// Every file under the home that holds `secret`, but the mock's scripts (which hold what the
/// test makes the provider send).
fn files_holding(home: &TestHome, secret: &str) -> Vec<std::path::PathBuf> {
    let script = |file: &std::path::Path| {
        file.file_name().is_some_and(|name| name.to_string_lossy().ends_with(".yml"))
            && file.parent() == Some(home.path())
    };
    files_under(home.path())
        .into_iter()
        .filter(|file| !script(file) && String::from_utf8_lossy(&std::fs::read(file).unwrap()).contains(secret))
        .collect()
}

#[test]
fn an_http_mcp_server_echoing_its_token_gets_it_into_no_log_output_or_model_request() {
    const TOKEN: &str = "tok-SECRET-mcp";
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let server = super::tools::HttpServer::side_effects(&ledger, &[("EXPECT_TOKEN", TOKEN), ("ECHO_TOKEN", "1")]);
    let script = "- tool_calls: [{name: whoami}, {name: whoami_error}]\n- ok: done\n";
    let row = super::tools::http_row(&server.url("/mcp"), "        tokenEnv: MCP_TOKEN\n");
    let (home, mock, patch) = super::tools::home_with_rows(script, &row);
    let with = |token: &str, args: &[&str]| {
        Run::of(
            home.dsh().env("DEEPSEEK_API_KEY", SECRET).env("MCP_TOKEN", token).args(args).arg("--patch").arg(&patch),
        )
    };
    let run = with(TOKEN, &["run", "--json", "hi"]);
    run.expect_code(0);
    assert!(run.stdout.contains("you sent Bearer [redacted]"), "{run}");
    assert!(!run.stdout.contains(TOKEN) && !run.stderr.contains(TOKEN), "{run}");
    assert!(mock.request_bodies().iter().all(|body| !body.contains(TOKEN)), "a model request held the token");
    assert!(files_holding(&home, TOKEN).is_empty(), "{:?}", files_holding(&home, TOKEN));
    let wrong = with("tok-WRONG-echoed", &["config", "check"]);
    wrong.expect_code(4);
    assert!(!wrong.stderr.contains("tok-WRONG-echoed"), "the 401 body's echo was shown: {wrong}");
    assert!(wrong.stderr.contains(&server.url("/mcp")) || !wrong.stderr.contains("127.0.0.1:[redacted]"), "{wrong}");
}

#[test]
fn the_key_inside_a_streamed_tool_call_id_is_redacted() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let script = format!("- tool_calls: [{{name: now, id: 'call-{SECRET}'}}]\n- ok: done\n");
    let (home, _mock, patch) = super::tools::home_with_rows(&script, &super::tools::server_row("side", &ledger, ""));
    let run =
        Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--json", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    assert!(!run.stdout.contains(SECRET) && !run.stderr.contains(SECRET), "{run}");
    let id = session_id(&run);
    let show = home.run(&["session", "show", &id]);
    assert!(!show.stdout.contains(SECRET) && show.stdout.contains("call-[redacted]"), "{show}");
    assert!(files_holding(&home, SECRET).is_empty(), "{:?}", files_holding(&home, SECRET));
}

#[test]
fn store_urls_in_any_form_never_show_their_password() {
    let home = TestHome::new();
    for url in [
        "POSTGRES://dsh:PASSW0RD-A@127.0.0.1:1/db",
        "postgres://dsh:PASSW0RD-A@b@127.0.0.1:1/db",
        "postgresql://dsh@127.0.0.1:1/db?password=PASSW0RD-A",
        "mysql://dsh:PASSW0RD-A@127.0.0.1:1/db",
    ] {
        let run = Run::of(home.dsh().env("DSH_SESSIONS", url).args(["session", "list"]));
        assert_ne!(run.code, Some(0), "{run}");
        assert!(!run.stderr.contains("PASSW0RD-A") && !run.stdout.contains("PASSW0RD-A"), "{run}");
    }
    home.run(&["plugin", "--profile", "b", "add", "retry-budget"]).expect_code(0);
    for store in
        ["REDIS://:PASSW0RD-B@127.0.0.1:1", "redis://:PASSW0RD-B@b@127.0.0.1:1", "redis://u:PASSW0RD-B@127.0.0.1:1/0"]
    {
        let layer = home.write("budget.yml", &format!("- id: retry-budget\n  config: {{store: '{store}'}}\n"));
        let check = home.run(&["config", "--profile", "b", "check", "--patch", layer.to_str().unwrap()]);
        assert!(!check.stderr.contains("PASSW0RD-B") && !check.stdout.contains("PASSW0RD-B"), "{check}");
    }
}

#[test]
fn an_inline_credential_is_warned_about_and_kept_out_of_the_sessions_copy_of_its_layer() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: hello\n");
    let with_user = mock.base_url.replacen("http://", "http://sk-INLINE-relay-key@", 1);
    let layer = home.write(
        "inline.yml",
        &format!(
            "- id: llm-deepseek\n  name: llm-openai\n  config:\n    provider: deepseek-official\n    baseUrl: '{with_user}'\n    model: m\n    headers: {{X-Api-Key: INLINE-header-value, X.Api.Key: INLINE-dotted-value}}\n"
        ),
    );
    let check = home.run(&["config", "check", "--patch", layer.to_str().unwrap()]);
    check.expect_code(0);
    check.expect_stderr("config.baseUrl: holds a credential written inline in the layer");
    check.expect_stderr("hint: apiKeyEnv: VARIABLE sends the key from the environment variable VARIABLE");
    check.expect_stderr("config.headers.X-Api-Key: holds a credential written inline in the layer");
    check.expect_stderr("hint: headerEnv: {X-Api-Key: VARIABLE}");
    for dump in [&["--json"][..], &["--origins"], &["--origins", "--json"], &[]] {
        let args = [&["config", "dump", "--patch", layer.to_str().unwrap()][..], dump].concat();
        let shown = home.run(&args);
        shown.expect_code(0).expect_stdout("[redacted]").expect_stderr(
            "credentials written inline are shown as [redacted] (llm-deepseek config.baseUrl, llm-deepseek config.headers.X-Api-Key, llm-deepseek config.headers.X.Api.Key)",
        );
        assert!(!shown.stdout.contains("INLINE"), "{shown}");
    }
    let run = Run::of(home.dsh().args(["run", "--patch"]).arg(&layer).arg("hi"));
    run.expect_code(0).expect_stdout("hello");
    let id = session_id(&run);
    for secret in ["sk-INLINE-relay-key", "INLINE-header-value", "INLINE-dotted-value"] {
        let holding: Vec<_> = files_holding(&home, secret).into_iter().filter(|file| *file != layer).collect();
        assert!(holding.is_empty(), "{secret} is in {holding:?}");
    }
    let again = Run::of(home.dsh().args(["run", "--session", &id, "again"]));
    again.expect_code(0);
    assert!(!again.stderr.contains("holds no credentials"), "the unchanged layer itself was used: {again}");
    assert_eq!(mock.request_bodies().len(), 2);
    std::fs::remove_file(&layer).unwrap();
    let gone = Run::of(home.dsh().args(["run", "--session", &id, "once more"]));
    gone.expect_stderr("is gone; running with the copy kept in");
    gone.expect_stderr("which holds no credentials (llm-deepseek config.baseUrl, llm-deepseek config.headers.X-Api-Key, llm-deepseek config.headers.X.Api.Key redacted): give them through the environment");
}
