//! Writing a session log's lines: buffered, made durable when asked (an `fsync`, or a database
//! commit; at the latest 200 ms after the oldest unsynced line), and poisoned by the first failed
//! write, sync or commit — nothing more is written, never retried in place.

use std::fs::File;
use std::time::Duration;

use tokio::time::Instant;

/// The longest an appended line stays unsynced.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(200);

/// Whether commits reach the disk. Simulations and benchmarks of the loop itself turn it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    Durable,
    Unsynced,
}

/// Receives every written line once it is durable (`dsh run --json`).
pub type Echo = Box<dyn FnMut(&str) + Send>;

/// Writing or syncing failed; the log accepts nothing more.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the session log {log} can no longer be written: {reason}")]
pub struct WriteFailed {
    /// The log's path, or its session id in a database.
    pub log: String,
    pub reason: String,
    /// The log is in a database, and the database failed (not the data).
    pub store: bool,
}

/// One line of the log, with what a store keys it by.
#[derive(Debug, Clone)]
pub struct Line {
    pub seq: Option<i64>,
    pub event_type: String,
    pub body: String,
}

/// Where committed lines go: appended to a file, then fsynced; inserted into a database in one
/// statement (a commit) — each backend's, holding the session's writer lock
/// ([`crate::store`]).
pub trait Sink: Send {
    /// How messages name the log.
    fn name(&self) -> String;
    /// Writes `lines` after the log's last, durably unless `policy` says not to.
    fn write(&mut self, lines: Vec<Line>, policy: SyncPolicy) -> Result<(), String>;
    /// Whether the log is in a store that can fail as a service (a database), not as a file.
    fn in_service(&self) -> bool {
        false
    }
    /// The log file, when the log is one (repair cuts a torn tail from it).
    fn file(&mut self) -> Option<&mut File> {
        None
    }
}

pub struct LogWriter {
    sink: Box<dyn Sink>,
    pending: Vec<Line>,
    pending_since: Option<Instant>,
    fatal: Option<String>,
    policy: SyncPolicy,
    echo: Option<Echo>,
}

impl LogWriter {
    pub fn new(sink: Box<dyn Sink>, policy: SyncPolicy) -> Self {
        LogWriter { sink, pending: Vec::new(), pending_since: None, fatal: None, policy, echo: None }
    }

    /// The log file, when the log is one (repair cuts a torn tail from it).
    pub fn file(&mut self) -> Option<&mut File> {
        self.sink.file()
    }

    pub fn set_echo(&mut self, echo: Echo) {
        self.echo = Some(echo);
    }

    /// `Err` once a write or sync has failed.
    pub fn usable(&self) -> Result<(), WriteFailed> {
        match &self.fatal {
            Some(reason) => {
                Err(WriteFailed { log: self.sink.name(), reason: reason.clone(), store: self.sink.in_service() })
            }
            None => Ok(()),
        }
    }

    /// Buffers one line (without its newline) of event `seq` of `event_type`; commits when the
    /// oldest buffered line is older than [`SYNC_INTERVAL`]. Returns when the line was buffered,
    /// on the runtime's clock.
    pub fn push(&mut self, line: String, seq: u64, event_type: &str) -> Result<Instant, WriteFailed> {
        self.usable()?;
        self.pending.push(Line { seq: Some(seq as i64), event_type: event_type.to_owned(), body: line });
        let at = Instant::now();
        let oldest = *self.pending_since.get_or_insert(at);
        if at.duration_since(oldest) >= SYNC_INTERVAL {
            self.commit()?;
        }
        Ok(at)
    }

    /// Writes the buffered lines and makes them durable (an fsync, or a database commit).
    pub fn commit(&mut self) -> Result<(), WriteFailed> {
        self.usable()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut self.pending);
        self.pending_since = None;
        let echoed: Option<Vec<String>> =
            self.echo.is_some().then(|| lines.iter().map(|line| line.body.clone()).collect());
        match self.sink.write(lines, self.policy) {
            Ok(()) => {
                if let (Some(echo), Some(echoed)) = (&mut self.echo, echoed) {
                    echoed.iter().for_each(|line| echo(line));
                }
                Ok(())
            }
            Err(reason) => {
                self.fatal = Some(reason);
                self.usable()
            }
        }
    }
}
