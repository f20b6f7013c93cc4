//! What followers of a session see live: the session's feed of updates, and the board of what
//! holds right now — whether a turn runs, the text the running attempt has streamed so far, the
//! tools it offers — kept under one lock with the feeds, so a follower that starts (or falls
//! behind and starts again) takes a snapshot that the updates after it continue exactly. Each
//! session has a feed of its own: a follower falls behind only when it is slow for its session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::broadcast;

use super::types::Update;

/// How many updates of its session a follower may fall behind before it starts again from the
/// log and the board (a session's feed is made by its first follower).
const FOLLOWER_BACKLOG: usize = 1024;

/// The feeds and the board, for every session of a service.
#[derive(Default)]
pub(super) struct Live {
    inner: Mutex<Feeds>,
}

#[derive(Default)]
struct Feeds {
    senders: HashMap<Arc<str>, broadcast::Sender<Update>>,
    board: HashMap<Arc<str>, Now>,
}

/// What holds for one session right now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Now {
    pub running: bool,
    /// The running attempt's text so far (empty between attempts).
    pub draft: String,
    /// The tools the session offers, by name: the `mcp` row of each one's server.
    pub tools: Option<Arc<Value>>,
}

impl Feeds {
    /// The session's feed, made when it has none.
    fn sender(&mut self, session: &Arc<str>) -> &broadcast::Sender<Update> {
        self.senders.entry(session.clone()).or_insert_with(|| broadcast::Sender::new(FOLLOWER_BACKLOG))
    }

    fn note(&mut self, session: &Arc<str>, update: &Update) {
        let now = self.board.entry(session.clone()).or_default();
        match update {
            Update::Status { running, .. } => {
                now.running = *running;
                if !running {
                    now.draft.clear();
                }
            }
            Update::Text { delta, .. } => now.draft.push_str(delta),
            Update::AttemptEnded { .. } => now.draft.clear(),
            Update::Tools { servers, .. } => now.tools = Some(servers.clone()),
            Update::Event { .. } | Update::Note { .. } | Update::Reread { .. } => {}
        }
    }
}

impl Live {
    /// Notes `update` on the board and sends it to its session's followers.
    pub(super) fn publish(&self, update: &Update) {
        let session = update.session().clone();
        let mut feeds = self.inner.lock().expect("not poisoned");
        feeds.note(&session, update);
        if let Some(sender) = feeds.senders.get(&session).filter(|sender| sender.receiver_count() > 0) {
            let _ = sender.send(update.clone());
        }
    }

    /// A receiver of `session`'s updates from now on, and what holds for it now: the updates
    /// the receiver gets are exactly those after the snapshot.
    pub(super) fn follow(&self, session: &str) -> (broadcast::Receiver<Update>, Now) {
        let session: Arc<str> = Arc::from(session);
        let mut feeds = self.inner.lock().expect("not poisoned");
        let now = feeds.board.get(&session).cloned().unwrap_or_default();
        (feeds.sender(&session).subscribe(), now)
    }

    /// Forgets `session`'s board once no worker serves it, and its feed when nobody follows it.
    pub(super) fn forget(&self, session: &str) {
        let mut feeds = self.inner.lock().expect("not poisoned");
        feeds.board.remove(session);
        if feeds.senders.get(session).is_some_and(|sender| sender.receiver_count() == 0) {
            feeds.senders.remove(session);
        }
    }
}
