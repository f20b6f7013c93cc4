//! Following one session from a sequence number on: the events its log already holds, then each
//! one as it becomes durable — in log order, each exactly once — its status, the text its running
//! attempt streams and the tools it offers. A follower that falls behind its session's feed
//! starts again from the log and the board of what holds now ([`super::live`]), so nothing
//! durable is lost and the status and text it shows are current. While no worker of this service
//! writes the session, its log is read for what another process appends (another `dsh web` on the
//! same PostgreSQL store, a `dsh chat`), every [`FOREIGN_POLL`], from where the last read ended.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use dsh_abi::events;
use serde::Deserialize;
use tokio::sync::broadcast::{self, error::RecvError};

use super::live::{Live, Now};
use super::types::{ServiceError, Update};
use dsh_session::store::{LogRef, SessionStore, Tail};

/// How often the log of a session no worker of this service writes is read for new events.
pub const FOREIGN_POLL: Duration = Duration::from_millis(200);

/// Whether a worker of this service serves the session now.
pub(super) type IsServed = Box<dyn Fn() -> bool + Send + Sync>;

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
    /// A line about the session that is not in its log ([`Update::Note`]).
    Note { text: String },
}

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
    served: IsServed,
    poll: tokio::time::Interval,
    /// Where the next read of what another process appended starts; `None` until the log was
    /// read.
    tail: Option<Tail>,
}

impl Subscription {
    /// Follows `session` after event `after` (from its first event when `None`).
    pub(super) async fn start(
        session: &str,
        store: SessionStore,
        (live, served): (Arc<Live>, IsServed),
        after: Option<u64>,
    ) -> Result<Subscription, ServiceError> {
        let (feed, now) = live.follow(session);
        let mut poll = tokio::time::interval(FOREIGN_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let session = Arc::from(session);
        let (log, queued, tail) = (None, VecDeque::new(), None);
        let mut subscription =
            Subscription { session, store, log, live, feed, queued, last: after, served, poll, tail };
        subscription.catch_up(now).await?;
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
            let read = tokio::select! {
                received = self.feed.recv() => self.received(received).await,
                _ = self.poll.tick() => self.read_foreign_appends().await,
            };
            match read {
                Ok(true) => {}
                Ok(false) => return None,
                Err(err) => return Some(Err(err)),
            }
        }
    }

    /// Queues what an update from the feed shows; `false` once the feed is closed.
    async fn received(&mut self, received: Result<Update, RecvError>) -> Result<bool, ServiceError> {
        let update = match received {
            Ok(update) => update,
            Err(RecvError::Lagged(_)) => return self.start_again().await.map(|()| true),
            Err(RecvError::Closed) => return Ok(false),
        };
        let seen = match update {
            Update::Event { line, .. } => match seq_and_type(&line) {
                Some((seq, _)) if self.follows_a_gap(seq) => {
                    self.read_log().await?;
                    Seen::Event { seq, line }
                }
                Some((seq, _)) => Seen::Event { seq, line },
                None => return Ok(true),
            },
            Update::Status { running, .. } => Seen::Status { running },
            Update::Text { delta, .. } => Seen::Text { text: delta, whole: false },
            Update::AttemptEnded { completed, .. } => Seen::AttemptEnded { completed },
            Update::Tools { servers, .. } => Seen::Tools { servers },
            Update::Note { text, .. } => Seen::Note { text },
            Update::Reread { .. } => return self.read_log().await.map(|_| true),
        };
        self.queued.push_back(seen);
        Ok(true)
    }

    /// Takes the board's snapshot with a new place in the feed and catches up from there.
    async fn start_again(&mut self) -> Result<(), ServiceError> {
        let (feed, now) = self.live.follow(&self.session);
        self.feed = feed;
        self.catch_up(now).await
    }

    /// Queues the log's events after the last one handed out, the tools, the status and the
    /// streamed text `now` holds, taken with the feed's place: the feed goes on from exactly there
    /// (an event both in the log and the feed is handed out once, by its `seq`). A session no
    /// worker here writes has its status from its log.
    async fn catch_up(&mut self, now: Now) -> Result<(), ServiceError> {
        self.queued.clear();
        let open_turn = self.read_log().await?;
        let Now { running, draft, tools } = now;
        self.queued.extend(tools.map(|servers| Seen::Tools { servers }));
        if (self.served)() {
            self.queued.push_back(Seen::Status { running });
            if running {
                self.queued.push_back(Seen::Text { text: draft, whole: true });
            }
        } else {
            let writer = self.log.as_ref().and_then(LogRef::writer);
            self.queued.push_back(Seen::Status { running: open_turn && writer.is_some() });
        }
        Ok(())
    }

