//! What the service and its workers share: what sessions run with, what they report, how a
//! request fails, and a running turn's cancellation.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::watch;

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
}

impl Update {
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
/// stop asked for while a turn was handed over but not yet started (it starts cancelled).
#[derive(Clone, Default)]
pub struct Running(Arc<Mutex<Turn>>);

#[derive(Default)]
struct Turn {
    cancel: Option<Cancel>,
    stop_asked: bool,
}

impl Running {
    /// The cancellation of a turn that starts now (already cancelled when a stop was asked).
    pub fn start(&self) -> Cancel {
        let cancel = Cancel::default();
        let mut turn = self.0.lock().expect("not poisoned");
        if std::mem::take(&mut turn.stop_asked) {
            cancel.cancel();
        }
        turn.cancel = Some(cancel.clone());
        cancel
    }

    pub fn end(&self) {
        self.0.lock().expect("not poisoned").cancel = None;
    }

    /// Cancels the running turn; with none running but commands `pending`, the next turn to
    /// start. `false`: nothing was running or asked for.
    pub fn cancel(&self, pending: &watch::Sender<usize>) -> bool {
        let mut turn = self.0.lock().expect("not poisoned");
        if let Some(cancel) = &turn.cancel {
            cancel.cancel();
            return true;
        }
        turn.stop_asked = *pending.borrow() > 0;
        turn.stop_asked
    }

    /// Counts a command done; a stop asked for lapses once nothing is pending.
    pub fn command_done(&self, pending: &watch::Sender<usize>) {
        let mut turn = self.0.lock().expect("not poisoned");
        pending.send_modify(|count| *count -= 1);
        if *pending.borrow() == 0 {
            turn.stop_asked = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_asked_while_a_turn_is_handed_over_cancels_that_turn_when_it_starts() {
        let (running, pending) = (Running::default(), watch::Sender::new(1));
        assert!(running.cancel(&pending), "a command is pending: the stop is kept");
        assert!(running.start().is_cancelled(), "the turn that starts next starts cancelled");
        running.end();
        running.command_done(&pending);
        assert!(!running.start().is_cancelled(), "the stop was used once");
    }

    #[test]
    fn a_stop_asked_with_nothing_pending_or_left_over_is_nothing() {
        let (running, pending) = (Running::default(), watch::Sender::new(0));
        assert!(!running.cancel(&pending), "nothing runs and nothing is asked for");
        assert!(!running.start().is_cancelled());
        running.end();
        pending.send_replace(1);
        assert!(running.cancel(&pending));
        running.command_done(&pending);
        assert!(!running.start().is_cancelled(), "the stop lapsed with the command it was asked during");
    }

    #[test]
    fn a_running_turn_is_cancelled_at_once() {
        let (running, pending) = (Running::default(), watch::Sender::new(1));
        let cancel = running.start();
        assert!(running.cancel(&pending));
        assert!(cancel.is_cancelled());
    }
}
