//! Tools through a real MCP server (`tests/fixtures/mcp/side_effects.py`, stdio): multi-step
//! turns, the requests that carry tools and results, every fault of a call becoming an error
//! result the model reads, and a side effect counted across retries, crashes and resumes.

use std::path::PathBuf;

use dsh_e2e::turns::{route_patch, run_turn, session_id, Turn, SECRET, TINY};
use dsh_e2e::{log_events, session_dirs, wait_until, workspace_root, MockProcess, Run, TestHome, PATIENCE};
use serde_json::Value;

/// A home whose route is a mock server running `script`, with the side-effect server as row
/// `side` (config `extra`, YAML lines indented under `config:`); returns the patch and ledger.
pub(crate) struct ToolHome {
    pub(crate) home: TestHome,
    pub(crate) mock: MockProcess,
    pub(crate) patch: PathBuf,
    pub(crate) ledger: PathBuf,
}

pub(crate) fn server_row(id: &str, ledger: &std::path::Path, extra: &str) -> String {
    let server = workspace_root().join("tests/fixtures/mcp/side_effects.py");
    format!(
        "- insert:\n    - id: {id}\n      name: mcp\n      config:\n        command: [python3, {}]\n        env: {{LEDGER: {}}}\n{extra}",
        server.display(),
        ledger.display()
    )
}

pub(crate) fn tool_home(script: &str, extra: &str) -> ToolHome {
    tool_home_in(TestHome::new(), script, extra)
}

/// [`tool_home`] in `home`.
pub(crate) fn tool_home_in(home: TestHome, script: &str, extra: &str) -> ToolHome {
    let ledger = home.path().join("ledger.txt");
    let (mock, patch) = route_with_rows(&home, script, &server_row("side", &ledger, extra));
    ToolHome { home, mock, patch, ledger }
}

impl ToolHome {
    /// Starts `dsh run` and returns once its log holds two durable `tool/call`s and the first
    /// one's result (the first call ran; the second is running).
    pub(crate) fn spawn_until_the_second_call_runs(&self) -> std::process::Child {
        let child = self
            .home
            .dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--patch"])
            .arg(&self.patch)
            .arg("use the tools")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let calls_durable = wait_until(PATIENCE, || {
            let log = dsh_e2e::only_session_log(&self.home);
            let events = log.map(|log| log_events(&log)).unwrap_or_default();
            let count = |kind: &str| events.iter().filter(|event| event["type"] == kind).count();
            count("tool/call") == 2 && count("tool/result") == 1
        });
        let log = dsh_e2e::only_session_log(&self.home).map(|log| std::fs::read_to_string(log).unwrap());
        assert!(calls_durable, "the calls never became durable: {log:?}");
        child
    }

    pub(crate) fn ledger_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.ledger).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    pub(crate) fn turn(&self) -> Turn {
        run_turn(&self.home, &self.patch, "use the tools")
    }

    pub(crate) fn request(&self, number: usize) -> Value {
        serde_json::from_str(&self.mock.request_bodies()[number - 1]).unwrap()
    }
}

pub(crate) fn types(turn: &Turn) -> Vec<String> {
    turn.events.iter().map(|event| event["type"].as_str().unwrap().to_owned()).collect()
}

/// The `error.code` of each `tool/result` of `events`, in order (`-` for a result without one).
pub(crate) fn result_codes(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|event| event["type"] == "tool/result")
        .map(|event| event["data"]["error"]["code"].as_str().unwrap_or("-").to_owned())
        .collect()
}

