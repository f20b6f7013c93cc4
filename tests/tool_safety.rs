//! Tools under attack, through the real binary and the side-effect server
//! (`tests/fixtures/mcp/side_effects.py`): names that collide once made acceptable, a provider
//! that repeats a call id, every kind of content block, a cancelled step, servers that fork,
//! ignore the end of their input or outlive `kill -9`, escapes in what servers print, and the
//! handshake dsh opens.

use std::path::Path;

use dsh_e2e::terminal::{dsh_line, Terminal};
use dsh_e2e::turns::{run_turn, session_id, SECRET};
use dsh_e2e::{log_events, wait_until, workspace_root, Run, TestHome, PATIENCE};
use serde_json::Value;

use super::tools::{home_with_rows, result_codes, tool_home};

/// A row for the side-effect server named `id`, with `env` (a YAML flow mapping's inside) and
/// `extra` config lines.
fn server(id: &str, ledger: &Path, env: &str, extra: &str) -> String {
    let script = workspace_root().join("tests/fixtures/mcp/side_effects.py");
    format!(
        "- insert:\n    - id: {id}\n      name: mcp\n      config:\n        command: [python3, {}]\n        env: {{LEDGER: {}, MCP_NAME: {id}, {env}}}\n{extra}",
        script.display(),
        ledger.display()
    )
}

fn offered(home: &TestHome, patch: &Path) -> Vec<String> {
    let listed = home.run(&["config", "tools", "--json", "--patch", patch.to_str().unwrap()]);
    let listed: Vec<Value> = serde_json::from_str(&listed.expect_code(0).stdout).unwrap();
    listed.iter().map(|tool| tool["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn two_servers_whose_names_collide_once_made_acceptable_are_offered_apart_and_each_call_reaches_its_own() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let rows =
        server("a", &ledger, "MCP_EXTRA_TOOLS: wipe.all", "") + &server("b", &ledger, "MCP_EXTRA_TOOLS: wipe_all", "");
    let script = "- tool_calls: [{name: b__wipe_all}, {name: a__wipe_all}]\n- ok: wiped\n";
    let (home, _mock, patch) = home_with_rows(script, &rows);
    let names = offered(&home, &patch);
    assert!(names.contains(&"a__wipe_all".to_owned()) && names.contains(&"b__wipe_all".to_owned()), "{names:?}");
    assert!(!names.contains(&"wipe_all".to_owned()), "{names:?}");
    home.run(&["config", "check", "--patch", patch.to_str().unwrap()]).expect_code(0);
    run_turn(&home, &patch, "wipe").run.expect_code(0).expect_stdout("wiped");
    let mut ran: Vec<String> = std::fs::read_to_string(&ledger).unwrap().lines().map(str::to_owned).collect();
    ran.sort();
    assert_eq!(ran, ["a:wipe.all", "b:wipe_all"], "each call ran its own server's tool");
}

#[test]
fn two_tools_of_one_server_that_collide_are_refused_by_check_and_run_until_one_is_renamed() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let script = "- tool_calls: [{name: read_file}]\n- ok: read\n";
    let (home, mock, patch) =
        home_with_rows(script, &server("files", &ledger, "MCP_EXTRA_TOOLS: 'read.file,read_file'", ""));
    let check = home.run(&["config", "check", "--patch", patch.to_str().unwrap()]);
    check.expect_code(4).expect_stderr(
        "row \"files\": tool \"read.file\" of server \"files\" and tool \"read_file\" of server \"files\" would both be offered to the model as \"read_file\"",
    );
    check.expect_stderr("hint: give one of them another name in its row, e.g. rename: {\"read_file\": read_file_2}");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("read"));
    run.expect_code(4);
    assert!(mock.request_bodies().is_empty(), "nothing was sent");
    assert!(!ledger.exists(), "no tool ran");

    let renamed = server(
        "files",
        &ledger,
        "MCP_EXTRA_TOOLS: 'read.file,read_file'",
        "        rename: {read.file: read_dotted}\n",
    );
    let (home, _mock, patch) = home_with_rows(script, &renamed);
    let names = offered(&home, &patch);
    assert!(names.contains(&"read_dotted".to_owned()) && names.contains(&"read_file".to_owned()), "{names:?}");
    run_turn(&home, &patch, "read").run.expect_code(0).expect_stdout("read");
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "files:read_file\n", "the call reached the tool it named");
}

