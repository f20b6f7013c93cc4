//! The command line for daily use: output that survives retries, sessions that remember their
//! profile, `dsh chat` with a live executor swap, and `dsh run -`.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use dsh_e2e::terminal::{dsh_line, Terminal};
use dsh_e2e::turns::{route_patch, session_id, SECRET, TINY};
use dsh_e2e::{log_events, MockProcess, Run, TestHome};
use serde_json::Value;

#[test]
fn piped_run_writes_exactly_the_answer_across_two_truncated_attempts() {
    let home = TestHome::new();
    home.run(&["plugin", "add", "dsh-retry"]).expect_code(0);
    let mock = MockProcess::start(
        &home,
        "- truncate: \"partial answ\"\n- truncate: \"partial answ\"\n- ok: complete answer\n",
    );
    let policy =
        "{mode: normal, retryableCodes: [STREAM_CLOSED], backoff: {initialDelayMs: 5, maxDelayMs: 5, jitterRatio: 0}}";
    let patch = route_patch(&home, &mock, policy, "");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    assert_eq!(run.stdout, "complete answer\n");
}

#[test]
fn a_failed_turn_writes_nothing_to_a_piped_stdout() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- truncate: \"half\"\n");
    let patch = route_patch(&home, &mock, "", "");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(1);
    assert_eq!(run.stdout, "");
}

#[test]
fn a_session_that_cannot_be_created_names_its_folder_and_the_cause_once() {
    let home = TestHome::new();
    home.write("sessions", "a file where the sessions folder belongs\n");
    let run = home.run(&["run", "--profile", "demo", "hi"]);
    run.expect_code(1);
    assert!(run.stderr.contains(" in $DSH_HOME/sessions: "), "{}", run.stderr);
    assert_eq!(run.stderr.matches("os error").count(), 1, "{}", run.stderr);
}

#[test]
fn a_continued_session_runs_the_profile_it_was_created_with() {
    let home = TestHome::new();
    let first = home.run(&["run", "--profile", "demo", "Say hello"]);
    first.expect_code(0);
    let id = session_id(&first);
    let again = home.run(&["run", "--session", &id, "And now in French"]);
    again.expect_code(0);
    let asked = home.run(&["run", "--session", &id, "--profile", "web", "once more"]);
    assert!(
        asked.stderr.contains("the session was created with profile demo; running it with profile web as asked"),
        "{}",
        asked.stderr
    );
}

#[test]
fn session_takes_ids_from_the_home_not_the_current_folder() {
    let home = TestHome::new();
    let decoy = home.path().join("elsewhere");
    std::fs::create_dir_all(decoy.join("abc")).unwrap();
    std::fs::write(
        decoy.join("abc/session.jsonl"),
        "{\"type\":\"session\",\"version\":0,\"id\":\"abc\",\"createdAt\":1,\"delegationDepth\":0}\n",
    )
    .unwrap();
    let run = Run::of(home.dsh().current_dir(&decoy).args(["run", "--session", "abc", "hi"]));
    run.expect_code(3);
    assert!(run.stderr.contains("no session abc under"), "{}", run.stderr);
}

#[test]
fn run_dash_reads_the_prompt_from_stdin() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: read it\n");
    let patch = route_patch(&home, &mock, "", "");
    let mut child = home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["run", "--patch"])
        .arg(&patch)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a prompt\nover two lines\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let body: Value = serde_json::from_str(&mock.request_bodies()[0]).unwrap();
    assert_eq!(body["messages"].as_array().unwrap().last().unwrap()["content"], "a prompt\nover two lines");
}

#[test]
fn a_scripted_chat_runs_three_turns_and_a_plugin_added_between_turns_handles_the_next() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n- ok: one\n- status: 503\n- ok: two\n- ok: three\n");
    let fast_relay = "\n- id: relay-retry\n  config: {schedule: [5], tailDelayMs: 5}\n";
    let patch = route_patch(&home, &mock, TINY, "");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + fast_relay).unwrap();
    let mut chat = spawn_chat(&home, &patch);
    let mut stdin = chat.stdin.take().unwrap();
    let mut answers = BufReader::new(chat.stdout.take().unwrap()).lines();
    let mut say = |line: &str| {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        answers.next().expect("an answer line").unwrap()
    };
    assert_eq!(say("first"), "one");
    let add = home.run(&["plugin", "add", "relay-retry"]);
    add.expect_code(0);
    assert_eq!(say("second"), "two");
    assert_eq!(say("third"), "three");
    drop(stdin);
    let output = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("profile web: relay-retry now handles request errors; llm-retry disabled"), "{stderr}");
    let id = stderr.lines().last().unwrap().strip_prefix("session ").unwrap();
    let events = log_events(&home.session_log(id));
    let keys: Vec<(u64, &str)> = events
        .iter()
        .filter(|event| event["type"] == "llm/retry")
        .map(|event| (event["data"]["turn"].as_u64().unwrap(), event["data"]["policyKey"].as_str().unwrap()))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys[0].0 == 1 && keys[0].1.starts_with("[\"normal\""), "{keys:?}");
    assert!(keys[1].0 == 2 && keys[1].1.starts_with("[\"relay\""), "{keys:?}");
    assert_eq!(events.iter().filter(|event| event["type"] == "turn/end").count(), 3);
}

