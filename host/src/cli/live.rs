//! The live lines a terminal shows while dsh waits — for a model's first byte, for tool calls,
//! for MCP servers to start — each with its elapsed time, redrawn until it is cleared. When
//! stderr is not a terminal there are none: what ended is said in one line instead.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::shown::{neutralised, plural};

/// How often a live line redraws its elapsed time.
const TICK: Duration = Duration::from_millis(200);

/// `{what} · {elapsed}` on stderr, when stderr is a terminal.
pub(crate) fn elapsed_line(what: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let line = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    line.set_style(ProgressStyle::with_template("{msg} · {elapsed}").expect("a valid template"));
    line.set_message(neutralised(what).into_owned());
    line.enable_steady_tick(TICK);
    Some(line)
}

/// The line shown while the servers of `rows` start: `starting MCP server files · 8s`.
pub(crate) fn servers_starting(rows: &[String]) -> Option<ProgressBar> {
    match rows.is_empty() {
        true => None,
        false => elapsed_line(&format!("starting MCP server{} {}", plural(rows.len()), rows.join(", "))),
    }
}

/// The line shown while tools run: `calling read_file, append · 3s`.
pub(crate) fn calling(names: &[&str]) -> String {
    format!("calling {}", names.join(", "))
}

/// Clears `line`, if there is one.
pub(crate) fn clear(line: Option<ProgressBar>) {
    if let Some(line) = line {
        line.finish_and_clear();
    }
}