pub(crate) fn result_text(event: &Value) -> String {
    dsh_e2e::turns::tool_result_block(event)["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[test]
fn a_tool_step_runs_its_calls_once_and_the_next_step_sends_their_results() {
    let tools =
        tool_home("- tool_calls: [{name: append, arguments: {line: one}}, {name: now}]\n- ok: \"all done\"\n", "");
    let turn = tools.turn();
    turn.run
        .expect_code(0)
        .expect_stdout("all done")
        .expect_stderr("tool append {\"line\":\"one\"} → 8 bytes: appended");
    assert_eq!(tools.ledger_lines(), ["one"]);
    let types = types(&turn);
    let answered = types.iter().position(|kind| kind == "assistant/message").unwrap();
    assert_eq!(
        types[answered..],
        [
            "assistant/message",
            "tool/call",
            "tool/call",
            "tool/result",
            "tool/result",
            "step/end",
            "step/start",
            "llm/first-token",
            "assistant/message",
            "step/end",
            "turn/end"
        ]
    );
    let answer = &turn.of_type("assistant/message")[0]["data"]["message"]["content"];
    assert_eq!(
        answer[0],
        serde_json::json!({"type": "tool-call", "id": "call_1_1", "name": "append", "arguments": "{\"line\":\"one\"}"})
    );
    let result = turn.of_type("tool/result")[0];
    assert_eq!(result["sourceEventSeqs"], serde_json::json!([turn.of_type("tool/call")[0]["seq"]]));
    assert_eq!(result["data"]["message"]["source"], serde_json::json!({"kind": "tool", "callId": "call_1_1"}));

    let first = tools.request(1);
    let offered: Vec<&str> =
        first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        offered,
        ["append", "echo", "now", "big", "refuse", "garbage", "crash", "hang", "leave", "env", "blocks", "fails"]
    );
    let second = tools.request(2);
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "append");
    assert_eq!(messages[2]["content"], Value::Null);
    assert_eq!(messages[3], serde_json::json!({"role": "tool", "content": "appended", "tool_call_id": "call_1_1"}));
    assert_eq!(messages[4]["content"], "tick");
}

/// The entry point of `@modelcontextprotocol/server-everything`, installed (pinned, once, into a
/// cache folder) by `tests/fixtures/mcp/install-everything.sh` when it is not there yet.
/// The `node_modules` that `install-everything.sh` fills (run once per test binary): the
/// reference server and the official TypeScript SDK it is built on.
pub(crate) fn mcp_modules() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let script = workspace_root().join("tests/fixtures/mcp/install-everything.sh");
            let installed = std::process::Command::new("bash").arg(&script).status();
            assert!(
                installed.as_ref().is_ok_and(|status| status.success()),
                "{} failed ({installed:?}): it needs npm and the npm registry",
                script.display()
            );
            let cache = std::env::var_os("DSH_E2E_MCP_CACHE").map(PathBuf::from).unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/dsh-e2e/mcp")
            });
            cache.join("node_modules")
        })
        .clone()
}

pub(crate) fn everything_server() -> PathBuf {
    mcp_modules().join("@modelcontextprotocol/server-everything/dist/index.js")
}

/// A server over streamable HTTP, killed when dropped.
pub(crate) struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    /// Spawns `command` and returns once it writes a line saying it is `listening` (on stdout, or
    /// stderr when `on_stderr`); the port is that line's last word.
    pub(crate) fn start(command: &mut std::process::Command, on_stderr: bool) -> HttpServer {
        use std::io::BufRead;
        use std::process::Stdio;
        let (out, err) = if on_stderr { (Stdio::null(), Stdio::piped()) } else { (Stdio::piped(), Stdio::null()) };
        let mut child = command.stdout(out).stderr(err).spawn().expect("node starts");
        let stream: Box<dyn std::io::Read + Send> = match on_stderr {
            true => Box::new(child.stderr.take().unwrap()),
            false => Box::new(child.stdout.take().unwrap()),
        };
        let mut lines = std::io::BufReader::new(stream).lines();
        let listening = lines.by_ref().map_while(Result::ok).find(|line| line.contains("listening"));
        let port = listening.as_deref().and_then(|line| line.rsplit(' ').next()?.parse().ok());
        let port = port.unwrap_or_else(|| panic!("{command:?} never said it was listening ({listening:?})"));
        // Its later output is drained so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        HttpServer { child, port }
    }

    /// The side-effect server of `side_effects_http.mjs`, counting calls in `ledger`.
    pub(crate) fn side_effects(ledger: &std::path::Path, env: &[(&str, &str)]) -> HttpServer {
        let script = workspace_root().join("tests/fixtures/mcp/side_effects_http.mjs");
        let mut command = std::process::Command::new("node");
        command.arg(script).env("MCP_MODULES", mcp_modules()).env("LEDGER", ledger).envs(env.iter().copied());
        HttpServer::start(&mut command, false)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        dsh_e2e::process::kill_9(&mut self.child);
    }
}