#[test]
fn the_readme_llm_mock_layer_runs_a_trial_without_a_key_or_a_server() {
    let home = TestHome::new();
    home.write(
        "profiles/web/cordis.patch.yml",
        "- insert:\n    - id: llm-trial\n      name: llm-mock\n      config:\n        provider: trial\n        model: any\n        script: [{status: 503}, {status: 429, headers: {retry-after: \"1\"}}, {ok: \"through\"}]\n- {id: agent, config: {provider: trial}}\n",
    );
    home.write("profiles/web/profile.yml", "bundles: [dsh-base]\n");
    let run = home.run(&["run", "hi"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "through\n");
}

#[test]
fn a_terminal_shows_a_waiting_line_until_text_starts_and_keeps_one_line_for_the_retries() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n- ok: hello there\n  hold: answer\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let line = dsh_line(&["run", "--patch", patch.to_str().unwrap(), "hi"]);
    let terminal = Terminal::start(&home, &line, &[("DEEPSEEK_API_KEY", SECRET)]);
    mock.wait_for_requests(2);
    terminal.wait_for("waiting for deepseek-official (test-model) · ", 2);
    mock.release("answer");
    let (code, shown) = terminal.finish();
    assert_eq!(code, Some(0), "{shown}");
    let answer = shown.find("hello there").expect("the answer");
    let last_wait = shown.rfind("waiting for").unwrap();
    assert!(shown[last_wait..answer].contains("\u{1b}[2K"), "the waiting line stays:\n{shown}");
    assert!(shown[answer..].contains("recovered after 1 retry: SERVER"), "{shown}");
}

#[test]
fn a_pipe_gets_no_waiting_line_and_no_summary_line() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- status: 503\n- ok: hello there\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("hi"));
    run.expect_code(0);
    assert!(run.stderr.contains("Retrying model request (1/5)"), "{}", run.stderr);
    assert!(!run.stderr.contains("waiting for") && !run.stderr.contains("recovered after"), "{}", run.stderr);
}

#[test]
fn a_terminal_chat_marks_no_text_discarded_when_a_later_turn_retries_before_any_text() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: one\n- status: 503\n- ok: two\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let line = dsh_line(&["chat", "--patch", patch.to_str().unwrap()]);
    let mut terminal = Terminal::start(&home, &line, &[("DEEPSEEK_API_KEY", SECRET)]);
    terminal.wait_for("you> ", 1);
    terminal.type_line("first");
    terminal.wait_for("you> ", 2);
    terminal.type_line("second");
    terminal.wait_for("recovered after 1 retry: SERVER", 1);
    terminal.wait_for("you> ", 3);
    terminal.type_line("/exit");
    let (code, shown) = terminal.finish();
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("two"), "{shown}");
    assert!(!shown.contains("[discarded"), "{shown}");
}

#[test]
fn a_chat_whose_reader_went_away_runs_no_further_turn() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: a first answer long enough to count\n- ok: and a second one as long\n");
    let patch = route_patch(&home, &mock, TINY, "");
    let mut chat = spawn_chat(&home, &patch);
    drop(chat.stdout.take());
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"first\nsecond\n").unwrap();
    drop(stdin);
    let output = chat.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(mock.request_bodies().len(), 1, "the second line is never sent");
}

/// `dsh chat --patch PATCH` with the test key and every stream piped.
fn spawn_chat(home: &TestHome, patch: &std::path::Path) -> std::process::Child {
    home.dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["chat", "--patch"])
        .arg(patch)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_mistyped_command_gets_clap_s_tip_and_no_hint_to_run_it_as_a_task() {
    let home = TestHome::new();
    for words in [["sesion", "list"], ["confg", "check"]] {
        let run = home.run(&words);
        run.expect_code(2).expect_stderr("tip: a similar subcommand exists");
        assert!(!run.stderr.contains("dsh run"), "{run}");
    }
}

