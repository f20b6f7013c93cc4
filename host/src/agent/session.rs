//! Sessions as the agent runs them: a composed profile assembled over a new log or an existing one
//! (repaired on open), `agent/session-start` raised, and — for a cold resume — the continuation
//! turns listeners enqueue, each run once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_abi::{Continuation, SessionStartSource};
use serde_json::json;

use super::assembly::Assembly;
use super::cancel::Cancel;
use super::turn::{Agent, HeaderReason, TurnEnd, UserInput};
use super::view::TurnView;
use crate::context::{epoch_ms, Services, SystemServices};
use crate::counters::Stores;
use crate::problem::Problem;
use crate::profile::patch::{session_copy, Composition};
use crate::profile::{Home, Profile};
use dsh_session::log::{AppendError, OpenError, SessionLog};
use dsh_session::meta::RunOverrides;
use dsh_session::meta::SessionMeta;
use dsh_session::repair::Repair;
use dsh_session::store::{LogRef, SessionLock, SessionStore};
use dsh_session::writer::SyncPolicy;

/// Which log the agent runs over.
#[derive(Debug)]
pub enum Opening<'a> {
    /// A new session in this store, created with these `--patch` layers and overrides (kept
    /// with the session); under `id` when given (else a new one), working in `cwd` (else the
    /// current directory).
    New {
        store: &'a SessionStore,
        patches: &'a [PathBuf],
        overrides: &'a RunOverrides,
        id: Option<&'a str>,
        cwd: Option<&'a Path>,
    },
    /// An existing log, under its writer lock, repaired on open (a turn left open is closed as
    /// interrupted). With `keep_route`, its turns go to the provider and model the session
    /// recorded (when the profile has that route), else where the profile says.
    Existing { log: &'a LogRef, lock: SessionLock, keep_route: bool },
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the profile cannot run")]
    Config(Vec<Problem>),
    #[error("cannot create session {id} in {dir}")]
    Create { id: String, dir: String, source: std::io::Error },
    #[error(transparent)]
    Open(#[from] OpenError),
}

/// An agent ready to run turns, what opening an existing log repaired, and what changed since
/// the session's turns last ran (for the user).
pub struct Started {
    pub agent: Agent,
    pub repair: Option<Repair>,
    pub notes: Vec<String>,
}

/// Assembles `composition` and opens the session log.
pub async fn start(
    home: &Home,
    profile: &Profile,
    composition: &Composition,
    opening: Opening<'_>,
    mut view: Box<dyn TurnView>,
    verbose_mock: bool,
) -> Result<Started, StartError> {
    view.servers_starting(&composition.enabled_ids_of("mcp"));
    let built = Assembly::build(home, profile, composition, verbose_mock, &Stores::at(home.root())).await;
    view.servers_started();
    let mut assembly = built.map_err(StartError::Config)?;
    let services: Arc<dyn Services> = Arc::new(SystemServices);
    let mut notes = Vec::new();
    let (log, repair) = match opening {
        Opening::New { store, patches, overrides, id, cwd } => {
            let id = id.map_or_else(|| services.new_id(), str::to_owned);
            let cwd = cwd.map(Path::to_path_buf).or_else(|| std::env::current_dir().ok());
            let cwd = cwd.map(|dir| dir.display().to_string());
            let header = store.format().new_header(&id, epoch_ms(), cwd.as_deref());
            let dir = store.files_folder().map_or_else(|| store.describe(), |sessions| home.display(sessions));
            let cannot_create = |source| StartError::Create { id: id.clone(), dir: dir.clone(), source };
            let log =
                SessionLog::create(store, &id, &header, |header| assembly.open_checkers(header), SyncPolicy::Durable)
                    .map_err(cannot_create)?;
            let mut meta = SessionMeta {
                profile: Some(profile.name.clone()),
                provider: Some(assembly.agent.provider.clone()),
                model: Some(assembly.model().to_owned()),
                overrides: overrides.clone(),
                ..SessionMeta::default()
            };
            let copies: Vec<_> =
                patches.iter().map(|file| session_copy(file)).collect::<std::io::Result<_>>().map_err(cannot_create)?;
            log.location().keep_meta(&mut meta, &copies).map_err(cannot_create)?;
            (log, None)
        }
        Opening::Existing { log, lock, keep_route } => {
            let open_checkers = |header: &str| assembly.open_checkers(header);
            // The turn a crash left open is closed once its open calls are resolved (below).
            let (log, repair) = SessionLog::open(log, lock, open_checkers, SyncPolicy::Durable, epoch_ms(), false)?;
            let meta = log
                .location()
                .meta()
                .map_err(|err| OpenError::Io { log: log.location().name(), reason: err.into() })?;
            notes = recorded_route(&mut assembly, &meta, keep_route);
            (log, Some(repair))
        }
    };
    let mut agent = Agent { log, assembly, services, cancel: Cancel::default(), view, turn_route: None };
    let repair = match repair {
        Some(repair) => Some(close_interrupted(&mut agent, repair).await?),
        None => None,
    };
    Ok(Started { agent, repair, notes })
}

/// Resolves the tool calls a crash left open ([`Agent::resolve_open_calls`]), then closes the
/// interrupted turn and marks where the restored history ends.
async fn close_interrupted(agent: &mut Agent, mut repair: Repair) -> Result<Repair, OpenError> {
    let failed = |log: &SessionLog, err: AppendError| OpenError::Io {
        log: log.location().name(),
        reason: std::io::Error::other(err.to_string()),
    };
    if let Err(err) = agent.resolve_open_calls().await {
        return Err(failed(&agent.log, err));
    }
    repair.closers = agent.log.close_open_turn(epoch_ms()).map_err(|err| failed(&agent.log, err))?;
    agent.log.mark_restored(epoch_ms()).map_err(|err| failed(&agent.log, err))?;
    Ok(repair)
}

/// Sends a continued session's turns to the provider and model it recorded when `keep` and the
/// profile still has that route; says what differs.
fn recorded_route(assembly: &mut Assembly, meta: &SessionMeta, keep: bool) -> Vec<String> {
    let Some(provider) = &meta.provider else { return Vec::new() };
    let model = meta.model.as_deref().unwrap_or_default();
    if *provider == assembly.agent.provider && model == assembly.model() {
        return Vec::new();
    }
    let now = format!("provider {} (model {})", assembly.agent.provider, assembly.model());
    let route = assembly.routes.get(provider).filter(|_| keep);
    let Some(route) = route else {
        let why = if keep { "which this profile has no row for" } else { "" };
        let why = if why.is_empty() { "as asked".to_owned() } else { format!("({provider}: {why})") };
        return vec![format!(
            "the session's turns went to provider {provider} (model {model}); continuing on {now} {why}"
        )];
    };
    let note = format!(
        "continuing on provider {provider} (model {model}) as the session recorded; the profile now says {now}"
    );
    assembly.agent.model = (model != route.model && !model.is_empty()).then(|| model.to_owned());
    assembly.agent.provider = provider.clone();
    vec![note]
}

impl Agent {
    /// Raises `agent/session-start` for a session `dsh run` starts or continues, with the user's
    /// prompt already pending. Continuations are only run on a cold resume, so one asked for here
    /// is named in a warning and left.
    pub fn announce(&self, source: SessionStartSource) {
        for (package, continuation) in self.session_start(source, true) {
            tracing::warn!(
                "package \"{package}\" asked to enqueue the continuation {} when the session started; dsh runs \
                 continuations only on `dsh session resume`",
                continuation.id
            );
        }
    }
}

/// What happens during a resume, for the caller to show.
#[derive(Debug)]
pub enum ResumeEvent<'a> {
    /// A listener asked again for a continuation that is already in the log; it is not run twice.
    AlreadyInLog { id: &'a str },
    /// A continuation turn starts.
    Continuing { plugin: &'a str, summary: &'a str },
    /// A continuation turn ended.
    Ended(&'a TurnEnd),
}

/// Offers a cold session to `agent/session-start` listeners (source `resume`, no input pending)
/// and runs each continuation they enqueue as a new turn, in row order, until one does not
/// complete. Returns the end of the last turn run, `None` when nothing was resumed.
pub async fn resume(
    agent: &mut Agent,
    report: &mut (dyn FnMut(ResumeEvent<'_>) + Send),
) -> Result<Option<TurnEnd>, AppendError> {
    let mut last = None;
    for (plugin, continuation) in agent.session_start(SessionStartSource::Resume, false) {
        let Continuation { id, text, form, summary } = continuation;
        if agent.log.has_message(&id) {
            report(ResumeEvent::AlreadyInLog { id: &id });
            continue;
        }
        report(ResumeEvent::Continuing { plugin: &plugin, summary: &summary });
        let source = json!({"kind": "plugin", "plugin": plugin, "form": form.as_str(), "summary": summary.as_str()});
        let input = UserInput { id: id.into_string(), text: text.into_string(), source };
        let end = agent.run_turn(input, HeaderReason::Resume).await?;
        report(ResumeEvent::Ended(&end));
        let completed = end == TurnEnd::Completed;
        last = Some(end);
        if !completed {
            break;
        }
    }
    Ok(last)
}
