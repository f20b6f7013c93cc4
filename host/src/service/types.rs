//! What the service and its workers share: what sessions run with, what they report, how a
//! request fails, and a running turn's cancellation.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::agent::target::Resolved;
use crate::agent::view::TurnView;
use crate::agent::Cancel;
use crate::profile::Home;
use dsh_session::meta::RunOverrides;

/// What every session of a service runs with: the home, the profile and its extra layers, the
/// provider and model the front end asked for, the working directory new sessions start in, and
/// how the front end shows a turn.
pub struct Setup {
    pub home: Home,
    pub profile: String,
    pub patches: Vec<PathBuf>,
    pub overrides: RunOverrides,
    pub cwd: PathBuf,
    pub verbose: bool,
    /// A continued session runs with the profile, layers and route it recorded (the web server),
    /// not the service's (the SDK's runtime, whose launch line names them).
    pub continued_as_recorded: bool,
    /// Sessions must be v4 logs: the front end follows a turn by its `agent/inbox/spliced`.
    pub v4_only: bool,
    /// How long a session stays open after its last request (its MCP servers running, its
    /// writer lock held) before it is closed, so another process can continue it; `None`: until
    /// the service stops.
    pub keep_open: Option<std::time::Duration>,
    /// The view each session's turns are shown in (besides the service's feed).
    pub view: ViewFactory,
}

/// Makes the view of a session's turns.
pub type ViewFactory = Box<dyn Fn() -> Box<dyn TurnView> + Send + Sync>;

/// One thing a session did, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// An event of `session`'s log, as written (one JSON object), once it is durable.
    Event { session: Arc<str>, line: String },
    /// `session` started a turn (`running`) or has none left to run (`idle`).
    Status { session: Arc<str>, running: bool },
    /// Text the running attempt of `session` streamed (not durable: an attempt that fails
    /// takes it back).
    Text { session: Arc<str>, delta: String },
    /// The running attempt of `session` ended: its text is the answer (`completed`), or is not.
    AttemptEnded { session: Arc<str>, completed: bool },
    /// The tools `session` offers the model now, each name with its server's `mcp` row.
    Tools { session: Arc<str>, servers: Arc<Value> },
    /// A line for whoever watches `session`, as `dsh chat` prints it: what changed in its profile
    /// before a turn, or why the change was not taken (secrets already taken out).
    Note { session: Arc<str>, text: String },
    /// `session`'s log holds events its followers were not sent (written while it was opened,
    /// before they could reach the feed): they read it again.
    Reread { session: Arc<str> },
}

impl Update {
    /// The session the update is about.
    pub fn session(&self) -> &Arc<str> {
        match self {
            Update::Event { session, .. }
            | Update::Status { session, .. }
            | Update::Text { session, .. }
            | Update::AttemptEnded { session, .. }
            | Update::Tools { session, .. }
            | Update::Note { session, .. }
            | Update::Reread { session } => session,
        }
    }

    /// Whether the update is part of the log's story (an event or a status), which every front
    /// end hears; the others only followers of a session do.
    pub fn is_durable_story(&self) -> bool {
        matches!(self, Update::Event { .. } | Update::Status { .. })
    }
}

/// Why a request to the service failed; the messages are DeepSeek Harness 0.2's where it has one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ServiceError {
    #[error("session \"{0}\" not found")]
    NotFound(String),
    #[error("SDK session is already open or opening: {0}")]
    AlreadyOpen(String),
    #[error("unknown SDK session: {0}")]
    Unknown(String),
    #[error("SDK server is shutting down")]
    ShuttingDown,
    /// The request itself is wrong (an empty id, a missing directory, a block dsh cannot take).
    #[error("{0}")]
    Invalid(String),
    /// The session's profile cannot run: its problems, one per line.
    #[error("session {session}: the profile cannot run:\n{}", problems.join("\n"))]
    Config { session: String, problems: Vec<String> },
    /// The session could not be opened or written (its log, its lock, its store); the error
    /// tells which.
    #[error("{0:#}")]
    Failed(Arc<anyhow::Error>),
}