#[test]
fn deepseek_harness_invocations_are_told_their_dsh_command() {
    let home = TestHome::new();
    let terminal = Terminal::start(&home, &dsh_line(&["--profile", "web"]), &[]);
    terminal.wait_for("hint: dsh talks with the agent through a command: `dsh chat --profile web`", 1);
    let (code, screen) = terminal.finish();
    assert_eq!(code, Some(2), "{screen}");
    assert!(screen.contains("serves the DeepSeek Harness SDK's runtime protocol"), "{screen}");
    home.run(&["--profile", "web", "run", "hi"])
        .expect_code(2)
        .expect_stderr("give it after the command (`dsh run --profile web …`)");
    let served = Run::of(home.dsh().args(["--profile", "web"]).stdin(Stdio::null()));
    served.expect_code(0);
    assert_eq!(served.stdout, "", "a program's end of input ends the runtime with nothing to say: {served}");
    home.run(&["--profile", "headless", "job"])
        .expect_code(2)
        .expect_stderr("hint: dsh runs a task through a command: `dsh run --profile headless job`");
}

#[test]
fn a_manual_page_prints_by_the_name_dsh_1_gives_it() {
    let home = TestHome::new();
    let by_words = home.run(&["man", "session", "repair"]);
    by_words.expect_code(0).expect_stdout(".TH dsh-session-repair 1");
    for name in ["session-repair", "dsh-session-repair"] {
        assert_eq!(home.run(&["man", name]).expect_code(0).stdout, by_words.stdout, "{name}");
    }
}

#[test]
fn an_http_mcp_server_that_is_not_running_is_one_sentence_with_a_hint() {
    let home = TestHome::new();
    let layer = home.write(
        "tickets.yml",
        "- insert:\n    - id: tickets\n      name: mcp\n      config: {url: 'http://127.0.0.1:1/mcp', startTimeoutMs: 20000}\n",
    );
    let tools = home.run(&["config", "tools", "--patch", layer.to_str().unwrap()]);
    tools.expect_code(4).expect_stderr("row \"tickets\": the MCP server cannot be used: the MCP handshake failed: ");
    tools.expect_stderr("hint: is the MCP server at http://127.0.0.1:1/mcp running and reachable?");
    for internal in ["rmcp::", "reqwest", " { "] {
        assert!(!tools.stderr.contains(internal), "{internal}: {tools}");
    }
}

#[test]
fn plugin_add_of_a_package_whose_rows_need_more_says_what_and_how() {
    let home = TestHome::new();
    let add = home.run(&["plugin", "--profile", "fo", "add", "route-failover"]);
    add.expect_code(0).expect_stderr("dsh: warning: profile fo does not run yet, 1 problem to fix:");
    add.expect_stderr("no enabled provider row serves route \"backup\"");
    add.expect_stderr("hint: a provider row with `provider: backup` serves it");
    let json = home.run(&["plugin", "--profile", "fo", "add", "--json", "route-failover"]);
    let document: Value = serde_json::from_str(&json.expect_code(0).stdout).unwrap();
    assert_eq!(document["problems"].as_array().map(Vec::len), Some(1), "{json}");
    let quiet = home.run(&["plugin", "--profile", "r", "add", "relay-retry"]);
    assert!(!quiet.expect_code(0).stderr.contains("does not run yet"), "{quiet}");
}

#[test]
fn check_refuses_what_a_run_refuses_a_profile_without_an_agent_row() {
    let home = TestHome::new();
    let layer = home.write("no-agent.yml", "- {id: agent, disabled: true}\n");
    let check = home.run(&["config", "check", "--patch", layer.to_str().unwrap()]);
    check.expect_code(4).expect_stderr("no enabled agent row");
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&layer).arg("hi"));
    run.expect_code(4).expect_stderr("no enabled agent row");
}

#[test]
fn a_refused_connection_names_its_url_once_and_a_missing_key_points_to_the_demo() {
    let home = TestHome::new();
    let layer = home.write(
        "refused.yml",
        "- id: llm-deepseek\n  name: llm-openai\n  config: {provider: deepseek-official, baseUrl: 'http://127.0.0.1:1/v1', model: m, apiKeyEnv: DEEPSEEK_API_KEY, retryPolicy: {mode: normal, maxRetries: 0}}\n",
    );
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&layer).arg("hi"));
    run.expect_code(1).expect_stderr("request to http://127.0.0.1:1/v1/chat/completions failed");
    assert_eq!(run.stderr.matches("127.0.0.1:1").count(), 1, "{run}");

    let keyless = Run::of(home.dsh().env_remove("DEEPSEEK_API_KEY").args(["run", "hi"]));
    keyless.expect_code(1).expect_stderr("the API key variable DEEPSEEK_API_KEY is not set").expect_stderr(
        "\nhint: export the variable with your key, or try dsh without one: `dsh run --profile demo \"hello\"`",
    );
}

