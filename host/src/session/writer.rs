//! Writing a session log's lines: buffered, made durable when asked (an `fsync`, or a database
//! commit; at the latest 200 ms after the oldest unsynced line), and poisoned by the first failed
//! write, sync or commit — nothing more is written, never retried in place.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::store::postgres::StoredLine;
use super::store::StoredWriter;
use crate::lock::WriterLock;

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

/// Where committed lines go: appended to a file (then fsynced), or inserted into a database in
/// one statement (a commit) through the connection that holds the session's writer lock.
pub enum Sink {
    File { path: PathBuf, file: File, _lock: WriterLock },
    Stored { writer: StoredWriter, next_line: i64 },
}

impl Sink {
    fn name(&self) -> String {
        match self {
            Sink::File { path, .. } => path.display().to_string(),
            Sink::Stored { writer, .. } => writer.id.clone(),
        }
    }

    fn write(&mut self, lines: Vec<StoredLine>, policy: SyncPolicy) -> Result<(), String> {
        match self {
            Sink::File { file, .. } => {
                let mut bytes = Vec::with_capacity(lines.iter().map(|line| line.body.len() + 1).sum());
                for line in &lines {
                    bytes.extend_from_slice(line.body.as_bytes());
                    bytes.push(b'\n');
                }
                file.write_all(&bytes)
                    .and_then(|()| match policy {
                        SyncPolicy::Durable => file.sync_data(),
                        SyncPolicy::Unsynced => Ok(()),
                    })
                    .map_err(|err| err.to_string())
            }
            Sink::Stored { writer, next_line } => {
                let count = lines.len() as i64;
                writer.connection.insert_lines(&writer.id, *next_line, lines).map_err(|err| err.to_string())?;
                *next_line += count;
                Ok(())
            }
        }
    }
}

pub struct LogWriter {
    sink: Sink,
    pending: Vec<StoredLine>,
    pending_since: Option<Instant>,
    fatal: Option<String>,
    policy: SyncPolicy,
    echo: Option<Echo>,
}

impl LogWriter {
    pub fn new(sink: Sink, policy: SyncPolicy) -> Self {
        LogWriter { sink, pending: Vec::new(), pending_since: None, fatal: None, policy, echo: None }
    }

    /// The log file, when the log is one (repair cuts a torn tail from it).
    pub fn file(&mut self) -> Option<&mut File> {
        match &mut self.sink {
            Sink::File { file, .. } => Some(file),
            Sink::Stored { .. } => None,
        }
    }

    pub fn set_echo(&mut self, echo: Echo) {
        self.echo = Some(echo);
    }

    /// `Err` once a write or sync has failed.
    pub fn usable(&self) -> Result<(), WriteFailed> {
        match &self.fatal {
            Some(reason) => Err(WriteFailed {
                log: self.sink.name(),
                reason: reason.clone(),
                store: matches!(self.sink, Sink::Stored { .. }),
            }),
            None => Ok(()),
        }
    }

    /// Buffers one line (without its newline) of event `seq` of `event_type`; commits when the
    /// oldest buffered line is older than [`SYNC_INTERVAL`]. Returns when the line was buffered,
    /// on the runtime's clock.
    pub fn push(&mut self, line: String, seq: u64, event_type: &str) -> Result<Instant, WriteFailed> {
        self.usable()?;
        self.pending.push(StoredLine { seq: Some(seq as i64), event_type: event_type.to_owned(), body: line });
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