impl ServiceError {
    pub fn failed(error: impl Into<anyhow::Error>) -> ServiceError {
        ServiceError::Failed(Arc::new(error.into()))
    }

    pub fn failed_with(message: String) -> ServiceError {
        ServiceError::Failed(Arc::new(anyhow::Error::msg(message)))
    }
}

/// How a worker gets its session: a prompt creates it (or continues the log of that id), a
/// resume only opens a log that exists, and a front end that resolved what a session runs with
/// itself (`dsh chat`) opens exactly that.
pub enum Open {
    OrCreate,
    Resume,
    Resolved(Box<Resolved>),
}

/// The per-turn cancellation of a served session: the running turn's, while one runs, and a
/// stop asked for while prompts were handed over but none had started yet (the next to start
/// starts cancelled; the stop lapses when no prompt is left to start).
#[derive(Clone, Default)]
pub struct Running(Arc<Mutex<Turn>>);

#[derive(Default)]
struct Turn {
    cancel: Option<Cancel>,
    stop_asked: bool,
    prompts_queued: usize,
}

/// A prompt handed to a session's worker and not started yet, counted while it lives: it is
/// started ([`Running::start`]) or dropped with the command that carried it.
pub struct QueuedPrompt(Running);

impl Drop for QueuedPrompt {
    fn drop(&mut self) {
        let mut turn = self.0 .0.lock().expect("not poisoned");
        turn.prompts_queued -= 1;
        if turn.prompts_queued == 0 {
            turn.stop_asked = false;
        }
    }
}

impl Running {
    /// Counts a prompt handed over, until the returned guard goes.
    pub fn queue_prompt(&self) -> QueuedPrompt {
        self.0.lock().expect("not poisoned").prompts_queued += 1;
        QueuedPrompt(self.clone())
    }

    /// The cancellation of a turn that starts now — for `prompt`, cancelled already when a stop
    /// was asked while it waited.
    pub fn start(&self, prompt: Option<QueuedPrompt>) -> Cancel {
        let cancel = Cancel::default();
        let mut turn = self.0.lock().expect("not poisoned");
        if prompt.is_some() && std::mem::take(&mut turn.stop_asked) {
            cancel.cancel();
        }
        turn.cancel = Some(cancel.clone());
        drop(turn);
        drop(prompt);
        cancel
    }

    pub fn end(&self) {
        self.0.lock().expect("not poisoned").cancel = None;
    }

    /// Cancels the running turn; with none running but prompts waiting, the next to start.
    /// `false`: nothing was running or waiting.
    pub fn cancel(&self) -> bool {
        let mut turn = self.0.lock().expect("not poisoned");
        if let Some(cancel) = &turn.cancel {
            cancel.cancel();
            return true;
        }
        turn.stop_asked = turn.prompts_queued > 0;
        turn.stop_asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_asked_while_a_prompt_waits_cancels_that_prompt_s_turn_when_it_starts() {
        let running = Running::default();
        let queued = running.queue_prompt();
        assert!(running.cancel(), "a prompt waits: the stop is kept");
        assert!(running.start(Some(queued)).is_cancelled(), "the turn that starts next starts cancelled");
        running.end();
        let next = running.queue_prompt();
        assert!(!running.start(Some(next)).is_cancelled(), "the stop was used once");
    }

    #[test]
    fn a_stop_with_no_prompt_waiting_is_nothing_and_one_whose_prompt_was_dropped_lapses() {
        let running = Running::default();
        assert!(!running.cancel(), "nothing runs and nothing waits");
        let dropped = running.queue_prompt();
        assert!(running.cancel());
        drop(dropped);
        let later = running.queue_prompt();
        assert!(!running.start(Some(later)).is_cancelled(), "the stop lapsed with the prompt it was asked for");
        running.end();
        assert!(!running.start(None).is_cancelled(), "a resume is no prompt a stop waits for");
    }

    #[test]
    fn a_running_turn_is_cancelled_at_once() {
        let running = Running::default();
        let cancel = running.start(None);
        assert!(running.cancel());
        assert!(cancel.is_cancelled());
    }
}
