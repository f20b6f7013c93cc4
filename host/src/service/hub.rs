//! What a worker reaches of its service, and how answers get back to who asked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch};

use super::live::Live;
use super::types::{ServiceError, Setup, Update};
use dsh_session::store::SessionStore;

/// What a worker reaches of its service: the set-up, the store, the feed, the operator's notes,
/// and the way to leave the service's sessions.
#[derive(Clone)]
pub(super) struct Hub {
    pub setup: Arc<Setup>,
    pub store: SessionStore,
    pub updates: mpsc::UnboundedSender<Update>,
    /// The same updates and the streamed text, for followers of one session
    /// ([`super::Subscription`]).
    pub live: Arc<Live>,
    pub notes: Arc<dyn Fn(&str) + Send + Sync>,
    pub leave: Arc<Leave>,
    /// Set once the service stops: what is still queued is refused.
    pub shutting_down: Arc<AtomicBool>,
}

/// How a worker leaves the service's sessions: its session id, its pending count (which tells it
/// from a newer worker of that session) and how.
pub(super) type Leave = dyn Fn(&str, &watch::Sender<usize>, Leaving<'_>) + Send + Sync;

/// How a worker leaves.
pub(super) enum Leaving<'a> {
    /// It is about to close its session: `close_commands` runs while no request can be handed to
    /// it, and a later one starts a worker that opens the session once this one is done.
    Closing(&'a mut (dyn FnMut() + Send)),
    /// It is done: it is forgotten.
    Gone,
}

impl Hub {
    pub(super) fn publish(&self, update: Update) {
        self.live.publish(&update);
        if update.is_durable_story() {
            let _ = self.updates.send(update);
        }
    }

    pub(super) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    pub(super) fn note(&self, note: &str) {
        (self.notes)(note);
    }
}

pub(super) type Reply<T> = oneshot::Sender<Result<T, ServiceError>>;

/// The reply a prompt gets once its message is durably received.
pub(super) type Receipt = Arc<Mutex<Option<Reply<String>>>>;
