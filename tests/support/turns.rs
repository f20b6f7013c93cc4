//! Running turns through the real binary against a `dsh mock-server`, for the end-to-end tests
//! of the runtime and the executors.

use std::ffi::OsStr;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::{log_events, MockProcess, Run, TestHome};

/// The API key the turns run with; it must never show up anywhere.
pub const SECRET: &str = "sk-dsh-e2e-SECRET-4f1a9c";

/// A patch that points the base route at `mock` with `policy` (a YAML flow mapping, or empty for
/// the default policy) and `extra` config lines.
pub fn route_patch(home: &TestHome, mock: &MockProcess, policy: &str, extra: &str) -> PathBuf {
    let policy = if policy.is_empty() { String::new() } else { format!("\n    retryPolicy: {policy}") };
    home.write(
        "route.yml",
        &format!(
            "- id: llm-deepseek\n  name: llm-openai\n  config:\n    provider: deepseek-official\n    baseUrl: {}\n    model: test-model\n    apiKeyEnv: DEEPSEEK_API_KEY{policy}{extra}\n",
            mock.base_url
        ),
    )
}

/// A normal policy with tiny waits (5, 10, 20, 20, 20 ms).
pub const TINY: &str = "{mode: normal, maxRetries: 5, backoff: {initialDelayMs: 5, maxDelayMs: 20, jitterRatio: 0}}";

/// A finished `dsh run`: what it printed, where its log is, and the log's events.
pub struct Turn {
    pub run: Run,
    pub log: PathBuf,
    pub events: Vec<Value>,
}

impl Turn {
    /// The events of one type, in order.
    pub fn of_type(&self, event_type: &str) -> Vec<&Value> {
        self.events.iter().filter(|event| event["type"] == event_type).collect()
    }

    /// The reason of the last `turn/end`.
    pub fn end(&self) -> &Value {
        &self.of_type("turn/end").last().expect("the turn ended")["data"]["reason"]
    }
}

/// Runs `dsh run --profile PROFILE --patch PATCH PROMPT` with the test key, then checks the log it
/// wrote with `dsh session verify`.
pub fn run_turn_in(home: &TestHome, profile: &str, patch: &Path, prompt: &str) -> Turn {
    let run = Run::of(
        home.dsh()
            .env("DEEPSEEK_API_KEY", SECRET)
            .args(["run", "--profile", profile, "--patch"])
            .arg(patch)
            .arg(prompt),
    );
    let id = session_id(&run);
    let log = home.session_log(&id);
    let verify = home.run(&["session", "verify", log.to_str().unwrap()]);
    assert_eq!(verify.code, Some(0), "the log fails verify:\n{}{}", verify.stdout, verify.stderr);
    let events = log_events(&log);
    Turn { run, log, events }
}

/// [`run_turn_in`] the `web` profile.
pub fn run_turn(home: &TestHome, patch: &Path, prompt: &str) -> Turn {
    run_turn_in(home, "web", patch, prompt)
}

/// The session id `dsh run` prints last.
pub fn session_id(run: &Run) -> String {
    run.stderr
        .lines()
        .last()
        .and_then(|line| line.strip_prefix("session "))
        .unwrap_or_else(|| panic!("no session id:\n{}", run.stderr))
        .to_owned()
}

/// Starts `dsh ARGS` with the test key in the background, its stdout and stderr discarded.
pub fn spawn_dsh<I: AsRef<OsStr>>(home: &TestHome, args: impl IntoIterator<Item = I>) -> Child {
    home.dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dsh")
}

/// Starts `dsh ARGS` with the test key; the event lines `--json` prints (once each is durable) are
/// collected as they come.
pub fn spawn_collecting(home: &TestHome, args: &[&str]) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut child = home
        .dsh()
        .env("DEEPSEEK_API_KEY", SECRET)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dsh");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().expect("piped");
    let collected = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // `run --json` opens with the session object, which is not an event.
            if line.starts_with("{\"type\"") {
                collected.lock().unwrap().push(line);
            }
        }
    });
    (child, lines)
}

/// The failure of a failed attempt (`assistant/attempt`) in either format: v0's `failure`, or
/// the failure of the `finish` that ends v4's embedded stream.
pub fn attempt_failure(attempt: &Value) -> &Value {
    let data = &attempt["data"];
    let Some(stream) = data["stream"].as_array() else { return &data["failure"] };
    let finish = stream.iter().rev().find(|record| record["chunk"]["type"] == "finish");
    finish.map_or(&Value::Null, |record| &record["chunk"]["reason"]["failure"])
}

/// The partial text a failed attempt kept, in either format (v0's `text`, v4's text chunks).
pub fn attempt_text(attempt: &Value) -> String {
    let data = &attempt["data"];
    let Some(stream) = data["stream"].as_array() else { return data["text"].as_str().unwrap_or_default().to_owned() };
    let texts = stream.iter().filter(|record| record["type"] == "text-chunks").flat_map(|record| {
        record["texts"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned)
    });
    texts.collect()
}

/// A `tool/result`'s result in either format, with its `content` and `isError`: v0's
/// `tool-result` block of a user message, or v4's `role: "tool"` message itself.
pub fn tool_result_block(event: &Value) -> &Value {
    let message = &event["data"]["message"];
    if message["role"] == "tool" {
        message
    } else {
        &message["content"][0]
    }
}

/// Whether a `user/message` event came from a plugin, in either format: v0's `{kind: "plugin",
/// plugin}`, v4's producer kind `plugin:<name>`.
pub fn from_plugin(event: &Value) -> bool {
    let kind = event["data"]["source"]["kind"].as_str().unwrap_or_default();
    event["type"] == "user/message" && (kind == "plugin" || kind.starts_with("plugin:"))
}
