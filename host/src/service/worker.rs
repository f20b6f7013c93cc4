//! One served session: the worker task that owns its agent and runs what is asked of it in
//! order, and the view that tells the service what a turn does.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_abi::events::WorkingDirectoryChange;
use dsh_abi::SessionStartSource;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch};

use super::types::{Open, Running, ServiceError, Setup, Update};
use crate::agent::config::apply_overrides;
use crate::agent::session::{self, Opening, ResumeEvent, StartError};
use crate::agent::turn::{Agent, HeaderReason, UserInput};
use crate::agent::view::{RetryNotice, TurnView};
use crate::profile::patch::Composition;
use crate::profile::{LayerScope, Profile};
use dsh_session::format::Format;
use dsh_session::log::{AppendError, NewEvent};
use dsh_session::store::{LogRef, SessionStore};

/// What a worker reaches of its service: the set-up, the store, the feed, the operator's notes,
/// and the way to be forgotten once it ends.
#[derive(Clone)]
pub(super) struct Hub {
    pub setup: Arc<Setup>,
    pub store: SessionStore,
    pub updates: mpsc::UnboundedSender<Update>,
    pub notes: Arc<dyn Fn(&str) + Send + Sync>,
    pub forget: Arc<Forget>,
}

/// How a worker that ended is forgotten: its session id and its pending count, which tells it
/// from a newer worker of that session.
pub(super) type Forget = dyn Fn(&str, &watch::Sender<usize>) + Send + Sync;

impl Hub {
    fn publish(&self, update: Update) {
        let _ = self.updates.send(update);
    }

    fn note(&self, note: &str) {
        (self.notes)(note);
    }
}

type Reply<T> = oneshot::Sender<Result<T, ServiceError>>;

/// What a worker is asked to do.
pub(super) enum Command {
    /// Run a turn for this text; the reply is the message's id once it is durably received.
    Prompt { text: String, reply: Reply<String> },
    /// Run the continuations the session's rows ask for on a cold resume.
    Resume,
    /// Answer the working directory, after moving it to `path` when given.
    WorkingDirectory { path: Option<PathBuf>, reply: Reply<PathBuf> },
}

impl Command {
    fn fail(self, error: ServiceError) {
        match self {
            Command::Prompt { reply, .. } => drop(reply.send(Err(error))),
            Command::WorkingDirectory { reply, .. } => drop(reply.send(Err(error))),
            Command::Resume => {}
        }
    }
}

/// A worker as the service holds it.
pub(super) struct Served {
    commands: mpsc::UnboundedSender<Command>,
    /// How many commands were handed over and not yet done.
    pub(super) pending: watch::Sender<usize>,
    running: Running,
    handle: tokio::task::JoinHandle<()>,
}

impl Served {
    pub(super) fn send(&self, command: Command) {
        self.pending.send_modify(|count| *count += 1);
        if let Err(refused) = self.commands.send(command) {
            self.pending.send_modify(|count| *count -= 1);
            refused.0.fail(ServiceError::ShuttingDown);
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.commands.is_closed()
    }

    pub(super) fn cancel_running(&self) -> bool {
        self.running.cancel()
    }

    /// Lets the worker end after what it was asked, and waits for it.
    pub(super) async fn finished(self) {
        drop(self.commands);
        let _ = self.handle.await;
    }
}

/// The reply a prompt gets once its message is durably received.
type Receipt = Arc<Mutex<Option<Reply<String>>>>;

struct Worker {
    hub: Hub,
    id: Arc<str>,
    pending: watch::Sender<usize>,
    running: Running,
    receipt: Receipt,
}

/// A worker's open session: its agent, where it works, and how its first turn announces it.
struct Session {
    agent: Agent,
    cwd: PathBuf,
    announce: Option<SessionStartSource>,
}

/// Starts the worker of session `id`, which opens it (`opened` hears how that went) and then
/// runs its commands.
pub(super) fn start(hub: Hub, id: &str, open: Open, opened: Option<Reply<()>>) -> Served {
    let (commands, receiver) = mpsc::unbounded_channel();
    let pending = watch::Sender::new(0);
    let running = Running::default();
    let worker = Worker {
        hub,
        id: Arc::from(id),
        pending: pending.clone(),
        running: running.clone(),
        receipt: Receipt::default(),
    };
    let handle = tokio::spawn(worker.run(open, opened, receiver));
    Served { commands, pending, running, handle }
}

impl Worker {
    async fn run(self, open: Open, opened: Option<Reply<()>>, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut session = match self.open(open).await {
            Ok(session) => session,
            Err(error) => return self.refuse_all(error, opened, commands).await,
        };
        if let Some(opened) = opened {
            let _ = opened.send(Ok(()));
        }
        while let Some(command) = commands.recv().await {
            let served = self.serve(&mut session, command).await;
            self.pending.send_modify(|count| *count -= 1);
            if let Err(err) = served {
                session.agent.assembly.tools.close().await;
                drop(session);
                let error = ServiceError::Failed(format!("session {} can no longer be written: {err}", self.id));
                self.hub.note(&error.to_string());
                return self.refuse_all(error, None, commands).await;
            }
        }
        session.agent.assembly.tools.close().await;
    }