/// A home whose route is a mock server running `script`, with `rows` added to its patch.
pub(crate) fn home_with_rows(script: &str, rows: &str) -> (TestHome, MockProcess, PathBuf) {
    let home = TestHome::new();
    let (mock, patch) = route_with_rows(&home, script, rows);
    (home, mock, patch)
}

/// A mock server running `script` and a patch routing to it, with `rows` added.
pub(crate) fn route_with_rows(home: &TestHome, script: &str, rows: &str) -> (MockProcess, PathBuf) {
    let mock = MockProcess::start(home, script);
    let patch = route_patch(home, &mock, TINY, "");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + rows).unwrap();
    (mock, patch)
}

#[test]
fn a_turn_uses_the_reference_everything_server_over_stdio() {
    let home = TestHome::new();
    let script = "- tool_calls: [{name: echo, arguments: {message: hello}}, {name: get-sum, arguments: {a: 2, b: 3}}, {name: get-tiny-image}]\n- ok: \"used them\"\n";
    let mock = MockProcess::start(&home, script);
    let patch = route_patch(&home, &mock, TINY, "");
    let row = format!(
        "- insert:\n    - id: everything\n      name: mcp\n      config: {{command: [node, {}, stdio]}}\n",
        everything_server().display()
    );
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + &row).unwrap();
    let listed = home.run(&["config", "tools", "--json", "--patch", patch.to_str().unwrap()]);
    listed.expect_code(0);
    let listed: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    assert!(listed.iter().any(|tool| tool["name"] == "get-sum" && tool["inputSchema"]["properties"]["a"].is_object()));
    let turn = run_turn(&home, &patch, "use the reference server");
    turn.run.expect_code(0).expect_stdout("used them");
    let results: Vec<String> = turn.of_type("tool/result").into_iter().map(result_text).collect();
    assert_eq!(results[0], "Echo: hello");
    assert!(results[1].contains('5'), "{}", results[1]);
    assert!(results[2].contains("[image image/png, "), "{}", results[2]);
    assert_eq!(result_codes(&turn.events), ["-", "-", "-"]);
}

#[test]
fn a_turn_uses_the_reference_everything_server_over_streamable_http() {
    let port = dsh_e2e::free_port();
    let mut command = std::process::Command::new("node");
    command.arg(everything_server()).arg("streamableHttp").env("PORT", port.to_string());
    let server = HttpServer::start(&mut command, true);
    let script = "- tool_calls: [{name: echo, arguments: {message: over http}}, {name: get-sum, arguments: {a: 4, b: 5}}]\n- ok: \"used them\"\n";
    let row =
        format!("- insert:\n    - id: everything\n      name: mcp\n      config: {{url: {}}}\n", server.url("/mcp"));
    let (home, _mock, patch) = home_with_rows(script, &row);
    let listed = home.run(&["config", "tools", "--json", "--patch", patch.to_str().unwrap()]);
    let listed: Vec<Value> = serde_json::from_str(&listed.expect_code(0).stdout).unwrap();
    assert!(listed.iter().any(|tool| tool["name"] == "get-sum"), "{listed:?}");
    let turn = run_turn(&home, &patch, "use the reference server over http");
    turn.run.expect_code(0).expect_stdout("used them");
    let results: Vec<String> = turn.of_type("tool/result").into_iter().map(result_text).collect();
    assert_eq!(results[0], "Echo: over http");
    assert!(results[1].contains('9'), "{}", results[1]);
}

/// The `mcp` row of a server at `url` sending `extra` (YAML lines under `config:`).
pub(crate) fn http_row(url: &str, extra: &str) -> String {
    format!("- insert:\n    - id: remote\n      name: mcp\n      config:\n        url: {url}\n{extra}")
}

