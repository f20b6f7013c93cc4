//! What the user sees of a turn while it runs: streamed text, the end of each attempt, and a line
//! per scheduled retry that counts down. The command line implements it for the terminal;
//! simulations use [`Silent`].

use std::time::Duration;

use crate::llm::openai::ToolCall;
use crate::tools::ToolOutcome;

/// A scheduled retry, as the live display shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// The retry's place in its chain (`2/5`, [`dsh_session::timeline::retry_count`]).
    pub count: String,
    pub delay: Duration,
    pub code: String,
    pub message: String,
}

pub trait TurnView: Send {
    /// The turn's message (`message_id`) is received (durable in a v4 log); the turn starts.
    fn input_received(&mut self, _message_id: &str) {}
    /// A request goes out to `route` (`provider (model)`); nothing has come back yet.
    fn attempt_started(&mut self, _route: &str) {}
    fn text(&mut self, delta: &str);
    /// The attempt whose text was streamed ended: it completed (its text is the answer), or it
    /// failed (its text is not, and a retry may follow).
    fn attempt_ended(&mut self, _completed: bool) {}
    /// A retry is scheduled; the wait starts.
    fn retry_scheduled(&mut self, notice: &RetryNotice);
    /// Whether the view shows a live countdown (and so wants [`TurnView::retry_tick`]).
    fn counts_down(&self) -> bool {
        false
    }
    /// Called about every 100 ms of a wait with the time left, when the view counts down.
    fn retry_tick(&mut self, notice: &RetryNotice, remaining: Duration);
    /// The wait is over (elapsed or cancelled).
    fn retry_done(&mut self);
    /// The turn ended: `completed` when it has an answer (the text is whole).
    fn turn_ended(&mut self, _completed: bool) {}
    /// Whether the reader of the answers went away (a closed stdout).
    fn output_gone(&self) -> bool {
        false
    }
    /// Row `row` refused the retry another row decided, for `reason`; the turn ends.
    fn retry_refused(&mut self, _row: &str, _reason: &str) {}
    /// The step goes to route `to` right away after failing on `from` with `code` (a failover
    /// hop); the failed attempt's text is discarded as for a retry.
    fn route_switched(&mut self, _from: &str, _to: &str, _code: &str) {}
    /// A tool call of the step is about to run.
    fn tool_started(&mut self, _call: &ToolCall) {}
    /// A running tool call's progress changed (the MCP task it became, its status message).
    fn tool_progress(&mut self, _call: &ToolCall, _progress: &str) {}
    /// A tool call ended with `outcome`.
    fn tool_ended(&mut self, _call: &ToolCall, _outcome: &ToolOutcome) {}
    /// The MCP servers of rows `rows` are starting (the session's first step waits for them).
    fn servers_starting(&mut self, _rows: &[String]) {}
    /// The servers started, or failed to.
    fn servers_started(&mut self) {}
}

/// A view that shows nothing (simulations and benchmarks).
pub struct Silent;

impl TurnView for Silent {
    fn text(&mut self, _: &str) {}
    fn retry_scheduled(&mut self, _: &RetryNotice) {}
    fn retry_tick(&mut self, _: &RetryNotice, _: Duration) {}
    fn retry_done(&mut self) {}
}
