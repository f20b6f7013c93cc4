//! Following one session from a sequence number on: the events its log already holds, then each
//! one as it becomes durable — in log order, each exactly once — its status, and the text its
//! running attempt streams. A follower that falls behind the live feed starts again from the log
//! and the board of what holds now ([`super::live`]), so nothing durable is lost and the status
//! and streamed text it shows are current. While no worker of this service writes the session,
//! its log is read for what another process appends (another `dsh web` on the same PostgreSQL
//! store, a `dsh chat`), every [`FOREIGN_POLL`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::broadcast::{self, error::RecvError};

use super::live::{Live, Now};
use super::types::{ServiceError, Update};
use dsh_session::store::{LogRef, SessionStore};

/// What a follower sees of its session.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// An event of the log, as written, and its `seq`.
    Event { seq: u64, line: String },
    /// A turn started (`running`), or none is left to run.
    Status { running: bool },
    /// Text the running attempt streamed: more of it, or (`whole`) all of it so far.
    Text { text: String, whole: bool },
    /// The running attempt ended; its text is the answer only when it `completed`.
    AttemptEnded { completed: bool },
    /// The tools the session offers, by name: the `mcp` row of each one's server.
    Tools { servers: Arc<serde_json::Value> },
}

/// How often the log of a session no worker of this service writes is read for new events.
pub const FOREIGN_POLL: Duration = Duration::from_millis(200);

/// Whether a worker of this service serves the session now.
pub(super) type Served = Box<dyn Fn() -> bool + Send + Sync>;

/// One follower of one session.
pub struct Subscription {
    session: Arc<str>,
    store: SessionStore,
    log: Option<LogRef>,
    live: Arc<Live>,
    feed: broadcast::Receiver<Update>,
    queued: VecDeque<Seen>,
    /// The `seq` of the last event handed out (or the one the follower saw last).
    last: Option<u64>,
    served: Served,
    poll: tokio::time::Interval,
    /// Where the next read of what another process appended starts ([`LogRef::lines_after`]).
    tail: u64,
}

