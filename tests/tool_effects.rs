//! Tool effects past "unknown": every call's key, durable before dispatch and sent in `_meta`;
//! a call whose answer a `kill -9` of dsh lost — between the server's durable effect and dsh's
//! durable result, the moment the ledger server signals — resolved on resume by its tool's rule
//! (`tests/fixtures/mcp/ledger.mjs`: deduplicating, read-only, a task over HTTP; the reference
//! server's task tool; `side_effects.py` the non-cooperating one); and the exactly-once torture
//! over all of them at once (bounded here, full size in `benches/tools.sh`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use dsh_e2e::turns::{route_patch, SECRET, TINY};
use dsh_e2e::{
    log_events, log_in, of_type, only_session_log, session_dirs, wait_until, workspace_root, MockProcess, Run,
    TestHome, PATIENCE,
};
use serde_json::Value;

use crate::tools::{everything_server, mcp_modules, result_codes, server_row, HttpServer};

/// The FIFOs through which a test holds the ledger server between "effect done" and "answered".
struct Hold {
    dir: PathBuf,
}

impl Hold {
    fn new(home: &TestHome, name: &str) -> Hold {
        let dir = home.path().join(format!("hold-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        for fifo in ["signal", "release", "start"] {
            let path = std::ffi::CString::new(dir.join(fifo).to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo {fifo}");
        }
        Hold { dir }
    }

    /// The server's next call holds once its effect is durable.
    fn arm(&self) {
        std::fs::write(self.dir.join("armed"), "").unwrap();
    }

    /// The server's next call exits the server once its effect is durable, unanswered.
    fn arm_exit(&self) {
        std::fs::write(self.dir.join("armed"), "exit").unwrap();
    }

    /// Waits for the held call's signal, `held TOOL KEY`; `None` when none came in time.
    fn signal(&self) -> Option<String> {
        let signal = self.dir.join("signal");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(std::fs::read_to_string(signal).unwrap()));
        receiver.recv_timeout(PATIENCE).ok()
    }

    /// The held call's signal, which must come.
    fn signalled(&self) -> String {
        self.signal().unwrap_or_else(|| panic!("{} never signalled its held call", self.dir.display()))
    }

    /// Lets a waiting FIFO's reader (a server over HTTP, which outlives dsh) go on.
    fn open(&self, fifo: &str) {
        std::fs::write(self.dir.join(fifo), "go\n").unwrap();
    }
}

fn ledger_script() -> PathBuf {
    workspace_root().join("tests/fixtures/mcp/ledger.mjs")
}

/// The `mcp` row of the ledger server over stdio, its effects in `ledger`, held through `hold`.
fn ledger_row(id: &str, ledger: &Path, hold: &Hold, env: &str) -> String {
    format!(
        "- insert:\n    - id: {id}\n      name: mcp\n      config:\n        command: [node, {}]\n        env: {{LEDGER: {}, MCP_MODULES: {}, LEDGER_HOLD: {}{env}}}\n",
        ledger_script().display(),
        ledger.display(),
        mcp_modules().display(),
        hold.dir.display()
    )
}

/// The ledger server over streamable HTTP (it outlives dsh, and so do its tasks).
fn ledger_over_http(ledger: &Path, hold: &Hold) -> HttpServer {
    let mut command = std::process::Command::new("node");
    command.arg(ledger_script()).arg("--http").env("MCP_MODULES", mcp_modules()).env("LEDGER", ledger);
    HttpServer::start(command.env("LEDGER_HOLD", &hold.dir), false)
}

/// A home writing sessions in `format` (`v4`, dsh's default, or `v0`) with the mock route running
/// `script` (`extra`: mock flags) and `rows`.
fn home_with(format: &str, script: &str, extra: &[&str], rows: &str) -> (TestHome, MockProcess, PathBuf) {
    let home = if format == "v0" { TestHome::new() } else { TestHome::v4() };
    let mock = MockProcess::start_with(&home, script, extra);
    let patch = route_patch(&home, &mock, TINY, "");
    std::fs::write(&patch, std::fs::read_to_string(&patch).unwrap() + rows).unwrap();
    (home, mock, patch)
}

fn spawn_run(home: &TestHome, patch: &Path, prompt: &str) -> Child {
    home.dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(["run", "--patch"])
        .arg(patch)
        .arg(prompt)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(home.path().join("run.stderr")).unwrap())
        .spawn()
        .unwrap()
}