#[test]
fn a_server_over_http_gets_its_token_and_headers_and_each_call_runs_once() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let server = HttpServer::side_effects(&ledger, &[("EXPECT_TOKEN", "t0ken-9f2"), ("EXPECT_TEAM", "blue")]);
    let script =
        "- tool_calls: [{name: append, arguments: {line: one}}, {name: append, arguments: {line: two}}]\n- ok: done\n";
    let row = http_row(&server.url("/mcp"), "        headers: {X-Team: blue}\n        tokenEnv: MCP_TOKEN\n");
    let (home, _mock, patch) = home_with_rows(script, &row);
    let run = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .env("MCP_TOKEN", "t0ken-9f2")
            .args(["run", "--patch"])
            .arg(&patch)
            .arg("go"),
    );
    run.expect_code(0).expect_stdout("done");
    let mut lines: Vec<String> = std::fs::read_to_string(&ledger).unwrap().lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, ["one", "two"]);

    let unset = home.run(&["config", "check", "--patch", patch.to_str().unwrap()]);
    unset
        .expect_code(4)
        .expect_stderr("row \"remote\": the MCP server cannot be used: tokenEnv names $MCP_TOKEN, which is not set");
    let wrong = Run::of(home.dsh().env("MCP_TOKEN", "wr0ng-token").args(["config", "check", "--patch"]).arg(&patch));
    wrong.expect_code(4).expect_stderr("row \"remote\": the MCP server cannot be used: the MCP handshake failed");
    assert!(!wrong.stderr.contains("wr0ng-token"), "the token was shown: {}", wrong.stderr);
}

#[test]
fn a_server_over_http_that_goes_away_mid_call_is_outcome_unknown_and_its_call_never_sent_again() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let server = HttpServer::side_effects(&ledger, &[]);
    let script =
        "- tool_calls: [{name: leave}]\n- tool_calls: [{name: append, arguments: {line: after}}]\n- ok: carried on\n";
    let (home, _mock, patch) = home_with_rows(script, &http_row(&server.url("/mcp"), ""));
    let turn = run_turn(&home, &patch, "use the tools");
    turn.run.expect_code(0).expect_stdout("carried on");
    assert_eq!(result_codes(&turn.events), ["TOOL_OUTCOME_UNKNOWN", "TOOL_SERVER_UNAVAILABLE"]);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "leave\n", "the call the server died in ran once");
}

#[test]
fn json_streams_the_tool_events_and_replay_never_runs_a_tool() {
    let tools = tool_home("- tool_calls: [{name: append, arguments: {line: one}}]\n- ok: done\n", "");
    let run = Run::of(
        tools.home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--json", "--patch"]).arg(&tools.patch).arg("go"),
    );
    run.expect_code(0);
    let lines: Vec<Value> = run.stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let streamed: Vec<&str> = lines[1..].iter().map(|event| event["type"].as_str().unwrap()).collect();
    assert!(streamed.contains(&"tool/call") && streamed.contains(&"tool/result"), "{streamed:?}");
    let id = lines[0]["session"].as_str().unwrap();
    tools.home.run(&["session", "replay", id]).expect_code(0).expect_stdout("1 session, 1 turn replayed");
    assert_eq!(tools.ledger_lines(), ["one"], "the replay ran no tool");
}

#[test]
fn a_failed_request_in_step_two_is_retried_with_step_ones_results_and_runs_no_tool_again() {
    let tools = tool_home(
        "- tool_calls: [{name: append, arguments: {line: once}}]\n- status: 503\n- reset: true\n- status: 429\n- ok: \"recovered\"\n",
        "",
    );
    let turn = tools.turn();
    turn.run.expect_code(0).expect_stdout("recovered");
    assert_eq!(tools.ledger_lines(), ["once"], "three failed requests in step 2, one call");
    assert_eq!(turn.of_type("tool/call").len(), 1);
    let retries = turn.of_type("llm/retry");
    assert_eq!(retries.len(), 3);
    assert!(retries.iter().all(|retry| retry["data"]["step"] == 2), "every retry is in step 2");
    let sent: Vec<Value> = (2..=5).map(|number| tools.request(number)["messages"].clone()).collect();
    assert!(sent.iter().all(|messages| *messages == sent[0]), "every retry sends step 1's results");
    assert_eq!(sent[0].as_array().unwrap().len(), 4, "system, user, the tool calls, their result");
}