impl Subscription {
    /// Follows `session` after event `after` (from its first event when `None`).
    pub(super) async fn start(
        session: &str,
        store: SessionStore,
        (live, served): (Arc<Live>, Served),
        after: Option<u64>,
    ) -> Result<Subscription, ServiceError> {
        let (feed, _) = live.follow(session);
        let session = Arc::from(session);
        let mut poll = tokio::time::interval(FOREIGN_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (log, queued) = (None, VecDeque::new());
        let mut subscription =
            Subscription { session, store, log, live, feed, queued, last: after, served, poll, tail: 0 };
        subscription.start_again().await?;
        Ok(subscription)
    }

    /// The next thing the session did; `None` once the service is gone.
    pub async fn next(&mut self) -> Option<Result<Seen, ServiceError>> {
        loop {
            while let Some(seen) = self.queued.pop_front() {
                if let Some(seen) = self.hand_out(seen) {
                    return Some(Ok(seen));
                }
            }
            let received = tokio::select! {
                received = self.feed.recv() => received,
                _ = self.poll.tick() => {
                    if let Err(err) = self.read_foreign_appends().await {
                        return Some(Err(err));
                    }
                    continue;
                }
            };
            let seen = match received {
                Ok(update) => self.seen_of(update),
                Err(RecvError::Lagged(_)) => self.start_again().await.err().map(Err),
                Err(RecvError::Closed) => return None,
            };
            match seen {
                Some(Ok(Seen::Event { seq, line })) if self.follows_a_gap(seq) => {
                    if let Err(err) = self.read_log().await {
                        return Some(Err(err));
                    }
                    self.queued.push_back(Seen::Event { seq, line });
                }
                Some(Ok(seen)) => self.queued.push_back(seen),
                Some(Err(err)) => return Some(Err(err)),
                None => {}
            }
        }
    }

    /// What `update` shows this follower, when it is about its session.
    fn seen_of(&self, update: Update) -> Option<Result<Seen, ServiceError>> {
        let seen = match update {
            Update::Event { session, line } if session == self.session => Seen::Event { seq: seq_of(&line)?, line },
            Update::Status { session, running } if session == self.session => Seen::Status { running },
            Update::Text { session, delta } if session == self.session => Seen::Text { text: delta, whole: false },
            Update::AttemptEnded { session, completed } if session == self.session => Seen::AttemptEnded { completed },
            Update::Tools { session, servers } if session == self.session => Seen::Tools { servers },
            _ => return None,
        };
        Some(Ok(seen))
    }

    /// Takes the board's snapshot with a new place in the feed, then queues the log's events
    /// after the last one handed out, the status and the streamed text: the feed goes on from
    /// exactly there (an event both in the log and the feed is handed out once, by its `seq`).
    async fn start_again(&mut self) -> Result<(), ServiceError> {
        let (feed, now) = self.live.follow(&self.session);
        self.feed = feed;
        self.queued.clear();
        self.read_log().await?;
        let Now { running, draft, tools } = now;
        self.queued.extend(tools.map(|servers| Seen::Tools { servers }));
        self.queued.push_back(Seen::Status { running });
        if running {
            self.queued.push_back(Seen::Text { text: draft, whole: true });
        }
        Ok(())
    }

    /// Queues what another process appended to the log since the last look, while no worker of
    /// this service writes it: its new events and, from its turns' starts and ends, its status.
    async fn read_foreign_appends(&mut self) -> Result<(), ServiceError> {
        if (self.served)() {
            return Ok(());
        }
        if self.log.is_none() {
            self.log = self.store.session_by_id(&self.session).ok().filter(|log| log.id() == *self.session);
        }
        let Some(log) = self.log.clone() else { return Ok(()) };
        let tail = self.tail;
        let read = tokio::task::spawn_blocking(move || log.lines_after(tail)).await;
        let (lines, tail) = read.map_err(ServiceError::failed)?.map_err(ServiceError::failed)?;
        self.tail = tail;
        for line in lines {
            let Some((seq, event_type)) = envelope_of(&line) else { continue };
            if self.last.is_some_and(|last| seq <= last) {
                continue;
            }
            self.queued.push_back(Seen::Event { seq, line });
            match event_type.as_str() {
                dsh_abi::events::TURN_START => self.queued.push_back(Seen::Status { running: true }),
                dsh_abi::events::TURN_END => self.queued.push_back(Seen::Status { running: false }),
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether events before `seq` were written without reaching the live feed (while the
    /// session was being opened, or before this follower had its log): they are in the log.
    fn follows_a_gap(&self, seq: u64) -> bool {
        match self.last {
            Some(last) => seq > last + 1,
            None => seq > 0,
        }
    }

    /// `seen`, unless it is an event this follower already has.
    fn hand_out(&mut self, seen: Seen) -> Option<Seen> {
        if let Seen::Event { seq, .. } = &seen {
            if self.last.is_some_and(|last| *seq <= last) {
                return None;
            }
            self.last = Some(*seq);
        }
        Some(seen)
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
        self.queued.extend(events.into_iter().map(|(seq, line)| Seen::Event { seq, line }));
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

#[derive(Deserialize)]
struct Envelope {
    seq: Option<u64>,
    #[serde(rename = "type")]
    event_type: Option<String>,
}

/// The `seq` of an event line.
fn seq_of(line: &str) -> Option<u64> {
    serde_json::from_str::<Envelope>(line).ok()?.seq
}

/// The `seq` and type of an event line.
fn envelope_of(line: &str) -> Option<(u64, String)> {
    let envelope = serde_json::from_str::<Envelope>(line).ok()?;
    Some((envelope.seq?, envelope.event_type.unwrap_or_default()))
}
