//! `dsh --profile NAME` as the DeepSeek Harness SDK drives it: a child whose stdin takes
//! JSON-RPC requests and whose stdout lines are collected as they come, each read exactly once.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::PATIENCE;

pub struct SdkRuntime {
    pub child: Child,
    command: String,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line read so far, for the failure report.
    seen: Vec<String>,
    /// Notifications read while waiting for an answer, not yet taken.
    pending: std::collections::VecDeque<Value>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
}

impl SdkRuntime {
    pub fn spawn(mut command: Command) -> SdkRuntime {
        let shown = format!("{command:?}");
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dsh --profile");
        let (sender, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (from, into) = (child.stderr.take().expect("piped"), Arc::clone(&stderr));
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
                into.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let stdin = child.stdin.take();
        SdkRuntime {
            child,
            command: shown,
            stdin,
            lines,
            seen: Vec::new(),
            pending: Default::default(),
            stderr,
            next_id: 0,
        }
    }

    /// The command, what stdout and stderr carried so far, and the exit status if it ended.
    pub fn report(&mut self) -> String {
        let status = self.child.try_wait().ok().flatten().map_or("running".to_owned(), |status| status.to_string());
        format!(
            "command: {}\nexit: {status}\nstdout:\n{}\nstderr:\n{}",
            self.command,
            self.seen.join("\n"),
            self.stderr.lock().unwrap()
        )
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Writes one raw line to stdin.
    pub fn send_line(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).and_then(|()| stdin.write_all(b"\n")).and_then(|()| stdin.flush()).expect("write");
    }

    /// Sends a request; its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.send_line(request.to_string().as_bytes());
        self.next_id
    }

    /// The next stdout line as JSON, failing with the report when none comes.
    pub fn next_line(&mut self) -> Value {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(line) => {
                self.seen.push(line.clone());
                serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("stdout line {line:?} is not JSON\n{}", self.report()))
            }
            Err(RecvTimeoutError::Timeout) => panic!("no line came\n{}", self.report()),
            Err(RecvTimeoutError::Disconnected) => panic!("stdout closed\n{}", self.report()),
        }
    }

    /// The answer to request `id` (its `result` or `error` object), keeping the notifications
    /// read on the way.
    pub fn answer(&mut self, id: u64) -> Result<Value, Value> {
        loop {
            let line = self.next_line();
            if line.get("method").is_some() {
                self.pending.push_back(line);
            } else if line["id"] == id {
                return match line.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(line["result"].clone()),
                };
            } else {
                self.pending.push_back(line);
            }
        }
    }

    /// Sends a request and waits for its answer.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.send(method, params);
        self.answer(id)
    }

    /// [`SdkRuntime::call`] that must succeed.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let answer = self.call(method, params.clone());
        answer.unwrap_or_else(|error| panic!("{method} {params} was refused: {error}\n{}", self.report()))
    }

    /// `initialize` as the SDK sends it, routed to `provider`.
    pub fn initialize(&mut self, cwd: &Path, provider: &str) -> Value {
        self.ok("initialize", json!({"cwd": cwd, "provider": provider, "model": "mock-model"}))
    }

    /// The next notification (read earlier or now).
    pub fn notification(&mut self) -> Value {
        if let Some(pending) = self.pending.pop_front() {
            return pending;
        }
        self.next_line()
    }

    /// Prompts `session` with `text` and returns its message id and the notifications of the
    /// turn, as the SDK reads them: from the message's receipt up to the session's `idle`.
    pub fn run(&mut self, session: &str, text: &str) -> (String, Vec<Value>) {
        let blocks = json!([{"type": "text", "text": text}]);
        let answer = self.ok("session/prompt", json!({"sessionId": session, "contentBlocks": blocks}));
        let message_id = answer["messageId"].as_str().expect("a messageId").to_owned();
        let mut turn = Vec::new();
        loop {
            let notification = self.notification();
            if notification["params"]["sessionId"] != session {
                continue;
            }
            let receipt = notification["params"]["event"]["type"] == "agent/inbox/spliced"
                && notification["params"]["event"]["data"]["inserted"][0]["id"] == message_id.as_str();
            if turn.is_empty() && !receipt {
                continue;
            }
            let idle = notification["method"] == "session.status" && notification["params"]["status"] == "idle";
            turn.push(notification);
            if idle {
                return (message_id, turn);
            }
        }
    }

    /// Closes stdin (the SDK's end of input) and waits for the exit code.
    pub fn close_input(&mut self) -> i32 {
        drop(self.stdin.take());
        self.wait()
    }

    /// `shutdown` as the SDK's `close()` sends it, then end of input; the exit code.
    pub fn shutdown(&mut self) -> i32 {
        let answer = self.ok("shutdown", Value::Null);
        assert_eq!(answer, json!({}), "{}", self.report());
        self.close_input()
    }

    pub fn wait(&mut self) -> i32 {
        let status = self.child.wait().expect("wait for dsh");
        status.code().unwrap_or_else(|| panic!("dsh ended by a signal: {status}\n{}", self.report()))
    }

    /// The stdout lines not read yet, once the runtime has ended.
    pub fn rest(&mut self) -> Vec<String> {
        let rest: Vec<String> = self.lines.try_iter().collect();
        self.seen.extend(rest.iter().cloned());
        rest
    }
}

impl Drop for SdkRuntime {
    fn drop(&mut self) {
        crate::process::kill_9(&mut self.child);
    }
}

/// Each notification's short name: the event type of a `session.event`, `status:running`.
pub fn names(notifications: &[Value]) -> Vec<String> {
    notifications
        .iter()
        .map(|notification| match notification["method"].as_str() {
            Some("session.event") => notification["params"]["event"]["type"].as_str().unwrap_or("?").to_owned(),
            Some("session.status") => format!("status:{}", notification["params"]["status"].as_str().unwrap_or("?")),
            other => format!("{other:?}"),
        })
        .collect()
}