#[test]
fn a_provider_giving_two_calls_one_id_gets_both_run_and_both_recorded_under_ids_of_their_own() {
    let script = "- tool_calls: [{name: append, arguments: {line: one}, id: dup}, {name: append, arguments: {line: two}, id: dup}, {name: append, arguments: {line: three}, id: call-3}, {name: now, id: ''}]\n- ok: done\n";
    let tools = tool_home(script, "");
    let turn = tools.turn();
    turn.run.expect_code(0).expect_stdout("done");
    turn.run.expect_stderr(
        "the provider gave two tool calls of one step the id \"dup\"; the later one (append) is recorded as \"dup-2\"",
    );
    let mut ran = tools.ledger_lines();
    ran.sort();
    assert_eq!(ran, ["one", "three", "two"], "the calls of a step run at once, in any order");
    let ids: Vec<&str> =
        turn.of_type("tool/call").iter().map(|call| call["data"]["callId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["dup", "dup-2", "call-3", "call-3-2"], "dsh's own call-3 for the fourth call is renamed too");
    let answered: Vec<&str> = turn
        .of_type("tool/result")
        .iter()
        .map(|result| result["data"]["message"]["source"]["callId"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ids);
    let sent = tools.request(2);
    let replies: Vec<&str> =
        sent["messages"].as_array().unwrap().iter().filter_map(|m| m["tool_call_id"].as_str()).collect();
    assert_eq!(replies, ids, "the next request answers each call once");
}

#[test]
fn every_content_block_of_a_result_is_kept_and_an_error_result_has_a_code() {
    let tools = tool_home("- tool_calls: [{name: blocks}, {name: fails}]\n- ok: seen\n", "");
    let turn = tools.turn();
    turn.run.expect_code(0).expect_stdout("seen");
    assert_eq!(result_codes(&turn.events), ["-", "TOOL_ERROR"]);
    let failed = dsh_e2e::turns::tool_result_block(turn.of_type("tool/result")[1]);
    assert_eq!(failed["isError"], true);
    let sent = tools.request(2);
    let messages = sent["messages"].as_array().unwrap();
    let image_id = dsh_session::fsutil::sha256_hex(b"PNGDATA");
    let blob_id = dsh_session::fsutil::sha256_hex(&[0, 1, 2]);
    let expected = format!(
        "first\nsecond\n[resource file:///notes.txt]\nthe notes\n[resource link big.log file:///big.log: The big log]\n\
         [image image/png, 7 bytes, kept as attachment {image_id}]\n\
         [resource file:///x.bin application/octet-stream, 3 bytes, kept as attachment {blob_id}]"
    );
    assert_eq!(messages[3]["content"], expected.as_str());
    let content = &dsh_e2e::turns::tool_result_block(turn.of_type("tool/result")[0])["content"];
    let kinds: Vec<&str> = content.as_array().unwrap().iter().map(|block| block["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "text", "text", "text", "text", "text", "image", "file"]);
    assert_eq!(
        content[6]["attachment"],
        serde_json::json!({"attachmentId": image_id, "mimeType": "image/png", "bytes": 7})
    );
    let kept = turn.log.with_file_name(format!("attachment-{image_id}"));
    assert_eq!(std::fs::read(kept).unwrap(), b"PNGDATA", "the image's bytes are kept with the session");
}

#[test]
fn a_cancelled_tool_step_keeps_the_results_that_came_back_and_calls_never_sent_did_not_run() {
    let script = "- tool_calls: [{name: hang}, {name: append, arguments: {line: done}}]\n- ok: never\n";
    let tools = tool_home(script, "        callTimeoutMs: 600000\n");
    let mut child = tools
        .home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["-vv", "run", "--patch"])
        .arg(&tools.patch)
        .arg("go")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("(append) came back") {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0, "dsh ended first: {said}");
        said.push_str(&line);
    }
    assert_eq!(tools.ledger_lines(), ["done"]);
    dsh_e2e::process::signal(&child, libc::SIGINT);
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let run = Run::from_child(child);
    run.expect_code(130);
    let log = dsh_e2e::only_session_log(&tools.home).unwrap();
    let events = log_events(&log);
    assert_eq!(result_codes(&events), ["TOOL_OUTCOME_UNKNOWN", "-"], "the call that came back keeps its result");
    assert_eq!(events.last().unwrap()["data"]["reason"]["kind"], "aborted");
}

/// The pids a server noted in `pids` that are still alive.
fn alive(pids: &Path) -> Vec<i32> {
    let noted = std::fs::read_to_string(pids).unwrap_or_default();
    noted.lines().filter_map(|pid| pid.parse().ok()).filter(|pid| dsh_e2e::process::exists(*pid)).collect()
}

fn gone(pids: &Path) -> bool {
    wait_until(PATIENCE, || alive(pids).is_empty())
}

#[test]
fn no_server_process_outlives_dsh_when_it_ends_or_is_killed() {
    let ledger_home = TestHome::new();
    let (ledger, pids) = (ledger_home.path().join("ledger.txt"), ledger_home.path().join("pids"));
    let env = format!("MCP_PIDS: {}, MCP_KEEPER: '1', MCP_IGNORE_EOF: '1'", pids.display());
    let script = "- tool_calls: [{name: echo, arguments: {text: hi}}]\n- ok: done\n";
    let (home, _mock, patch) = home_with_rows(script, &server("stubborn", &ledger, &env, ""));
    run_turn(&home, &patch, "go").run.expect_code(0).expect_stdout("done");
    assert!(gone(&pids), "a server ignoring the end of its input, or its child, outlived dsh: {:?}", alive(&pids));

    std::fs::remove_file(&pids).unwrap();
    let hanging = "- tool_calls: [{name: hang}]\n- ok: never\n";
    let (home, _mock, patch) =
        home_with_rows(hanging, &server("stubborn", &ledger, &env, "        callTimeoutMs: 600000\n"));
    let mut child =
        home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("go").spawn().unwrap();
    let calling = wait_until(PATIENCE, || {
        dsh_e2e::only_session_log(&home)
            .is_some_and(|log| log_events(&log).iter().any(|event| event["type"] == "tool/call"))
    });
    assert!(calling && alive(&pids).len() == 2, "the server and its child run: {:?}", alive(&pids));
    dsh_e2e::process::kill_9(&mut child);
    assert!(gone(&pids), "the server's group outlived kill -9 of dsh: {:?}", alive(&pids));
}

#[test]
fn a_server_that_exits_leaving_a_child_holding_its_pipes_does_not_keep_dsh_waiting() {
    let ledger_home = TestHome::new();
    let (ledger, pids) = (ledger_home.path().join("ledger.txt"), ledger_home.path().join("pids"));
    let env = format!("MCP_PIDS: {}, MCP_KEEPER: '1'", pids.display());
    // The second call is asked for only once the first server and its child are gone: a call
    // sent before dsh saw the exit would rightly be TOOL_OUTCOME_UNKNOWN.
    let script =
        "- tool_calls: [{name: leave}]\n- tool_calls: [{name: echo, arguments: {text: again}}]\n  hold: gone\n- ok: done\n";
    let (home, mock, patch) = home_with_rows(script, &server("leaver", &ledger, &env, ""));
    let turn = std::thread::scope(|scope| {
        scope.spawn(|| {
            let first_gone = || {
                let noted = std::fs::read_to_string(&pids).unwrap_or_default();
                noted.lines().count() >= 2
                    && noted.lines().take(2).all(|pid| !alive(&pids).contains(&pid.parse().unwrap()))
            };
            assert!(wait_until(PATIENCE, first_gone), "the first server never ended");
            mock.release("gone");
        });
        run_turn(&home, &patch, "go")
    });
    turn.run.expect_code(0).expect_stdout("done");
    assert_eq!(result_codes(&turn.events), ["-", "-"], "the server was started again for the second call");
    assert!(gone(&pids), "a child left behind outlived dsh: {:?}", alive(&pids));
}

#[test]
fn initialize_asks_for_the_newest_handshake_version_and_names_dsh() {
    let ledger_home = TestHome::new();
    let (ledger, init) = (ledger_home.path().join("ledger.txt"), ledger_home.path().join("init.json"));
    let (home, _mock, patch) =
        home_with_rows("- ok: hi\n", &server("side", &ledger, &format!("MCP_INIT_LOG: {}", init.display()), ""));
    offered(&home, &patch);
    let params: Value = serde_json::from_str(&std::fs::read_to_string(&init).unwrap()).unwrap();
    assert_eq!(params["protocolVersion"], "2025-11-25");
    assert_eq!(params["clientInfo"]["name"], "dsh");
    assert_eq!(params["clientInfo"]["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn what_a_server_prints_reaches_the_terminal_with_its_escapes_made_visible() {
    let ledger_home = TestHome::new();
    let ledger = ledger_home.path().join("ledger.txt");
    let clipboard = "\u{1b}]52;c;ZWNobyBwd25lZA==\u{7}";
    let env =
        format!("MCP_DESCRIPTION: \"echo {clipboard}\\e[2J\", MCP_STDERR: \"boom {clipboard}\", MCP_FAIL_START: '1'");
    let (home, _mock, patch) = home_with_rows("- ok: hi\n", &server("loud", &ledger, &env, ""));
    let check = home.run(&["config", "check", "--patch", patch.to_str().unwrap()]);
    check.expect_code(4).expect_stderr("its stderr ends: boom \u{241b}]52;c;ZWNobyBwd25lZA==\u{2407}");
    assert!(!check.stderr.contains('\u{1b}') && !check.stdout.contains('\u{1b}'), "{check}");
    let env = format!("MCP_DESCRIPTION: \"echo {clipboard}\\e[2J\"");
    let (home, _mock, patch) = home_with_rows("- ok: hi\n", &server("loud", &ledger, &env, ""));
    let listed = home.run(&["config", "tools", "--patch", patch.to_str().unwrap()]);
    listed.expect_code(0).expect_stdout("echo \u{241b}]52;c;ZWNobyBwd25lZA==\u{2407}\u{241b}[2J");
    assert!(!listed.stdout.contains('\u{1b}'), "{listed}");
}

#[test]
fn sighup_and_sigquit_mid_turn_close_the_turn_as_sigterm_does() {
    for (signal, code) in [(libc::SIGHUP, 129), (libc::SIGQUIT, 131)] {
        a_signal_mid_tool_call_closes_the_turn(signal, code);
    }
}

fn a_signal_mid_tool_call_closes_the_turn(signal: i32, code: i32) {
    let tools = tool_home("- tool_calls: [{name: hang}]\n- ok: never\n", "        callTimeoutMs: 600000\n");
    let child = tools
        .home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["run", "--patch"])
        .arg(&tools.patch)
        .arg("go")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let calling = wait_until(PATIENCE, || {
        dsh_e2e::only_session_log(&tools.home)
            .is_some_and(|log| log_events(&log).iter().any(|event| event["type"] == "tool/call"))
    });
    assert!(calling);
    dsh_e2e::process::signal(&child, signal);
    let run = Run::from_child(child);
    run.expect_code(code);
    let id = session_id(&run);
    let events = log_events(&tools.home.session_log(id));
    assert_eq!(events.last().unwrap()["data"]["reason"]["kind"], "aborted", "the turn is closed, not left open");
}

#[test]
fn a_terminal_shows_a_live_line_while_a_tool_runs_and_a_pipe_gets_the_result_line_alone() {
    let tools = tool_home("- tool_calls: [{name: hang}]\n- ok: never\n", "        callTimeoutMs: 600000\n");
    let line = dsh_line(&["run", "--patch", tools.patch.to_str().unwrap(), "go"]);
    let mut terminal = Terminal::start(&tools.home, &line, &[("DEEPSEEK_API_KEY", SECRET)]);
    terminal.wait_for("calling hang · ", 1);
    terminal.interrupt();
    let (code, shown) = terminal.finish();
    assert_eq!(code, Some(130), "{shown}");
    // Sent or not yet when Ctrl-C came, the call ends with a result line once the live line goes.
    let result = shown.rfind("tool hang {} → TOOL_").expect("the call's result line");
    assert!(shown[..result].ends_with("\u{1b}[2K"), "the live line is cleared first:\n{shown}");

    let piped = tool_home("- tool_calls: [{name: now}]\n- ok: done\n", "");
    let run =
        Run::of(piped.home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&piped.patch).arg("go"));
    run.expect_code(0).expect_stderr("tool now {} → 4 bytes: tick");
    assert!(!run.stderr.contains("calling now"), "{run}");
}

#[test]
fn a_terminal_shows_a_live_line_while_mcp_servers_start() {
    let home = TestHome::new();
    let slow =
        "- insert:\n    - id: slow\n      name: mcp\n      config: {command: [sleep, '600'], startTimeoutMs: 600000}\n";
    let layer = home.write("slow.yml", slow);
    let line = dsh_line(&["config", "tools", "--patch", layer.to_str().unwrap()]);
    let mut terminal = Terminal::start(&home, &line, &[]);
    terminal.wait_for("starting MCP server slow · ", 1);
    terminal.interrupt();
    let (code, shown) = terminal.finish();
    assert_ne!(code, Some(0), "{shown}");
}