#[test]
fn every_bad_call_becomes_an_error_result_the_model_reads_and_the_turn_goes_on() {
    let tools = tool_home(
        concat!(
            "- tool_calls: [{name: nope}, {name: echo, arguments: \"{not json\"}, {name: echo, arguments: \"[1]\"}, {name: refuse}]\n",
            "- tool_calls: [{name: crash}]\n",
            "- tool_calls: [{name: echo, arguments: {text: back}}]\n",
            "- tool_calls: [{name: crash}]\n",
            "- tool_calls: [{name: echo, arguments: {text: again}}]\n",
            "- ok: \"coped\"\n",
        ),
        "",
    );
    let turn = tools.turn();
    turn.run.expect_code(0).expect_stdout("coped");
    assert_eq!(
        result_codes(&turn.events),
        [
            "TOOL_NOT_FOUND",
            "TOOL_INVALID_ARGUMENTS",
            "TOOL_INVALID_ARGUMENTS",
            "TOOL_CALL_REFUSED",
            "TOOL_OUTCOME_UNKNOWN",
            "-",
            "TOOL_OUTCOME_UNKNOWN",
            "TOOL_SERVER_UNAVAILABLE"
        ]
    );
    let results = turn.of_type("tool/result");
    assert!(result_text(results[0]).contains("no tool named \"nope\" is offered (tools: append, echo,"));
    assert!(result_text(results[1]).starts_with("Error: the arguments are not JSON ("));
    assert!(result_text(results[4]).contains("whether the tool ran is unknown, and dsh does not call it again"));
    assert_eq!(result_text(results[5]), "back", "a server gone between steps is started again once");
    assert!(result_text(results[7]).contains("it was already started again once"), "{}", result_text(results[7]));
    turn.run.expect_stderr("server \"side\" exited; starting it again");
}

#[test]
fn a_call_past_its_timeout_is_said_to_the_model_as_outcome_unknown() {
    let tools = tool_home("- tool_calls: [{name: hang}]\n- ok: fine\n", "        callTimeoutMs: 300\n");
    let turn = tools.turn();
    turn.run.expect_code(0);
    let text = result_text(turn.of_type("tool/result")[0]);
    assert!(text.contains("gave no answer within 300 ms (callTimeoutMs)"), "{text}");
    assert_eq!(result_codes(&turn.events), ["TOOL_OUTCOME_UNKNOWN"]);
}

#[test]
fn a_result_one_byte_over_the_cap_is_cut_and_the_model_told() {
    let limit = dsh_host::tools::MAX_RESULT_BYTES;
    let tools =
        tool_home(&format!("- tool_calls: [{{name: big, arguments: {{bytes: {}}}}}]\n- ok: fine\n", limit + 1), "");
    let turn = tools.turn();
    turn.run.expect_code(0);
    let note = format!("[dsh: the result was cut at {limit} of its {} bytes]", limit + 1);
    let big = result_text(turn.of_type("tool/result")[0]);
    assert_eq!(big.len(), limit + note.len());
    assert!(big.ends_with(&note));
}

#[test]
fn a_fifty_megabyte_result_and_an_answer_that_is_not_json_rpc_become_error_results_and_the_turn_goes_on() {
    let script = "- tool_calls: [{name: big, arguments: {bytes: 50000000}}, {name: garbage}]\n- ok: fine\n";
    let tools = tool_home(script, "");
    let turn = tools.turn();
    turn.run.expect_code(0).expect_stdout("fine");
    let results = turn.of_type("tool/result");
    let big = result_text(results[0]);
    assert!(big.ends_with("[dsh: the result was cut at 1048576 of its 50000000 bytes]"), "{}", &big[big.len() - 80..]);
    let garbage = result_text(results[1]);
    assert!(garbage.contains("server \"side\" answered with something that is not a tool result"), "{garbage}");
    assert_eq!(result_codes(&turn.events)[1], "TOOL_OUTCOME_UNKNOWN");
    let log = std::fs::read_to_string(dsh_e2e::only_session_log(&tools.home).unwrap()).unwrap();
    assert!(log.len() < 3 * 1024 * 1024, "the log holds the cut result only ({} bytes)", log.len());
}