/// Continues session `id` with a new turn (`run --session`): opening it resolves the calls the
/// kill left open, then closes the interrupted turn. (`session resume` would have dsh-retry
/// continue the step instead, with a message of source `plugin`, which a v4 log refuses.)
fn resume(home: &TestHome, patch: &Path, id: &str) -> Run {
    Run::of(
        home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--session", id, "--patch"]).arg(patch).arg("go on"),
    )
}

/// The log of the session a run created: the one of `home` not among `before`.
fn new_log(home: &TestHome, before: &std::collections::HashSet<PathBuf>) -> PathBuf {
    let dirs = session_dirs(home);
    log_in(dirs.difference(before).next().expect("the run created its session"))
}

/// The text of a `tool/result`, in either format (a v4 result is a `role: "tool"` message).
fn result_text(event: &Value) -> String {
    let message = &event["data"]["message"];
    if message["role"] != "tool" {
        return crate::tools::result_text(event);
    }
    message["content"].as_array().unwrap().iter().filter_map(|block| block["text"].as_str()).collect()
}

fn ledger_entries(ledger: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

#[test]
fn config_tools_names_the_rule_that_resolves_each_tool_s_lost_answer_and_why() {
    let home = TestHome::new();
    let hold = Hold::new(&home, "a");
    let ledger = home.path().join("ledger.jsonl");
    let rows = ledger_row("dedup", &ledger, &hold, "")
        + &ledger_row("plain", &ledger, &hold, ", LEDGER_DEDUP: \"0\"")
        + "        resolve: {readOnly: false}\n"
        + &server_row("side", &home.path().join("side.txt"), "")
        + &format!(
            "- insert:\n    - id: everything\n      name: mcp\n      config: {{command: [node, {}, stdio], resolve: {{idempotent: true}}}}\n",
            everything_server().display()
        );
    let patch = home.write("tools.yml", &rows);
    let listed = home.run(&["config", "tools", "--json", "--patch", patch.to_str().unwrap()]);
    let listed: Vec<Value> = serde_json::from_str(&listed.expect_code(0).stdout).unwrap();
    let rule = |name: &str| {
        let tool = listed.iter().find(|tool| tool["name"] == name).unwrap_or_else(|| panic!("{name}: {listed:?}"));
        (tool["resolve"]["rule"].as_str().unwrap().to_owned(), tool["resolve"]["why"].as_str().unwrap().to_owned())
    };
    assert_eq!(rule("dedup__append").0, "dedup");
    assert_eq!(rule("dedup__count").0, "dedup", "a deduplicating server's rule comes first");
    assert_eq!(
        rule("plain__append"),
        (
            "unknown".into(),
            "server \"plain\" does not advertise dsh/idempotency, and it is annotated neither read-only nor idempotent"
                .into()
        )
    );
    assert_eq!(
        rule("plain__count"),
        (
            "unknown".into(),
            "server \"plain\" does not advertise dsh/idempotency, and its readOnlyHint is not used (resolve.readOnly)"
                .into()
        )
    );
    assert_eq!(rule("side__append").0, "unknown");
    assert_eq!(rule("everything__echo").0, "read-only");
    let gzip = rule("gzip-file-as-resource");
    assert_eq!(gzip.0, "idempotent", "its row trusts idempotentHint: {}", gzip.1);
    let shown = home.run(&["config", "tools", "--patch", patch.to_str().unwrap()]);
    shown.expect_code(0).expect_stdout(
        "  lost answer: dedup — server \"dedup\" advertises dsh/idempotency: the call is sent again with its key, and runs once",
    );
    shown.expect_stdout("  lost answer: read-only — the tool is annotated readOnlyHint: true, so it runs again");
}

#[test]
fn a_kill_9_between_the_effect_and_its_durable_result_is_resolved_by_the_key_and_the_effect_stays_one() {
    resolved_by_the_key("v4");
}

#[test]
fn in_a_v0_log_too_a_lost_answer_is_resolved_by_the_key_and_the_effect_stays_one() {
    resolved_by_the_key("v0");
}

fn resolved_by_the_key(format: &str) {
    let probe = TestHome::new();
    let hold = Hold::new(&probe, "dedup");
    let ledger = probe.path().join("ledger.jsonl");
    let script = "- tool_calls: [{name: append, arguments: {line: one}}]\n- ok: \"done after the crash\"\n";
    let (home, _mock, patch) = home_with(format, script, &[], &ledger_row("ledger", &ledger, &hold, ""));
    hold.arm();
    let mut child = spawn_run(&home, &patch, "append one line");
    let signal = hold.signalled();
    dsh_e2e::process::kill_9(&mut child);
    let log = only_session_log(&home).unwrap();
    let events = log_events(&log);
    let key = of_type(&events, "tool/call")[0]["data"]["idempotencyKey"].as_str().unwrap().to_owned();
    assert_eq!(signal.trim(), format!("held append {key}"), "the server got the recorded key in _meta");
    assert!(of_type(&events, "tool/result").is_empty(), "the kill landed before the result was durable");

    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    resume(&home, &patch, &id).expect_code(0).expect_stdout("done after the crash");
    let events = log_events(&log);
    let resolution = &of_type(&events, "tool/resolution")[0]["data"];
    assert_eq!(resolution["rule"], "dedup", "{resolution}");
    assert!(resolution["reason"].as_str().unwrap().starts_with(
        "dsh stopped before the call's answer was recorded; server \"ledger\" advertises dsh/idempotency"
    ));
    assert_eq!(result_codes(&events), ["-"]);
    assert_eq!(result_text(of_type(&events, "tool/result")[0]), "appended one");
    let entries = ledger_entries(&ledger);
    assert_eq!(entries.len(), 1, "one effect: {entries:?}");
    assert_eq!(entries[0]["key"], key.as_str());
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
    let shown = home.run(&["session", "show", &id]);
    shown.expect_code(0).expect_stdout("tool call (call_1_1) resolved by rule dedup · dsh stopped before");
}

#[test]
fn a_read_only_tool_whose_answer_a_kill_9_lost_runs_again_and_its_answer_is_recorded() {
    let probe = TestHome::new();
    let hold = Hold::new(&probe, "ro");
    let ledger = probe.path().join("ledger.jsonl");
    let script = "- tool_calls: [{name: count}]\n- ok: \"counted\"\n";
    let row = ledger_row("ledger", &ledger, &hold, ", LEDGER_DEDUP: \"0\"");
    let (home, _mock, patch) = home_with("v4", script, &[], &row);
    hold.arm();
    let mut child = spawn_run(&home, &patch, "count");
    hold.signalled();
    dsh_e2e::process::kill_9(&mut child);
    let log = only_session_log(&home).unwrap();
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    resume(&home, &patch, &id).expect_code(0).expect_stdout("counted");
    let events = log_events(&log);
    assert_eq!(of_type(&events, "tool/resolution")[0]["data"]["rule"], "read-only");
    assert_eq!(result_codes(&events), ["-"]);
    assert_eq!(result_text(of_type(&events, "tool/result")[0]), "0 lines");
}

#[test]
fn a_call_that_became_a_task_survives_a_kill_9_of_dsh_and_is_polled_not_called_again() {
    polled_after_a_kill("v4");
}

#[test]
fn in_a_v0_log_too_a_task_survives_a_kill_9_of_dsh() {
    polled_after_a_kill("v0");
}

fn polled_after_a_kill(format: &str) {
    let probe = TestHome::new();
    let hold = Hold::new(&probe, "task");
    let ledger = probe.path().join("ledger.jsonl");
    let server = ledger_over_http(&ledger, &hold);
    let script = "- tool_calls: [{name: slow_append, arguments: {line: long}}]\n- ok: \"the task finished\"\n";
    let row = format!("- insert:\n    - id: tasks\n      name: mcp\n      config: {{url: {}}}\n", server.url("/mcp"));
    let (home, _mock, patch) = home_with(format, script, &[], &row);
    hold.arm();
    let mut child = spawn_run(&home, &patch, "a long append");
    let recorded = wait_until(PATIENCE, || {
        let events = only_session_log(&home).map(|log| log_events(&log)).unwrap_or_default();
        !of_type(&events, "tool/task").is_empty()
    });
    assert!(recorded, "the task's id became durable");
    hold.open("start");
    hold.signalled();
    dsh_e2e::process::kill_9(&mut child);
    hold.open("release");
    let log = only_session_log(&home).unwrap();
    let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    let resumed = resume(&home, &patch, &id);
    resumed.expect_code(0).expect_stdout("the task finished");
    let events = log_events(&log);
    let task = of_type(&events, "tool/task")[0]["data"]["taskId"].as_str().unwrap().to_owned();
    let resolution = &of_type(&events, "tool/resolution")[0]["data"];
    assert_eq!(resolution["rule"], "task");
    assert!(resolution["reason"].as_str().unwrap().contains(&task), "{resolution}");
    assert_eq!(result_codes(&events), ["-"]);
    assert_eq!(result_text(of_type(&events, "tool/result")[0]), "appended long");
    assert_eq!(ledger_entries(&ledger).len(), 1);
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
}

#[test]
fn the_reference_server_s_task_tool_is_offered_called_as_a_task_with_its_progress_shown() {
    let script = "- tool_calls: [{name: simulate-research-query, arguments: {topic: tides}}]\n- ok: \"researched\"\n";
    let row = format!(
        "- insert:\n    - id: everything\n      name: mcp\n      config: {{command: [node, {}, stdio]}}\n",
        everything_server().display()
    );
    let (home, _mock, patch) = home_with("v4", script, &[], &row);
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("research"));
    run.expect_code(0).expect_stdout("researched");
    run.expect_stderr("tool simulate-research-query · task ")
        .expect_stderr("tool simulate-research-query · Gathering sources...");
    let log = only_session_log(&home).unwrap();
    let events = log_events(&log);
    assert_eq!(of_type(&events, "tool/task").len(), 1);
    assert_eq!(result_codes(&events), ["-"]);
    assert!(result_text(of_type(&events, "tool/result")[0]).contains("# Research Report: tides"));
    home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
}

