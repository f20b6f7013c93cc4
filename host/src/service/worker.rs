//! One served session: the worker task that owns its agent and runs what is asked of it in
//! order, and the view that tells the service what a turn does.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_abi::events::WorkingDirectoryChange;
use dsh_abi::SessionStartSource;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::hub::{Hub, Leaving, Receipt, Reply};
use super::swap::{self, Snapshot};
use super::types::{Open, QueuedPrompt, Running, ServiceError, Update};
use super::view::ServiceView;
use crate::agent::session::{self, Opening, ResumeEvent, StartError};
use crate::agent::target::{resolve_for, Resolved};
use crate::agent::turn::{Agent, HeaderReason, TurnEnd, UserInput};
use dsh_session::format::Format;
use dsh_session::log::{AppendError, NewEvent};
use dsh_session::meta::RunOverrides;

/// Something to do with a session's agent between its turns (it runs on the worker).
pub(super) type Inspection = Box<dyn FnOnce(&Agent) + Send>;

/// What a worker is asked to do.
pub(super) enum Command {
    /// Run a turn for this text; `reply` hears the message's id once it is durably received,
    /// `ended` how the turn ended.
    Prompt {
        text: String,
        reply: Reply<String>,
        ended: Option<Reply<TurnEnd>>,
        /// Set when the command is handed to its worker.
        queued: Option<QueuedPrompt>,
    },
    /// Run the continuations the session's rows ask for on a cold resume.
    Resume,
    /// Answer the working directory, after moving it to `path` when given.
    WorkingDirectory {
        path: Option<PathBuf>,
        reply: Reply<PathBuf>,
    },
    Inspect(Inspection),
}

