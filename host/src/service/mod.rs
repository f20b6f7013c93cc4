//! The session service: the sessions a long-running front end serves (the SDK's stdio protocol,
//! the web server), each run by one worker task that owns its agent — open or create, prompt,
//! cancel, resume, working directory — and one feed of what they do: every event as it becomes
//! durable, in log order, and each session's `running`/`idle` status.
//!
//! A turn started here is the turn `dsh run` runs ([`Agent::run_turn`]): the same waterfall,
//! tools, failover, budget and log. The service owns no terminal; what it has to tell the
//! operator (composition warnings, repairs) goes to the front end's `notes`.
//!
//! [`Agent::run_turn`]: crate::agent::turn::Agent::run_turn

mod hub;
mod live;
mod subscription;
mod swap;
mod types;
mod view;
mod worker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{mpsc, oneshot, watch};

use crate::agent::target::Resolved;
use crate::agent::turn::{Agent, TurnEnd};
use crate::context::{Services, SystemServices};
use dsh_session::store::SessionStore;
use hub::{Hub, Leaving};
pub use subscription::{Seen, Subscription};
use types::Open;
pub use types::{ServiceError, Setup, Update, ViewFactory};
use worker::{Command, Served};

/// The service: a handle the front end's tasks share.
#[derive(Clone)]
pub struct SessionService(Arc<Inner>);

struct Inner {
    hub: Hub,
    sessions: Mutex<HashMap<String, Served>>,
    /// Becomes `true` once a shutdown has seen every worker end.
    stopped: watch::Sender<bool>,
}