    /// Queues what another process appended to the log since the last look, while no worker of
    /// this service writes it: its new events and, from its turns' starts and ends, its status.
    /// A log that was replaced (an older generation continued as v4) is read anew.
    async fn read_foreign_appends(&mut self) -> Result<bool, ServiceError> {
        if (self.served)() {
            return Ok(true);
        }
        // Only a log file is ever replaced (by the v4 generation continuing it); a stored log is
        // not looked up again at every poll.
        let found = match &self.log {
            Some(known) if known.file_path().is_none() => Some(known.clone()),
            _ => self.find_log(),
        };
        let (Some(log), Some(tail)) = (found, self.tail) else { return self.read_log().await.map(|_| true) };
        if self.log.as_ref().is_none_or(|known| known.name() != log.name()) {
            (self.log, self.tail) = (Some(log), None);
            return self.read_log().await.map(|_| true);
        }
        let read = tokio::task::spawn_blocking(move || log.lines_after(tail)).await;
        let (lines, tail) = read.map_err(ServiceError::failed)?.map_err(ServiceError::failed)?;
        self.tail = Some(tail);
        for line in lines {
            let Some((seq, event_type)) = seq_and_type(&line) else { continue };
            if self.last.is_some_and(|last| seq <= last) {
                continue;
            }
            self.queued.push_back(Seen::Event { seq, line });
            match event_type.as_str() {
                events::TURN_START => self.queued.push_back(Seen::Status { running: true }),
                events::TURN_END => self.queued.push_back(Seen::Status { running: false }),
                _ => {}
            }
        }
        Ok(true)
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

    /// The session's log in the store now (exactly this id).
    fn find_log(&self) -> Option<LogRef> {
        self.store.session_by_id(&self.session).ok().filter(|log| log.id() == *self.session)
    }

    /// Queues the log's events after the last one handed out (as its reader sees them: a v1–v3
    /// log migrated); a session that has no log yet (it is being created) has none, and a torn
    /// last line is left for later. The first read also notes where the log ends, for the reads
    /// of what is appended after. Answers whether the log leaves a turn open.
    async fn read_log(&mut self) -> Result<bool, ServiceError> {
        if self.log.is_none() {
            self.log = self.find_log();
        }
        let Some(log) = self.log.clone() else { return Ok(false) };
        let (after, tail) = (self.last, self.tail);
        let read = tokio::task::spawn_blocking(move || {
            let tail = match tail {
                Some(tail) => tail,
                None => log.end().map_err(ServiceError::failed)?,
            };
            events_after(&log, after).map(|(events, open_turn)| (events, open_turn, tail))
        });
        let (events, open_turn, tail) = read.await.map_err(ServiceError::failed)??;
        self.tail = Some(tail);
        self.queued.extend(events.into_iter().map(|(seq, line)| Seen::Event { seq, line }));
        Ok(open_turn)
    }
}

/// The log's events after `after`, and whether its last turn is still open.
fn events_after(log: &LogRef, after: Option<u64>) -> Result<(Vec<(u64, String)>, bool), ServiceError> {
    let mut reader = log.reader().map_err(ServiceError::failed)?;
    let (mut events, mut open_turn) = (Vec::new(), false);
    while let Some(next) = reader.next_event() {
        let Ok(event) = next.map_err(ServiceError::failed)? else { break };
        match event.event_type {
            events::TURN_START => open_turn = true,
            events::TURN_END => open_turn = false,
            _ => {}
        }
        let Some(seq) = event.seq.map(|seq| seq as u64) else { continue };
        if after.is_none_or(|after| seq > after) {
            events.push((seq, event.line.to_owned()));
        }
    }
    Ok((events, open_turn))
}

/// The `seq` and type of an event line.
fn seq_and_type(line: &str) -> Option<(u64, String)> {
    #[derive(Deserialize)]
    struct Envelope {
        seq: Option<u64>,
        #[serde(rename = "type")]
        event_type: Option<String>,
    }
    let envelope = serde_json::from_str::<Envelope>(line).ok()?;
    Some((envelope.seq?, envelope.event_type.unwrap_or_default()))
}
