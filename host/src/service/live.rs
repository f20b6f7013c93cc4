//! What followers of a session see live: the feed of updates, and the board of what holds right
//! now — whether a turn runs, the text the running attempt has streamed so far, the tools it
//! offers — kept under
//! one lock with the feed, so a follower that starts (or falls behind and starts again) takes a
//! snapshot that the updates after it continue exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::broadcast;

use super::types::Update;

/// How many updates a follower may fall behind the live feed before it starts again from the
/// log and the board.
const FOLLOWER_BACKLOG: usize = 4096;

/// The live feed and the board, for every session of a service.
pub(super) struct Live {
    inner: Mutex<Feed>,
}

struct Feed {
    sender: broadcast::Sender<Update>,
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

impl Default for Live {
    fn default() -> Live {
        let feed = Feed { sender: broadcast::Sender::new(FOLLOWER_BACKLOG), board: HashMap::new() };
        Live { inner: Mutex::new(feed) }
    }
}

impl Live {
    /// Notes `update` on the board and sends it to every follower.
    pub(super) fn publish(&self, update: &Update) {
        let mut feed = self.inner.lock().expect("not poisoned");
        match update {
            Update::Event { .. } => {}
            Update::Status { session, running } => {
                let now = feed.board.entry(session.clone()).or_default();
                now.running = *running;
                if !running {
                    now.draft.clear();
                }
            }
            Update::Text { session, delta } => feed.board.entry(session.clone()).or_default().draft.push_str(delta),
            Update::AttemptEnded { session, .. } => {
                feed.board.entry(session.clone()).or_default().draft.clear();
            }
            Update::Tools { session, servers } => {
                feed.board.entry(session.clone()).or_default().tools = Some(servers.clone());
            }
        }
        if feed.sender.receiver_count() > 0 {
            let _ = feed.sender.send(update.clone());
        }
    }

    /// A receiver of every update from now on, and what holds for `session` now: the updates
    /// the receiver gets are exactly those after the snapshot.
    pub(super) fn follow(&self, session: &str) -> (broadcast::Receiver<Update>, Now) {
        let feed = self.inner.lock().expect("not poisoned");
        let now = feed.board.get(session).cloned().unwrap_or_default();
        (feed.sender.subscribe(), now)
    }

    /// Forgets `session`'s board once no worker serves it.
    pub(super) fn forget(&self, session: &str) {
        self.inner.lock().expect("not poisoned").board.remove(session);
    }
}