    /// Ends a worker that cannot serve its session: it is forgotten, and what was asked of it is
    /// answered with `error`.
    async fn refuse_all(
        &self,
        error: ServiceError,
        opened: Option<Reply<()>>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        (self.hub.forget)(&self.id, &self.pending);
        if let Some(opened) = opened {
            let _ = opened.send(Err(error.clone()));
        }
        commands.close();
        while let Some(command) = commands.recv().await {
            command.fail(error.clone());
            self.pending.send_modify(|count| *count -= 1);
        }
    }

    async fn serve(&self, session: &mut Session, command: Command) -> Result<(), AppendError> {
        match command {
            Command::Prompt { text, reply } => self.prompt(session, text, reply).await,
            Command::Resume => self.resume(session).await,
            Command::WorkingDirectory { path, reply } => {
                let _ = reply.send(self.working_directory(session, path));
                Ok(())
            }
        }
    }

    async fn prompt(&self, session: &mut Session, text: String, reply: Reply<String>) -> Result<(), AppendError> {
        let agent = &mut session.agent;
        let input = UserInput { id: agent.services.new_id(), text, source: json!({"kind": "user"}) };
        if let Err(err) = input.message_data() {
            let _ = reply.send(Err(ServiceError::Invalid(err.to_string())));
            return Ok(());
        }
        if let Some(source) = session.announce.take() {
            agent.announce(source);
        }
        *self.receipt.lock().expect("not poisoned") = Some(reply);
        agent.cancel = self.running.start();
        let end = agent.run_turn(input, HeaderReason::Initial).await;
        self.running.end();
        if let Some(reply) = self.receipt.lock().expect("not poisoned").take() {
            let why = end.as_ref().err().map_or_else(|| "the turn ended".to_owned(), ToString::to_string);
            let _ = reply.send(Err(ServiceError::Failed(format!("the message was not received: {why}"))));
        }
        self.hub.publish(Update::Status { session: self.id.clone(), running: false });
        end.map(drop)
    }

    async fn resume(&self, session: &mut Session) -> Result<(), AppendError> {
        let agent = &mut session.agent;
        agent.cancel = self.running.start();
        let (service, id) = (&self.hub, &self.id);
        let resumed = session::resume(agent, &mut |event| match event {
            ResumeEvent::AlreadyInLog { id: continuation } => {
                service.note(&format!("session {id}: continuation {continuation} is already in the log; not run again"))
            }
            ResumeEvent::Continuing { plugin, summary } => {
                service.note(&format!("session {id}: {plugin} continues the interrupted turn: {summary}"))
            }
            ResumeEvent::Ended(_) => {}
        })
        .await;
        self.running.end();
        if matches!(resumed, Ok(Some(_)) | Err(_)) {
            self.hub.publish(Update::Status { session: self.id.clone(), running: false });
        }
        resumed.map(drop)
    }