impl Command {
    fn fail(self, error: ServiceError) {
        match self {
            Command::Prompt { reply, ended, .. } => {
                if let Some(ended) = ended {
                    let _ = ended.send(Err(error.clone()));
                }
                let _ = reply.send(Err(error));
            }
            Command::WorkingDirectory { reply, .. } => drop(reply.send(Err(error))),
            Command::Resume | Command::Inspect(_) => {}
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
    /// Becomes `true` once the worker let go of its session (its lock released, its tools
    /// closed): the worker after it opens the session then.
    done: watch::Receiver<bool>,
}

impl Served {
    pub(super) fn send(&self, mut command: Command) {
        if let Command::Prompt { queued, .. } = &mut command {
            *queued = Some(self.running.queue_prompt());
        }
        self.pending.send_modify(|count| *count += 1);
        if let Err(refused) = self.commands.send(command) {
            self.pending.send_modify(|count| *count -= 1);
            refused.0.fail(ServiceError::ShuttingDown);
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.commands.is_closed()
    }

    pub(super) fn done(&self) -> watch::Receiver<bool> {
        self.done.clone()
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

struct Worker {
    hub: Hub,
    id: Arc<str>,
    pending: watch::Sender<usize>,
    running: Running,
    receipt: Receipt,
    done: watch::Sender<bool>,
}

/// A worker's open session: its agent, where it works, what it runs with and what that
/// composed to when its rows were last built.
struct Session {
    agent: Agent,
    cwd: PathBuf,
    target: Resolved,
    composed: Snapshot,
}

/// Starts the worker of session `id`, which opens it — once the worker `after` it is done with
/// the session, when one is closing it — (`opened` hears how that went) and then runs its
/// commands.
pub(super) fn start(
    hub: Hub,
    id: &str,
    (open, after): (Open, Option<watch::Receiver<bool>>),
    opened: Option<Reply<()>>,
) -> Served {
    let (commands, receiver) = mpsc::unbounded_channel();
    let (pending, running, (done, done_receiver)) = (watch::Sender::new(0), Running::default(), watch::channel(false));
    let worker = Worker {
        hub,
        id: Arc::from(id),
        pending: pending.clone(),
        running: running.clone(),
        receipt: Receipt::default(),
        done,
    };
    let handle = tokio::spawn(async move {
        if let Some(mut after) = after {
            let _ = after.wait_for(|done| *done).await;
        }
        worker.run(open, opened, receiver).await
    });
    Served { commands, pending, running, handle, done: done_receiver }
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
        while let Some(command) = self.next_command(&mut commands).await {
            let served = if self.hub.is_shutting_down() {
                command.fail(ServiceError::ShuttingDown);
                Ok(())
            } else {
                self.serve(&mut session, command).await
            };
            self.pending.send_modify(|count| *count -= 1);
            if let Err(err) = served {
                self.let_go(session).await;
                let error = ServiceError::failed_with(format!("session {} can no longer be written: {err}", self.id));
                self.hub.note(&error.to_string());
                return self.refuse_all(error, None, commands).await;
            }
        }
        self.let_go(session).await;
        self.gone();
    }

    /// Closes the session: its log first (its lock released, so the worker after this one can
    /// open it), then its MCP servers.
    async fn let_go(&self, mut session: Session) {
        let tools = std::mem::take(&mut session.agent.assembly.tools);
        drop(session);
        tools.close().await;
    }

    /// Forgets this worker and tells the one after it that the session is free.
    fn gone(&self) {
        (self.hub.leave)(&self.id, &self.pending, Leaving::Gone);
        self.done.send_replace(true);
    }

    /// The next command; with [`Setup::keep_open`] set, none once the session was idle that
    /// long: its commands are closed while no request can reach it (a later one starts the next
    /// worker), so only what was already queued is still served before the session is closed.
    ///
    /// [`Setup::keep_open`]: super::Setup::keep_open
    async fn next_command(&self, commands: &mut mpsc::UnboundedReceiver<Command>) -> Option<Command> {
        let Some(keep_open) = self.hub.setup.keep_open else { return commands.recv().await };
        match tokio::time::timeout(keep_open, commands.recv()).await {
            Ok(command) => command,
            Err(_) => {
                (self.hub.leave)(&self.id, &self.pending, Leaving::Closing(&mut || commands.close()));
                commands.recv().await
            }
        }
    }

    /// Ends a worker that cannot serve its session: it is forgotten, and what was asked of it is
    /// answered with `error`.
    async fn refuse_all(
        &self,
        error: ServiceError,
        opened: Option<Reply<()>>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        self.gone();
        if let Some(opened) = opened {
            let _ = opened.send(Err(error.clone()));
        }
        commands.close();
        while let Some(command) = commands.recv().await {
            command.fail(error.clone());
            self.pending.send_modify(|count| *count -= 1);
        }
    }

    async fn serve(&self, session: &mut Session, command: Command) -> Result<(), ServiceError> {
        match command {
            Command::Prompt { text, reply, ended, queued } => self.prompt(session, text, (reply, ended), queued).await,
            Command::Resume => self.resume(session).await.map_err(ServiceError::failed),
            Command::WorkingDirectory { path, reply } => {
                let _ = reply.send(self.working_directory(session, path));
                Ok(())
            }
            Command::Inspect(inspect) => {
                inspect(&session.agent);
                Ok(())
            }
        }
    }

    async fn prompt(
        &self,
        session: &mut Session,
        text: String,
        (reply, ended): (Reply<String>, Option<Reply<TurnEnd>>),
        queued: Option<QueuedPrompt>,
    ) -> Result<(), ServiceError> {
        let cancel = self.running.start(queued);
        self.swap_if_changed(session).await;
        let agent = &mut session.agent;
        let input = UserInput { id: agent.services.new_id(), text, source: json!({"kind": "user"}) };
        if let Err(err) = input.message_data() {
            self.running.end();
            Command::Prompt { text: String::new(), reply, ended, queued: None }
                .fail(ServiceError::Invalid(err.to_string()));
            return Ok(());
        }
        *self.receipt.lock().expect("not poisoned") = Some(reply);
        agent.cancel = cancel;
        let end = agent.run_turn(input, HeaderReason::Initial).await;
        self.running.end();
        if let Some(reply) = self.receipt.lock().expect("not poisoned").take() {
            let why = end.as_ref().err().map_or_else(|| "the turn ended".to_owned(), ToString::to_string);
            let _ = reply.send(Err(ServiceError::failed_with(format!("the message was not received: {why}"))));
        }
        self.hub.publish(Update::Status { session: self.id.clone(), running: false });
        let (end, failed) = match end {
            Ok(end) => (Ok(end), Ok(())),
            Err(err) => {
                let failed = ServiceError::failed(err);
                (Err(failed.clone()), Err(failed))
            }
        };
        if let Some(ended) = ended {
            let _ = ended.send(end);
        }
        failed
    }

    async fn swap_if_changed(&self, session: &mut Session) {
        let setup = &self.hub.setup;
        let note = |note: &str| {
            self.hub.note(note);
            let text = dsh_session::redact::text(note).into_owned();
            self.hub.publish(Update::Note { session: self.id.clone(), text });
        };
        let (home, target) = ((&setup.home, setup.verbose), &session.target);
        if swap::swap_if_changed(home, &note, target, &mut session.agent, &mut session.composed).await {
            self.publish_tools(&session.agent);
        }
    }

    /// Tells followers which server offers each tool the session offers now.
    fn publish_tools(&self, agent: &Agent) {
        let servers: serde_json::Map<String, Value> =
            agent.assembly.tools.offered().iter().map(|tool| (tool.name.clone(), tool.row_id.clone().into())).collect();
        self.hub.publish(Update::Tools { session: self.id.clone(), servers: Arc::new(Value::Object(servers)) });
    }

    async fn resume(&self, session: &mut Session) -> Result<(), AppendError> {
        let agent = &mut session.agent;
        agent.cancel = self.running.start(None);
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
            written.map_err(|err| ServiceError::failed_with(format!("cannot record the working directory: {err}")))?;
        }
        session.cwd = dir.clone();
        Ok(dir)
    }
}

impl Worker {
    /// Opens the session's log — what `open` resolved, else the log of this id continued, else a
    /// new one (a resume only opens) — announces it (but for a resume) and echoes its events to
    /// the feed.
    async fn open(&self, open: Open) -> Result<Session, ServiceError> {
        let resume = matches!(open, Open::Resume);
        let target = self.target(open)?;
        if self.hub.setup.v4_only {
            require_v4(&self.id, &target)?;
        }
        let setup = &self.hub.setup;
        let (profile, composition) = target.compose(&setup.home).map_err(ServiceError::failed)?;
        for warning in &composition.warnings {
            self.hub.note(&warning.to_string());
        }
        let store = &target.store;
        let lock = target.existing.as_ref().map(|log| log.lock(store.local_folder())).transpose();
        let lock = lock.map_err(ServiceError::failed)?;
        let opening = match (&target.existing, lock) {
            (Some(log), Some(lock)) => Opening::Existing { log, lock, keep_route: target.as_recorded },
            _ => Opening::New {
                store,
                patches: &target.patches,
                overrides: &target.overrides,
                id: Some(&self.id),
                cwd: Some(setup.cwd.as_path()),
            },
        };
        let view = ServiceView::new(self.hub.clone(), self.id.clone(), self.receipt.clone());
        let started = session::start(&setup.home, &profile, &composition, opening, Box::new(view), setup.verbose);
        let started = started.await.map_err(|err| start_failed(&self.id, err))?;
        for note in started.repair.iter().flat_map(|repair| repair.notes()).chain(started.notes) {
            self.hub.note(&format!("session {}: {note}", self.id));
        }
        let mut agent = started.agent;
        let cwd = recorded_cwd(agent.log.header()).unwrap_or_else(|| setup.cwd.clone());
        let (hub, session) = (self.hub.clone(), self.id.clone());
        agent.log.set_echo(Box::new(move |line| {
            hub.publish(Update::Event { session: session.clone(), line: line.to_owned() })
        }));
        if !resume {
            agent.announce(if target.existing.is_some() {
                SessionStartSource::Continue
            } else {
                SessionStartSource::New
            });
        }
        let composed = Snapshot::of(&profile, &composition);
        self.publish_tools(&agent);
        self.hub.publish(Update::Reread { session: self.id.clone() });
        Ok(Session { agent, cwd, target, composed })
    }

    /// What the session runs with: what the front end resolved, else the service's profile,
    /// layers and route over the log of this id (when there is one).
    fn target(&self, open: Open) -> Result<Resolved, ServiceError> {
        let hub = &self.hub;
        let existing = match open {
            Open::Resolved(target) => return Ok(*target),
            open => {
                let existing = hub.store.session_by_id(&self.id).ok().filter(|log| log.id() == *self.id);
                if existing.is_none() && matches!(open, Open::Resume) {
                    return Err(ServiceError::NotFound(self.id.to_string()));
                }
                existing
            }
        };
        let setup = &hub.setup;
        let target = if existing.is_some() && setup.continued_as_recorded {
            resolve_for(hub.store.clone(), existing, None, &[], &RunOverrides::default())
        } else {
            resolve_for(hub.store.clone(), existing, Some(&setup.profile), &setup.patches, &setup.overrides)
        };
        let target = target.map_err(ServiceError::failed)?;
        for note in &target.notes {
            hub.note(&format!("session {}: {note}", self.id));
        }
        Ok(target)
    }
}

/// A session whose log is not v4 cannot be followed by the SDK: it waits for the message's
/// `agent/inbox/spliced`, which only v4 records.
fn require_v4(id: &str, target: &Resolved) -> Result<(), ServiceError> {
    let Some(log) = &target.existing else {
        return match target.store.format() {
            Format::V4 => Ok(()),
            other => Err(format_refused(id, other, "new sessions are written in")),
        };
    };
    let reader = log.reader().map_err(ServiceError::failed)?;
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
        StartError::Config(problems) => ServiceError::Config {
            session: id.to_owned(),
            problems: problems.iter().map(ToString::to_string).collect(),
        },
        StartError::Open(err) => ServiceError::failed(err),
        err => ServiceError::failed(err),
    }
}

/// The `cwd` a log's header names.
fn recorded_cwd(header: &str) -> Option<PathBuf> {
    let header: Value = serde_json::from_str(header).ok()?;
    header["cwd"].as_str().filter(|cwd| !cwd.is_empty()).map(PathBuf::from)
}