#[test]
fn a_one_mebibyte_argument_reaches_the_tool_whole() {
    let limit = dsh_host::tools::MAX_RESULT_BYTES;
    let text = "x".repeat(limit);
    let tools = tool_home(&format!("- tool_calls: [{{name: echo, arguments: {{text: {text}}}}}]\n- ok: fine\n"), "");
    let turn = tools.turn();
    turn.run.expect_code(0);
    assert_eq!(result_text(turn.of_type("tool/result")[0]), text, "exactly the cap: nothing cut");
    let call = turn.of_type("tool/call")[0];
    assert_eq!(call["data"]["arguments"].as_str().unwrap().len(), limit + r#"{"text":""}"#.len());
}

#[test]
fn a_turn_ends_after_max_steps_with_a_clear_reason() {
    let tools = tool_home("- tool_calls: [{name: now}]\n", "");
    std::fs::write(
        &tools.patch,
        std::fs::read_to_string(&tools.patch).unwrap()
            + "- id: agent\n  config: {provider: deepseek-official, maxSteps: 3}\n",
    )
    .unwrap();
    let turn = tools.turn();
    turn.run.expect_code(1).expect_stderr("the turn took 3 steps, the most the agent row allows (maxSteps)");
    assert_eq!(turn.end()["error"]["code"], "MAX_STEPS");
    assert_eq!(turn.of_type("tool/result").len(), 3);
}

#[test]
fn config_tools_lists_each_server_s_tools_with_unique_names_and_check_names_a_server_that_fails() {
    let tools = tool_home("- ok: hi\n", "        tools: {allow: [echo, now]}\n");
    let other = server_row("other", &tools.ledger, "        tools: {deny: [crash]}\n");
    std::fs::write(&tools.patch, std::fs::read_to_string(&tools.patch).unwrap() + &other).unwrap();
    let patch = tools.patch.to_str().unwrap();
    let listed = tools.home.run(&["config", "tools", "--json", "--patch", patch]);
    listed.expect_code(0);
    let listed: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    let names: Vec<&str> = listed.iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "side__echo",
            "side__now",
            "append",
            "other__echo",
            "other__now",
            "big",
            "refuse",
            "garbage",
            "hang",
            "leave",
            "env",
            "blocks",
            "fails"
        ]
    );
    assert_eq!(listed[0]["remoteName"], "echo");
    tools
        .home
        .run(&["config", "tools", "--patch", patch])
        .expect_code(0)
        .expect_stdout("other · big — A result of N bytes\n  input: {");

    let broken = tools.home.write(
        "broken.yml",
        "- insert:\n    - id: broken\n      name: mcp\n      config: {command: [python3, -c, 'import sys; sys.stderr.write(\"no config here\\n\"); sys.exit(2)']}\n    - id: missing\n      name: mcp\n      config: {command: [/nonexistent/server]}\n",
    );
    let check = tools.home.run(&["config", "check", "--patch", broken.to_str().unwrap()]);
    check
        .expect_code(4)
        .expect_stderr("row \"broken\": the MCP server cannot be used: the MCP handshake failed")
        .expect_stderr("its stderr ends: no config here")
        .expect_stderr("row \"missing\": the MCP server cannot be used: cannot start /nonexistent/server");
    let run = Run::of(tools.home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&broken).arg("hi"));
    run.expect_code(4).expect_stderr("row \"broken\": the MCP server cannot be used");
}

#[test]
fn the_server_sees_only_its_row_s_environment_plus_path_and_home() {
    let tools = tool_home("- tool_calls: [{name: env}]\n- ok: done\n", "");
    let turn = tools.turn();
    turn.run.expect_code(0);
    let names = result_text(turn.of_type("tool/result")[0]);
    let names: Vec<&str> = names.split(',').collect();
    assert!(["HOME", "LEDGER", "PATH"].iter().all(|name| names.contains(name)), "{names:?}");
    assert!(!names.contains(&"DEEPSEEK_API_KEY") && !names.contains(&"DSH_HOME"), "{names:?}");
    assert!(!std::fs::read_to_string(&turn.log).unwrap().contains(SECRET), "the log holds no secret");
}