    /// The working directory, after moving it to `path` (relative to it) when given; a v4 log
    /// records the move as `working-directory/change`, as DeepSeek Harness 0.2 does.
    fn working_directory(&self, session: &mut Session, path: Option<PathBuf>) -> Result<PathBuf, ServiceError> {
        let Some(path) = path else { return Ok(session.cwd.clone()) };
        let target = session.cwd.join(&path);
        let missing = || {
            ServiceError::Invalid(format!(
                "working-directory: directory does not exist: {:?}",
                target.display().to_string()
            ))
        };
        let dir = std::fs::canonicalize(&target).map_err(|_| missing())?;
        if !dir.is_dir() {
            return Err(missing());
        }
        let agent = &mut session.agent;
        if agent.log.rules().format() == Format::V4 {
            let change = WorkingDirectoryChange { cwd: dir.display().to_string() };
            let now = agent.services.now_ms() as u64;
            let written = agent.log.append(NewEvent::typed(&change), now).and_then(|_| agent.log.commit());
            written.map_err(|err| ServiceError::Failed(format!("cannot record the working directory: {err}")))?;
        }
        session.cwd = dir.clone();
        Ok(dir)
    }
}

impl Worker {
    /// Opens the session's log — continued when one has this id, else created (a resume only
    /// opens) — with the service's profile, layers and route.
    async fn open(&self, open: Open) -> Result<Session, ServiceError> {
        let inner = &self.hub;
        let existing = inner.store.session_by_id(&self.id).ok().filter(|log| log.id() == *self.id);
        if existing.is_none() && open == Open::Resume {
            return Err(ServiceError::NotFound(self.id.to_string()));
        }
        if let Some(log) = &existing {
            refuse_other_formats(&self.id, log)?;
        } else if inner.store.format() != Format::V4 {
            return Err(format_refused(&self.id, inner.store.format(), "new sessions are written in"));
        }
        let (profile, composition) = self.compose()?;
        let (cwd, announce) = match &existing {
            Some(_) => (None, (open == Open::OrCreate).then_some(SessionStartSource::Continue)),
            None => (Some(inner.setup.cwd.as_path()), Some(SessionStartSource::New)),
        };
        let lock = existing.as_ref().map(|log| log.lock(inner.store.local_folder())).transpose();
        let lock = lock.map_err(|err| ServiceError::Failed(err.to_string()))?;
        let setup = &inner.setup;
        let opening = match (&existing, lock) {
            (Some(log), Some(lock)) => Opening::Existing { log, lock, keep_route: false },
            _ => Opening::New {
                store: &inner.store,
                patches: &setup.patches,
                overrides: &setup.overrides,
                id: Some(&self.id),
                cwd,
            },
        };
        let view =
            Box::new(ServiceView { hub: self.hub.clone(), session: self.id.clone(), receipt: self.receipt.clone() });
        let started = session::start(&setup.home, &profile, &composition, opening, view, setup.verbose).await;
        let started = started.map_err(|err| start_failed(&self.id, err))?;
        for note in started.repair.iter().flat_map(|repair| repair.notes()).chain(started.notes) {
            self.hub.note(&format!("session {}: {note}", self.id));
        }
        let mut agent = started.agent;
        let cwd = recorded_cwd(agent.log.header()).unwrap_or_else(|| setup.cwd.clone());
        let (hub, session) = (self.hub.clone(), self.id.clone());
        agent.log.set_echo(Box::new(move |line| {
            hub.publish(Update::Event { session: session.clone(), line: line.to_owned() })
        }));
        Ok(Session { agent, cwd, announce })
    }

    /// The profile composed with the service's layers, its agent row set to the route asked for.
    fn compose(&self) -> Result<(Profile, Composition), ServiceError> {
        let setup = &self.hub.setup;
        let failed = |err: anyhow::Error| ServiceError::Failed(format!("{err:#}"));
        let profile = Profile::open(&setup.home, &setup.profile).map_err(failed)?;
        let mut composition = profile.compose(&setup.home, &setup.patches, LayerScope::All).map_err(failed)?;
        for warning in &composition.warnings {
            self.hub.note(&warning.to_string());
        }
        apply_overrides(&mut composition, &setup.overrides, &setup.overrides);
        Ok((profile, composition))
    }
}

/// A session whose log is not v4 cannot be followed by the SDK: it waits for the message's
/// `agent/inbox/spliced`, which only v4 records.
fn refuse_other_formats(id: &str, log: &LogRef) -> Result<(), ServiceError> {
    let reader = log.reader().map_err(|err| ServiceError::Failed(err.to_string()))?;
    match reader.format() {
        Format::V4 => Ok(()),
        other => Err(format_refused(id, other, "its log is in")),
    }
}

fn format_refused(id: &str, format: Format, whose: &str) -> ServiceError {
    ServiceError::Invalid(format!(
        "session {id}: {whose} format {format}, whose turns a program cannot follow (it waits for the message's \
         agent/inbox/spliced, which only v4 records); `dsh session migrate {id}` upgrades a log to v4"
    ))
}

fn start_failed(id: &str, err: StartError) -> ServiceError {
    match err {
        StartError::Config(problems) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            ServiceError::Failed(format!("session {id}: the profile cannot run:\n{}", problems.join("\n")))
        }
        err => ServiceError::Failed(format!("{:#}", anyhow::Error::from(err))),
    }
}

/// The `cwd` a log's header names.
fn recorded_cwd(header: &str) -> Option<PathBuf> {
    let header: Value = serde_json::from_str(header).ok()?;
    header["cwd"].as_str().filter(|cwd| !cwd.is_empty()).map(PathBuf::from)
}

/// What a served turn shows: nothing of its own — its events reach the feed as they become
/// durable — but the message's receipt and the session's `running` status.
struct ServiceView {
    hub: Hub,
    session: Arc<str>,
    receipt: Receipt,
}

impl TurnView for ServiceView {
    fn input_received(&mut self, message_id: &str) {
        if let Some(reply) = self.receipt.lock().expect("not poisoned").take() {
            let _ = reply.send(Ok(message_id.to_owned()));
        }
        self.hub.publish(Update::Status { session: self.session.clone(), running: true });
    }

    fn text(&mut self, _: &str) {}
    fn retry_scheduled(&mut self, _: &RetryNotice) {}
    fn retry_tick(&mut self, _: &RetryNotice, _: std::time::Duration) {}
    fn retry_done(&mut self) {}
}
