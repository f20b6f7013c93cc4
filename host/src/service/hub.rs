//! What a worker reaches of its service, and how answers get back to who asked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch};

use super::live::Live;
use super::types::{ServiceError, Setup, Update};
use dsh_session::store::SessionStore;

/// What a worker reaches of its service: the set-up, the store, the feed, the operator's notes,
/// and the way to be forgotten once it ends.
#[derive(Clone)]
pub(super) struct Hub {
    pub setup: Arc<Setup>,
    pub store: SessionStore,
    pub updates: mpsc::UnboundedSender<Update>,
    /// The same updates and the streamed text, for followers of one session
    /// ([`super::Subscription`]).
    pub live: Arc<Live>,
    pub notes: Arc<dyn Fn(&str) + Send + Sync>,
    pub forget: Arc<Forget>,
    /// Set once the service stops: what is still queued is refused.
    pub shutting_down: Arc<AtomicBool>,
}

/// How a worker that ended is forgotten: its session id and its pending count, which tells it
/// from a newer worker of that session.
pub(super) type Forget = dyn Fn(&str, &watch::Sender<usize>) + Send + Sync;

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
