//! What every handler of `dsh web` shares: the session service and store, what new sessions run
//! with, the stop signal, the trajectories read so far and the way `dsh` commands are run.

use axum::http::StatusCode;
use tokio::sync::watch;

use super::cache::Trajectories;
use super::error::ApiError;
use super::runner::Commands;
use crate::service::SessionService;
use dsh_session::store::{LogRef, SessionStore};

/// What the handlers share.
#[derive(Clone)]
pub struct Web {
    pub service: SessionService,
    pub store: SessionStore,
    /// The profile and extra layers new sessions run with.
    pub profile: String,
    pub patches: Vec<std::path::PathBuf>,
    /// Becomes `true` when the server stops: the event streams end.
    pub stopping: watch::Receiver<bool>,
    pub trajectories: Trajectories,
    pub commands: Commands,
}

impl Web {
    /// The log of session `id` (exactly that id), or 404.
    pub fn log_of(&self, id: &str) -> Result<LogRef, ApiError> {
        let found = self.store.session_by_id(id).ok().filter(|log| log.id() == id);
        found.ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("session \"{id}\" not found")))
    }
}