#[test]
fn a_server_that_exits_after_its_effect_is_started_again_and_the_call_re_issued_with_its_key_runs_once() {
    let probe = TestHome::new();
    let hold = Hold::new(&probe, "exit");
    let ledger = probe.path().join("ledger.jsonl");
    let script = "- tool_calls: [{name: append, arguments: {line: once}}]\n- ok: \"carried on\"\n";
    let (home, _mock, patch) = home_with("v4", script, &[], &ledger_row("ledger", &ledger, &hold, ""));
    hold.arm_exit();
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("go"));
    run.expect_code(0).expect_stdout("carried on");
    let events = log_events(&only_session_log(&home).unwrap());
    let resolution = &of_type(&events, "tool/resolution")[0]["data"];
    assert_eq!(resolution["rule"], "dedup", "{resolution}");
    assert!(resolution["reason"].as_str().unwrap().contains("gave no answer"), "{resolution}");
    assert_eq!(result_codes(&events), ["-"]);
    assert_eq!(result_text(of_type(&events, "tool/result")[0]), "appended once");
    assert_eq!(ledger_entries(&ledger).len(), 1, "the server ran the call once");
}

#[test]
fn a_non_cooperating_server_s_lost_answer_stays_unknown_and_names_the_key() {
    let script = "- tool_calls: [{name: crash}]\n- ok: \"carried on\"\n";
    let probe = TestHome::new();
    let (home, _mock, patch) = home_with("v4", script, &[], &server_row("side", &probe.path().join("side.txt"), ""));
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("go"));
    run.expect_code(0).expect_stdout("carried on");
    let events = log_events(&only_session_log(&home).unwrap());
    let key = of_type(&events, "tool/call")[0]["data"]["idempotencyKey"].as_str().unwrap().to_owned();
    assert_eq!(of_type(&events, "tool/resolution")[0]["data"]["rule"], "unknown");
    assert_eq!(result_codes(&events), ["TOOL_OUTCOME_UNKNOWN"]);
    let text = result_text(of_type(&events, "tool/result")[0]);
    assert!(text.ends_with(&format!("dsh does not call it again (its idempotency key: {key})")), "{text}");
}