#[test]
fn ctrl_c_during_a_call_ends_the_turn_with_the_call_s_outcome_unknown() {
    let tools = tool_home("- tool_calls: [{name: append, arguments: {line: before}}, {name: hang}]\n- ok: never\n", "");
    let child = tools.spawn_until_the_second_call_runs();
    dsh_e2e::process::signal(&child, libc::SIGINT);
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(130));
    let log = dsh_e2e::only_session_log(&tools.home).unwrap();
    tools.home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
    let events = log_events(&log);
    assert_eq!(result_codes(&events), ["-", "TOOL_OUTCOME_UNKNOWN"]);
    assert_eq!(
        events.last().unwrap()["data"]["reason"],
        serde_json::json!({"kind": "aborted", "reason": {"kind": "user"}})
    );
    assert_eq!(tools.mock.request_bodies().len(), 1, "no request after the cancel");
}

#[test]
fn a_terminal_ctrl_c_in_chat_cancels_the_turn_and_leaves_the_servers_running() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let script = "- tool_calls: [{name: append, arguments: {line: before}}, {name: hang}]\n- tool_calls: [{name: append, arguments: {line: after}}]\n- ok: back\n";
    let tools = tool_home(script, "");
    let mut chat = tools.home.dsh();
    chat.env("DEEPSEEK_API_KEY", SECRET).args(["chat", "--patch"]).arg(&tools.patch).process_group(0);
    let mut chat = chat
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = chat.stdin.take().unwrap();
    writeln!(input, "use the tools").unwrap();
    let hanging = wait_until(PATIENCE, || {
        let events = dsh_e2e::only_session_log(&tools.home).map(|log| log_events(&log)).unwrap_or_default();
        events.iter().filter(|event| event["type"] == "tool/result").count() == 1
            && events.iter().filter(|event| event["type"] == "tool/call").count() == 2
    });
    assert!(hanging, "the calls never became durable");
    // As a terminal does: the signal goes to the whole foreground process group.
    dsh_e2e::process::signal_group(&chat, libc::SIGINT);
    writeln!(input, "again").unwrap();
    drop(input);
    let output = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(String::from_utf8_lossy(&output.stdout).contains("back"), "{stderr}");
    assert!(!stderr.contains("starting it again"), "the server was hit by the Ctrl-C: {stderr}");
    assert_eq!(tools.ledger_lines(), ["before", "after"]);
}

#[test]
fn a_kill_9_during_a_call_is_repaired_as_outcome_unknown_and_resume_tells_the_model_without_running_it_again() {
    let tools =
        tool_home("- tool_calls: [{name: append, arguments: {line: before}}, {name: hang}]\n- ok: \"continued\"\n", "");
    tools.home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let mut child = tools.spawn_until_the_second_call_runs();
    dsh_e2e::process::kill_9(&mut child);
    let log = dsh_e2e::only_session_log(&tools.home).unwrap();
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    tools.home.run(&["session", "repair", &id]).expect_code(0);
    let events = log_events(&log);
    assert_eq!(
        result_codes(&events),
        ["-", "TOOL_OUTCOME_UNKNOWN"],
        "the finished call keeps its result, the one in flight is unknown"
    );

    let resumed = Run::of(
        tools.home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["session", "resume", &id, "--patch"]).arg(&tools.patch),
    );
    resumed.expect_code(0).expect_stdout("continued");
    assert_eq!(tools.ledger_lines(), ["before"], "nothing ran again");
    let last = tools.mock.request_bodies().len();
    let sent = tools.request(last);
    let told = sent["messages"].as_array().unwrap().iter().any(|message| {
        message["role"] == "tool"
            && message["content"].as_str().is_some_and(|text| text.contains("its outcome is unknown"))
    });
    assert!(told, "the model is told: {sent}");
    assert_eq!(session_id(&resumed), id);
}

/// The torture's script, served in a loop: tool steps between failures of every kind, and
/// answers slow enough for a kill to land inside a call, a stream or a wait.
const FAULTS: &str = "\
- tool_calls: [{name: append, arguments: {line: x}}, {name: echo, arguments: {text: y}}]
- status: 503
- reset: true
- tool_calls: [{name: append, arguments: {line: x}}]
  delayMs: 30
