//! `dsh` on a real terminal: a pseudo-terminal from util-linux's `script`, fed line by line, its
//! screen output read as it comes, so a test waits for what the terminal shows, never for time.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Condvar, Mutex};

use crate::{TestHome, PATIENCE};

/// A `dsh` command running on a pseudo-terminal (stdin, stdout and stderr all terminals).
pub struct Terminal {
    child: Child,
    keys: ChildStdin,
    /// The bytes shown so far (decoded whole, so a character split across reads stays whole).
    screen: Arc<(Mutex<Vec<u8>>, Condvar)>,
    reader: std::thread::JoinHandle<()>,
    command: String,
}

impl Terminal {
    /// Runs `line` (a shell command line; `$DSH` names the binary) on a terminal in `home`.
    pub fn start(home: &TestHome, line: &str, env: &[(&str, &str)]) -> Terminal {
        let mut command = home.shell("exec script -qefc \"$LINE\" /dev/null");
        command.env("LINE", line).envs(env.iter().copied()).stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = command.spawn().expect("start script(1)");
        let keys = child.stdin.take().expect("piped stdin");
        let mut output = child.stdout.take().expect("piped stdout");
        let screen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let shared = Arc::clone(&screen);
        let reader = std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read @ 1..) = output.read(&mut buffer) {
                shared.0.lock().unwrap().extend_from_slice(&buffer[..read]);
                shared.1.notify_all();
            }
        });
        Terminal { child, keys, screen, reader, command: line.to_owned() }
    }

    /// Waits until the terminal has shown `needle` `count` times; returns everything shown.
    pub fn wait_for(&self, needle: &str, count: usize) -> String {
        let (shown, changed) = &*self.screen;
        let seen = |bytes: &Vec<u8>| String::from_utf8_lossy(bytes).matches(needle).count() >= count;
        let (shown, timeout) =
            changed.wait_timeout_while(shown.lock().unwrap(), PATIENCE, |bytes| !seen(bytes)).unwrap();
        let shown = String::from_utf8_lossy(&shown).into_owned();
        assert!(!timeout.timed_out(), "`{}` never showed {needle:?} {count} times; it showed:\n{shown}", self.command);
        shown
    }

    /// Types `line` and Enter.
    pub fn type_line(&mut self, line: &str) {
        self.keys.write_all(format!("{line}\r").as_bytes()).expect("type into the terminal");
        self.keys.flush().expect("flush the keys");
    }

    /// Presses Ctrl-C: the terminal sends SIGINT to the command.
    pub fn interrupt(&mut self) {
        self.keys.write_all(b"\x03").expect("type into the terminal");
        self.keys.flush().expect("flush the keys");
    }

    /// Waits for the command to end: its exit code and everything the terminal showed.
    pub fn finish(mut self) -> (Option<i32>, String) {
        drop(self.keys);
        let status = self.child.wait().expect("wait for script(1)");
        self.reader.join().expect("the screen reader ends with the terminal");
        let shown = String::from_utf8_lossy(&self.screen.0.lock().unwrap()).into_owned();
        (status.code(), shown)
    }
}

/// `dsh` with `args` as a shell command line for [`Terminal::start`] (`$DSH` names the binary).
pub fn dsh_line(args: &[&str]) -> String {
    let quoted: Vec<String> = args.iter().map(|arg| format!("'{}'", arg.replace('\'', r"'\''"))).collect();
    format!("\"$DSH\" {}", quoted.join(" "))
}