#[test]
fn a_row_that_turns_tasks_off_leaves_a_tool_that_requires_one_to_the_server_s_refusal() {
    let script = "- tool_calls: [{name: simulate-research-query, arguments: {topic: tides}}]\n- ok: \"refused\"\n";
    let row = format!(
        "- insert:\n    - id: everything\n      name: mcp\n      config: {{command: [node, {}, stdio], resolve: {{tasks: false}}}}\n",
        everything_server().display()
    );
    let (home, _mock, patch) = home_with("v4", script, &[], &row);
    let run = Run::of(home.dsh().env("DEEPSEEK_API_KEY", SECRET).args(["run", "--patch"]).arg(&patch).arg("research"));
    run.expect_code(0).expect_stdout("refused");
    let events = log_events(&only_session_log(&home).unwrap());
    assert!(of_type(&events, "tool/task").is_empty());
    assert_eq!(result_codes(&events), ["TOOL_ERROR"]);
    assert!(result_text(of_type(&events, "tool/result")[0]).contains("requires task augmentation"));
}

/// The torture's model: failures of several kinds around a step that calls every server's tool.
const EFFECT_FAULTS: &str = "\
- status: 503
- reset: true
- tool_calls: [{name: dedup__append, arguments: {line: d}}, {name: readonly__count}, {name: task__slow_append, arguments: {line: t}}, {name: side__append, arguments: {line: s}}]
- status: 429
- status: 502
- ok: \"round done\"
";

