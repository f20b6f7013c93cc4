//! Following one session from a sequence number on: the events its log already holds, then each
//! one as it becomes durable — in log order, each exactly once — and its status changes. A
//! follower that falls behind the live feed reads what it missed from the log, so none is lost.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::broadcast::{self, error::RecvError};

use super::types::{ServiceError, Update};
use dsh_session::store::{LogRef, SessionStore};

/// What a follower sees of its session.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// An event of the log, as written, and its `seq`.
    Event { seq: u64, line: String },
    /// A turn started (`running`), or none is left to run.
    Status { running: bool },
}

/// One follower of one session.
pub struct Subscription {
    session: Arc<str>,
    store: SessionStore,
    log: Option<LogRef>,
    backlog: VecDeque<(u64, String)>,
    live: broadcast::Receiver<Update>,
    /// The `seq` of the last event handed out (or the one the follower saw last).
    last: Option<u64>,
}

impl Subscription {
    /// Follows `session` after event `after` (from its first event when `None`); `live` must be
    /// subscribed before the log is read, so that nothing falls between the two.
    pub(super) async fn start(
        session: &str,
        store: SessionStore,
        live: broadcast::Receiver<Update>,
        after: Option<u64>,
    ) -> Result<Subscription, ServiceError> {
        let mut subscription =
            Subscription { session: Arc::from(session), store, log: None, backlog: VecDeque::new(), live, last: after };
        subscription.read_log().await?;
        Ok(subscription)
    }

    /// The next thing the session did; `None` once the service is gone.
    pub async fn next(&mut self) -> Option<Result<Seen, ServiceError>> {
        loop {
            while let Some((seq, line)) = self.backlog.pop_front() {
                if self.is_new(seq) {
                    return Some(Ok(self.hand_out(seq, line)));
                }
            }
            match self.live.recv().await {
                Ok(Update::Event { session, line }) if session == self.session => {
                    let Some(seq) = seq_of(&line) else { continue };
                    if self.follows_a_gap(seq) {
                        if let Err(err) = self.read_log().await {
                            return Some(Err(err));
                        }
                        self.backlog.push_back((seq, line));
                    } else if self.is_new(seq) {
                        return Some(Ok(self.hand_out(seq, line)));
                    }
                }
                Ok(Update::Status { session, running }) if session == self.session => {
                    return Some(Ok(Seen::Status { running }));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    if let Err(err) = self.read_log().await {
                        return Some(Err(err));
                    }
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }

    /// Whether events before `seq` were written without reaching the live feed (while the
    /// session was being opened, or before this follower had its log): they are in the log.
    fn follows_a_gap(&self, seq: u64) -> bool {
        match self.last {
            Some(last) => seq > last + 1,
            None => seq > 0,
        }
    }

    fn is_new(&self, seq: u64) -> bool {
        self.last.is_none_or(|last| seq > last)
    }

    fn hand_out(&mut self, seq: u64, line: String) -> Seen {
        self.last = Some(seq);
        Seen::Event { seq, line }
    }

    /// Queues the log's events after the last one handed out; a session that has no log yet
    /// (it is being created) has none. A torn last line is left to the live feed.
    async fn read_log(&mut self) -> Result<(), ServiceError> {
        if self.log.is_none() {
            self.log = self.store.session_by_id(&self.session).ok().filter(|log| log.id() == *self.session);
        }
        let Some(log) = self.log.clone() else { return Ok(()) };
        let after = self.last;
        let read = tokio::task::spawn_blocking(move || events_after(&log, after)).await;
        let events = read.map_err(ServiceError::failed)??;
        self.backlog.extend(events);
        Ok(())
    }
}

fn events_after(log: &LogRef, after: Option<u64>) -> Result<Vec<(u64, String)>, ServiceError> {
    let mut reader = log.reader().map_err(ServiceError::failed)?;
    let mut events = Vec::new();
    while let Some(next) = reader.next_event() {
        let Ok(event) = next.map_err(ServiceError::failed)? else { break };
        let Some(seq) = event.seq.map(|seq| seq as u64) else { continue };
        if after.is_none_or(|after| seq > after) {
            events.push((seq, event.line.to_owned()));
        }
    }
    Ok(events)
}

/// The `seq` of an event line.
fn seq_of(line: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct Envelope {
        seq: Option<u64>,
    }
    serde_json::from_str::<Envelope>(line).ok()?.seq
}