impl SessionService {
    /// A service over `setup`'s home; its updates go to the receiver returned beside it, what it
    /// tells the operator to `notes`.
    pub fn new(
        setup: Setup,
        notes: Box<dyn Fn(&str) + Send + Sync>,
    ) -> anyhow::Result<(SessionService, mpsc::UnboundedReceiver<Update>)> {
        let store = SessionStore::for_home(setup.home.root())?;
        let (updates, receiver) = mpsc::unbounded_channel();
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let me = me.clone();
            let leave = move |id: &str, worker: &watch::Sender<usize>, leaving: Leaving<'_>| {
                if let Some(inner) = me.upgrade() {
                    SessionService(inner).leave(id, worker, leaving);
                }
            };
            let (setup, notes) = (Arc::new(setup), Arc::from(notes));
            let live = Arc::default();
            let (leave, shutting_down) = (Arc::new(leave), Arc::default());
            let hub = Hub { setup, store, updates, live, notes, leave, shutting_down };
            Inner { hub, sessions: Mutex::default(), stopped: watch::Sender::new(false) }
        });
        Ok((SessionService(inner), receiver))
    }

    /// Runs `text` as a turn of session `id` — created when no log has that id, else continued
    /// — after the turns already asked for. Answers the message's id once it is durably received.
    pub async fn prompt(&self, id: &str, text: String) -> Result<String, ServiceError> {
        let (reply, answer) = oneshot::channel();
        self.send(id, Some(Open::OrCreate), None, Command::Prompt { text, reply, ended: None, queued: None })?;
        answer.await.unwrap_or(Err(ServiceError::ShuttingDown))
    }

    /// Opens the session `target` names — its log, else a new one — as the front end resolved
    /// it, and answers its id once it is open.
    pub async fn open(&self, target: Resolved) -> Result<String, ServiceError> {
        let id = target.existing.as_ref().map_or_else(|| SystemServices.new_id(), |log| log.id().to_owned());
        if self.serves(&id) {
            return Err(ServiceError::AlreadyOpen(id));
        }
        let (opened, answer) = oneshot::channel();
        let open = Some(Open::Resolved(Box::new(target)));
        let nothing = Command::Inspect(Box::new(|_| {}));
        self.send(&id, open, Some(opened), nothing)?;
        answer.await.unwrap_or(Err(ServiceError::ShuttingDown))?;
        Ok(id)
    }

    /// Runs `text` as a turn of the open session `id`, after the turns already asked for, and
    /// answers how it ended.
    pub async fn turn(&self, id: &str, text: String) -> Result<TurnEnd, ServiceError> {
        let (reply, _receipt) = oneshot::channel();
        let (ended, end) = oneshot::channel();
        self.send(id, None, None, Command::Prompt { text, reply, ended: Some(ended), queued: None })?;
        end.await.unwrap_or(Err(ServiceError::ShuttingDown))
    }

    /// What `inspect` makes of the open session `id`'s agent, between its turns.
    pub async fn inspect<T: Send + 'static>(
        &self,
        id: &str,
        inspect: impl FnOnce(&Agent) -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        let (reply, answer) = oneshot::channel();
        let inspection = Box::new(move |agent: &Agent| drop(reply.send(inspect(agent))));
        self.send(id, None, None, Command::Inspect(inspection))?;
        answer.await.map_err(|_| ServiceError::ShuttingDown)
    }

    /// Opens the persisted session `id` (repairing a turn a crash left open) and runs the
    /// continuations its rows ask for; answers once the log is open.
    pub async fn resume(&self, id: &str) -> Result<(), ServiceError> {
        if self.serves(id) {
            return Err(ServiceError::AlreadyOpen(id.to_owned()));
        }
        let (reply, answer) = oneshot::channel();
        self.send(id, Some(Open::Resume), Some(reply), Command::Resume)?;
        answer.await.unwrap_or(Err(ServiceError::ShuttingDown))
    }

    /// Follows session `id` from the event after `after` (from its first when `None`): what its
    /// log holds, then each event as it becomes durable, each once, and its status changes.
    pub async fn subscribe(&self, id: &str, after: Option<u64>) -> Result<Subscription, ServiceError> {
        check_id(id)?;
        let served = self.serves(id);
        if !served && self.0.hub.store.session_by_id(id).ok().is_none_or(|log| log.id() != id) {
            return Err(ServiceError::NotFound(id.to_owned()));
        }
        let (inner, session) = (Arc::downgrade(&self.0), id.to_owned());
        let served = Box::new(move || inner.upgrade().is_some_and(|inner| SessionService(inner).serves(&session)));
        Subscription::start(id, self.0.hub.store.clone(), (self.0.hub.live.clone(), served), after).await
    }

    /// How many requests session `id`'s worker has in hand (the running one included); `None`
    /// when no worker serves it.
    pub fn pending(&self, id: &str) -> Option<usize> {
        self.served(id, |served| *served.pending.borrow()).ok()
    }

    /// Waits until session `id` has no turn running or asked for.
    pub async fn wait(&self, id: &str) -> Result<(), ServiceError> {
        let mut pending = self.served(id, |served| served.pending.subscribe())?;
        let _ = pending.wait_for(|count| *count == 0).await;
        Ok(())
    }

    /// Cancels session `id`'s running turn, as Ctrl-C does (it ends `aborted`); the turns asked
    /// for after it still run. `false`: no turn was running.
    pub fn cancel(&self, id: &str) -> Result<bool, ServiceError> {
        self.served(id, |served| served.cancel_running())
    }

    /// The working directory of session `id` (created as a prompt would).
    pub async fn working_directory(&self, id: &str) -> Result<PathBuf, ServiceError> {
        let (reply, answer) = oneshot::channel();
        self.send(id, Some(Open::OrCreate), None, Command::WorkingDirectory { path: None, reply })?;
        answer.await.unwrap_or(Err(ServiceError::ShuttingDown))
    }

    /// Moves session `id` to `path` (absolute, or relative to its working directory), recorded in
    /// its log; MCP servers already running keep their own.
    pub async fn set_working_directory(&self, id: &str, path: &Path) -> Result<PathBuf, ServiceError> {
        let (reply, answer) = oneshot::channel();
        let path = Some(path.to_path_buf());
        self.send(id, Some(Open::OrCreate), None, Command::WorkingDirectory { path, reply })?;
        answer.await.unwrap_or(Err(ServiceError::ShuttingDown))
    }

    /// Refuses every new request and those still queued, cancels the running turns (each is
    /// closed in its log) and waits for every worker to end (a second call waits for the first).
    pub async fn shutdown(&self) {
        let served: Vec<Served> = {
            let mut sessions = self.0.sessions.lock().expect("not poisoned");
            if self.0.hub.shutting_down.swap(true, std::sync::atomic::Ordering::SeqCst) {
                drop(sessions);
                let _ = self.0.stopped.subscribe().wait_for(|stopped| *stopped).await;
                return;
            }
            sessions.drain().map(|(_, served)| served).collect()
        };
        for session in &served {
            session.cancel_running();
        }
        for session in served {
            session.finished().await;
        }
        self.0.stopped.send_replace(true);
    }

    /// Whether a worker of this service serves session `id` (and is not closing it).
    fn serves(&self, id: &str) -> bool {
        self.0.sessions.lock().expect("not poisoned").get(id).is_some_and(|served| !served.is_closed())
    }

    fn served<T>(&self, id: &str, with: impl FnOnce(&Served) -> T) -> Result<T, ServiceError> {
        let sessions = self.0.sessions.lock().expect("not poisoned");
        sessions.get(id).map(with).ok_or_else(|| ServiceError::Unknown(id.to_owned()))
    }

    /// Hands `command` to session `id`'s worker, starting one (with `open`) when none runs (none
    /// given: the session must be open).
    fn send(
        &self,
        id: &str,
        open: Option<Open>,
        opened: Option<oneshot::Sender<Result<(), ServiceError>>>,
        command: Command,
    ) -> Result<(), ServiceError> {
        check_id(id)?;
        let mut sessions = self.0.sessions.lock().expect("not poisoned");
        if self.0.hub.is_shutting_down() {
            return Err(ServiceError::ShuttingDown);
        }
        let served = match (sessions.get(id), open) {
            (Some(served), _) if !served.is_closed() => served,
            (_, None) => return Err(ServiceError::Unknown(id.to_owned())),
            (closing, Some(open)) => {
                let after = closing.map(Served::done);
                let started = worker::start(self.0.hub.clone(), id, (open, after), opened);
                sessions.insert(id.to_owned(), started);
                &sessions[id]
            }
        };
        served.send(command);
        Ok(())
    }

    /// Session `id`'s worker `worker` leaves: closing (its commands closed while no request can
    /// reach it), or gone (forgotten, when it is the one the service holds; a later request
    /// opens the log again).
    fn leave(&self, id: &str, worker: &watch::Sender<usize>, leaving: Leaving<'_>) {
        let mut sessions = self.0.sessions.lock().expect("not poisoned");
        match leaving {
            Leaving::Closing(close_commands) => close_commands(),
            Leaving::Gone if sessions.get(id).is_some_and(|served| served.pending.same_channel(worker)) => {
                sessions.remove(id);
                self.0.hub.live.forget(id);
            }
            Leaving::Gone => {}
        }
    }
}

/// A session id the service can hold: what [`dsh_session::locate::is_session_id`] allows.
fn check_id(id: &str) -> Result<(), ServiceError> {
    if id.is_empty() {
        return Err(ServiceError::Invalid("a session request requires a non-empty sessionId".into()));
    }
    if !dsh_session::locate::is_session_id(id) {
        let rule = dsh_session::locate::SESSION_ID_RULE;
        return Err(ServiceError::Invalid(format!("sessionId {id:?} is not a session id ({rule})")));
    }
    Ok(())
}