/// The model and the system message of each request the mock answered.
fn models_and_systems(mock: &MockProcess) -> Vec<(String, Option<String>)> {
    mock.request_bodies()
        .iter()
        .map(|body| {
            let body: Value = serde_json::from_str(body).unwrap();
            let system = body["messages"][0]["content"].as_str().filter(|_| body["messages"][0]["role"] == "system");
            (body["model"].as_str().unwrap().to_owned(), system.map(str::to_owned))
        })
        .collect()
}

#[test]
fn model_and_system_options_shape_the_requests_and_stay_with_the_session() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: fine\n");
    let patch = route_patch(&home, &mock, "", "");
    let run = |args: &[&str]| Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).arg("run").args(args));
    let first = run(&["--patch", patch.to_str().unwrap(), "--model", "m-9", "--system", "be brief", "hi"]);
    let id = session_id(first.expect_code(0));
    let again = run(&["--session", &id, "again"]);
    assert!(!again.expect_code(0).stderr.contains("as asked"), "{}", again.stderr);
    let third = run(&["--session", &id, "--system", "", "third"]);
    third.expect_code(0).expect_stderr(
        "dsh: the session was created with --model \"m-9\" --system \"be brief\"; running it with --model \"m-9\" \
         --system \"\" as asked",
    );
    let brief = Some("be brief".to_owned());
    assert_eq!(
        models_and_systems(&mock),
        [("m-9".to_owned(), brief.clone()), ("m-9".to_owned(), brief), ("m-9".to_owned(), None)]
    );
}

#[test]
fn a_provider_option_no_row_serves_is_refused_before_a_session_exists() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: fine\n");
    let patch = route_patch(&home, &mock, "", "");
    let run = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--provider", "nowhere", "--patch"])
            .arg(&patch)
            .arg("x"),
    );
    run.expect_code(4).expect_stderr(
        "the command line (--provider): row \"agent\": config.provider: no enabled provider row serves route \
         \"nowhere\"",
    );
    assert!(
        !home.path().join("sessions").exists() || home.path().join("sessions").read_dir().unwrap().next().is_none()
    );
    assert!(mock.request_bodies().is_empty());
}

#[test]
fn chat_takes_the_same_options_names_them_under_profile_and_shows_its_session_and_tools() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: fine\n");
    let patch = route_patch(&home, &mock, "", "");
    let mut command = home.dsh();
    command.env("DEEPSEEK_API_KEY", SECRET).args(["chat", "--model", "m-chat", "--patch"]).arg(&patch);
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"hi\n/profile\n/session\n/tools\n").unwrap();
    let chat = Run::from_output(&command, child.wait_with_output().unwrap());
    chat.expect_code(0).expect_stderr("  on the agent row: --model \"m-chat\"");
    chat.expect_stderr("  turns: 1 · the last completed\n  tokens: ")
        .expect_stderr("no tools: an `mcp` row adds a server");
    assert_eq!(models_and_systems(&mock)[0].0, "m-chat");
}

/// `(in, out)` of a `tokens: 12 in · 34 out` line.
fn tokens_of(line: &str) -> (u64, u64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let count = |unit: &str| words[words.iter().position(|word| *word == unit).unwrap() - 1].parse::<u64>().unwrap();
    (count("in"), count("out"))
}

#[test]
fn tokens_the_provider_reports_are_shown_per_turn_and_added_up_per_session() {
    let home = TestHome::new();
    let mock = MockProcess::start(&home, "- ok: a first answer long enough to count\n- ok: and a second one as long\n");
    let patch = route_patch(&home, &mock, "", "");
    let run = |args: &[&str]| Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).arg("run").args(args));
    let first = run(&["--patch", patch.to_str().unwrap(), "hi"]);
    let line = |run: &Run| run.stderr.lines().find(|line| line.starts_with("tokens: ")).unwrap().to_owned();
    let id = session_id(first.expect_code(0));
    let second = run(&["--session", &id, "again"]);
    let (one, two) = (tokens_of(&line(&first)), tokens_of(&line(second.expect_code(0))));
    assert!(one.0 > 0 && one.1 > 0 && two.0 > one.0, "{one:?} {two:?}: the second turn sends the first again");
    let show = home.run(&["session", "show", &id]);
    show.expect_code(0).expect_stdout(&format!("turn 1 completed · tokens {} in · {} out\n", one.0, one.1));
    let total = format!("tokens in all: {} in · {} out", one.0 + two.0, one.1 + two.1);
    show.expect_stdout(&total);
    let listed = home.run(&["session", "list", "--json"]);
    let listed: Value = serde_json::from_str(&listed.expect_code(0).stdout).unwrap();
    assert_eq!(listed[0]["tokens"]["outputTokens"], one.1 + two.1);
}