- malformed: true
- status: 429
- truncate: \"cut short\"
- ok: \"finished after the tools\"
  delayMs: 40
  chunkBytes: 8
";

/// Counts over every log of the home: `append` calls, their real results, and the results
/// whose outcome is unknown.
fn append_counts(home: &TestHome) -> (usize, usize, usize, usize) {
    let (mut calls, mut real, mut unknown, mut failed_attempts) = (0, 0, 0, 0);
    for dir in std::fs::read_dir(home.path().join("sessions")).unwrap() {
        let events = log_events(&dsh_e2e::log_in(&dir.unwrap().path()));
        let appends: Vec<&str> = events
            .iter()
            .filter(|event| event["type"] == "tool/call" && event["data"]["name"] == "append")
            .map(|event| event["data"]["callId"].as_str().unwrap())
            .collect();
        calls += appends.len();
        failed_attempts += events.iter().filter(|event| event["type"] == "assistant/attempt").count();
        for result in events.iter().filter(|event| event["type"] == "tool/result") {
            let call = result["data"]["message"]["source"]["callId"].as_str().or(result["data"]["callId"].as_str());
            if !call.is_some_and(|call| appends.contains(&call)) {
                continue;
            }
            match result["data"]["error"]["code"].as_str() {
                None => real += 1,
                Some("TOOL_OUTCOME_UNKNOWN") => unknown += 1,
                Some(other) => panic!("an append call failed with {other}"),
            }
        }
    }
    (calls, real, unknown, failed_attempts)
}

/// Exactly once, across injected model failures inside and between tool steps and `kill -9`
/// at random moments followed by repair and resume: every call with a real result ran exactly
/// once, every call ran at most once, and every log verifies. CI runs a bounded number of turns
/// and rounds; `DSH_TOOL_TURNS` and `DSH_TOOL_KILLS` (benches/tools.sh) run more.
#[test]
fn exactly_once_across_injected_failures_and_kill_9_rounds() {
    let count = |name: &str, default: u64| std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    let (turns, kills) = (count("DSH_TOOL_TURNS", 6), count("DSH_TOOL_KILLS", 8));
    let home = TestHome::new();
    let mock = MockProcess::start_with(&home, FAULTS, &["--loop"]);
    let ledger = home.path().join("ledger.txt");
    let patch = route_patch(&home, &mock, TINY, "");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + &server_row("side", &ledger, "")).unwrap();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let patch = patch.to_str().unwrap().to_owned();
    for turn in 0..turns {
        let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args([
            "run",
            "--patch",
            &patch,
            &format!("turn {turn}"),
        ]));
        assert!(matches!(run.code, Some(0 | 1)), "turn {turn}: {}", run.stderr);
    }
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for round in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let before = session_dirs(&home);
        let mut child = home
            .dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--patch", &patch, &format!("round {round}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(seed % 300));
        dsh_e2e::process::kill_9(&mut child);
        for dir in session_dirs(&home).difference(&before) {
            let log = dsh_e2e::log_in(dir);
            if !log.exists() {
                continue;
            }
            home.run(&["session", "repair", log.to_str().unwrap()]).expect_code(0);
            home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
            let id = dir.file_name().unwrap().to_str().unwrap().to_owned();
            let resumed =
                Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["session", "resume", &id, "--patch", &patch]));
            assert!(matches!(resumed.code, Some(0 | 1)), "round {round}: {}", resumed.stderr);
            home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
        }
    }
    let ran = std::fs::read_to_string(&ledger).unwrap_or_default().lines().count();
    let (calls, real, unknown, failed_attempts) = append_counts(&home);
    println!("tool torture: {turns} turns, {kills} kills, {failed_attempts} failed model requests, {calls} append calls: {real} real results, {unknown} unknown, {ran} runs");
    assert!(real <= ran && ran <= real + unknown, "{real} real results, {unknown} unknown, but {ran} runs");
    assert!(ran <= calls, "{ran} runs of {calls} calls");
}