/// What the torture counted, per server.
#[derive(Debug, Default, Clone)]
struct Counted {
    calls: usize,
    real: usize,
    unknown: usize,
    duplicates: usize,
}

/// Per server of the torture (by the tool's row prefix): calls, real results, unknown outcomes,
/// and duplicate effects — a keyed ledger's lines beyond one per recorded key (or under a key no
/// call recorded); the non-cooperating ledger's lines beyond its calls' real and unknown results.
fn count_effects(home: &TestHome, ledgers: &HashMap<&str, PathBuf>) -> (HashMap<String, Counted>, usize) {
    let mut counted: HashMap<String, Counted> = HashMap::new();
    let mut keys: Vec<String> = Vec::new();
    let mut failed_attempts = 0;
    for dir in session_dirs(home) {
        let events = log_events(&log_in(&dir));
        failed_attempts += of_type(&events, "assistant/attempt").len();
        let mut server_of = HashMap::new();
        for call in of_type(&events, "tool/call") {
            let server = call["data"]["name"].as_str().unwrap().split("__").next().unwrap().to_owned();
            server_of.insert(call["data"]["callId"].as_str().unwrap().to_owned(), server.clone());
            keys.extend(call["data"]["idempotencyKey"].as_str().map(str::to_owned));
            counted.entry(server).or_default().calls += 1;
        }
        for result in of_type(&events, "tool/result") {
            let call = result["data"]["message"]["source"]["callId"].as_str().unwrap();
            let entry = counted.entry(server_of[call].clone()).or_default();
            match result["data"]["error"]["code"].as_str() {
                None => entry.real += 1,
                Some("TOOL_OUTCOME_UNKNOWN") => {
                    let text = result_text(result);
                    assert!(text.contains("(its idempotency key: dsh-"), "the model is told the key: {text}");
                    entry.unknown += 1;
                }
                Some(other) => panic!("a call failed with {other}: {result}"),
            }
        }
    }
    for (server, ledger) in ledgers {
        let entry = counted.entry(server.to_string()).or_default();
        if *server == "side" {
            let ran = std::fs::read_to_string(ledger).unwrap_or_default().lines().count();
            assert!(ran >= entry.real, "{server}: {ran} runs, {} real results", entry.real);
            entry.duplicates = ran.saturating_sub(entry.real + entry.unknown);
            continue;
        }
        let mut per_key: HashMap<String, usize> = HashMap::new();
        for effect in ledger_entries(ledger) {
            *per_key.entry(effect["key"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
        }
        entry.duplicates = per_key.iter().map(|(key, n)| if keys.contains(key) { n - 1 } else { *n }).sum();
    }
    (counted, failed_attempts)
}

/// Exactly once with cooperating servers: each round runs a step that calls a deduplicating
/// ledger, a read-only tool, a task over HTTP and the non-cooperating server, with model
/// failures before and after it; the round's armed server holds its call between its durable
/// effect and its answer, and dsh is killed (`kill -9`) right then — or, every fourth round,
/// once the step's calls are durable. Each kill is followed by resume (which resolves the open
/// calls) and verify. No duplicate effect anywhere; no unknown outcome but the non-cooperating
/// server's. `DSH_EFFECT_ROUNDS` (benches/tools.sh) runs more rounds.
#[test]
fn exactly_once_with_cooperating_servers_across_kill_9_in_the_effect_window() {
    let rounds: usize = std::env::var("DSH_EFFECT_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(5);
    let probe = TestHome::new();
    let holds: Vec<Hold> = ["dedup", "readonly", "task"].iter().map(|name| Hold::new(&probe, name)).collect();
    let ledgers: HashMap<&str, PathBuf> = ["dedup", "readonly", "task", "side"]
        .iter()
        .map(|name| (*name, probe.path().join(format!("{name}.ledger"))))
        .collect();
    let server = ledger_over_http(&ledgers["task"], &holds[2]);
    let rows = ledger_row("dedup", &ledgers["dedup"], &holds[0], "")
        + &ledger_row("readonly", &ledgers["readonly"], &holds[1], ", LEDGER_DEDUP: \"0\"")
        + &format!("- insert:\n    - id: task\n      name: mcp\n      config: {{url: {}}}\n", server.url("/mcp"))
        + &server_row("side", &ledgers["side"], "");
    let (home, _mock, patch) = home_with("v4", EFFECT_FAULTS, &["--loop"], &rows);
    let mut in_window = 0;
    for round in 0..rounds {
        let armed = (round % 4 < 3).then_some(round % 4);
        if let Some(server) = armed {
            holds[server].arm();
        }
        let before = session_dirs(&home);
        let mut child = spawn_run(&home, &patch, &format!("round {round}"));
        let log = || session_dirs(&home).difference(&before).next().map(|dir| log_in(dir));
        let calls_durable = |count: usize| {
            wait_until(PATIENCE, || {
                log().is_some_and(|log| log.exists() && of_type(&log_events(&log), "tool/call").len() >= count)
            })
        };
        match armed {
            Some(2) => {
                let task = wait_until(PATIENCE, || {
                    log().is_some_and(|log| log.exists() && !of_type(&log_events(&log), "tool/task").is_empty())
                });
                assert!(task, "round {round}: the task was recorded");
                holds[2].open("start");
                holds[2].signalled();
            }
            Some(server) => {
                if holds[server].signal().is_none() {
                    let said = std::fs::read_to_string(home.path().join("run.stderr")).unwrap_or_default();
                    let events = log().map(|log| std::fs::read_to_string(log).unwrap()).unwrap_or_default();
                    panic!("round {round}: server {server} never signalled; dsh said {said}\nlog: {events}");
                }
            }
            None => assert!(calls_durable(4), "round {round}: the calls became durable"),
        }
        dsh_e2e::process::kill_9(&mut child);
        in_window += usize::from(armed.is_some());
        if armed == Some(2) {
            holds[2].open("release");
        }
        let log = new_log(&home, &before);
        let id = log.parent().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
        let resumed = resume(&home, &patch, &id);
        assert!(matches!(resumed.code, Some(0 | 1)), "round {round}: {}", resumed.stderr);
        home.run(&["session", "verify", log.to_str().unwrap()]).expect_code(0);
    }
    let (counted, failed_attempts) = count_effects(&home, &ledgers);
    let servers: Vec<String> = ["dedup", "readonly", "task", "side"]
        .iter()
        .map(|server| {
            let Counted { calls, real, unknown, duplicates } =
                counted.get(*server).unwrap_or(&Counted::default()).clone();
            format!("{server}: calls {calls}, real {real}, unknown {unknown}, duplicate effects {duplicates}")
        })
        .collect();
    println!(
        "effects torture: {rounds} rounds, {rounds} kills ({in_window} between effect and durable result), {failed_attempts} failed model requests; {}",
        servers.join("; ")
    );
    for (server, counts) in &counted {
        assert_eq!(counts.duplicates, 0, "{server}: duplicate effects: {counted:?}");
        if server != "side" {
            assert_eq!(counts.unknown, 0, "{server}: unknown outcomes: {counted:?}");
            assert_eq!(counts.real, counts.calls, "{server}: every call resolved: {counted:?}");
        }
    }
}
