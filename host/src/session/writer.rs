//! Writing a session log's lines: buffered, made durable with `fsync` when asked (and at the
//! latest 200 ms after the oldest unsynced line), and poisoned by the first failed write or sync —
//! nothing more is written, never retried in place.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
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
#[error("the session log {} can no longer be written: {reason}", path.display())]
pub struct WriteFailed {
    pub path: PathBuf,
    pub reason: String,
}

pub struct LogWriter {
    path: PathBuf,
    file: File,
    pending: Vec<u8>,
    pending_since: Option<Instant>,
    fatal: Option<String>,
    policy: SyncPolicy,
    echo: Option<Echo>,
    /// Lines written but not yet committed, for `echo`.
    unechoed: Vec<String>,
}

impl LogWriter {
    /// Appends to `file` (opened for appending at `path`).
    pub fn new(path: PathBuf, file: File, policy: SyncPolicy) -> Self {
        LogWriter {
            path,
            file,
            pending: Vec::new(),
            pending_since: None,
            fatal: None,
            policy,
            echo: None,
            unechoed: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    pub fn set_echo(&mut self, echo: Echo) {
        self.echo = Some(echo);
    }

    /// `Err` once a write or sync has failed.
    pub fn usable(&self) -> Result<(), WriteFailed> {
        match &self.fatal {
            Some(reason) => Err(WriteFailed { path: self.path.clone(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// Buffers one line (without its newline); commits when the oldest buffered line is older
    /// than [`SYNC_INTERVAL`]. Returns when the line was buffered, on the runtime's clock.
    pub fn push(&mut self, line: String) -> Result<Instant, WriteFailed> {
        self.usable()?;
        self.pending.extend_from_slice(line.as_bytes());
        self.pending.push(b'\n');
        if self.echo.is_some() {
            self.unechoed.push(line);
        }
        let at = Instant::now();
        let oldest = *self.pending_since.get_or_insert(at);
        if at.duration_since(oldest) >= SYNC_INTERVAL {
            self.commit()?;
        }
        Ok(at)
    }

    /// Writes the buffered lines and syncs them to disk.
    pub fn commit(&mut self) -> Result<(), WriteFailed> {
        self.usable()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let written = self.file.write_all(&self.pending).and_then(|()| match self.policy {
            SyncPolicy::Durable => self.file.sync_data(),
            SyncPolicy::Unsynced => Ok(()),
        });
        match written {
            Ok(()) => {
                self.pending.clear();
                self.pending_since = None;
                if let Some(echo) = &mut self.echo {
                    for line in self.unechoed.drain(..) {
                        echo(&line);
                    }
                }
                Ok(())
            }
            Err(err) => {
                self.fatal = Some(err.to_string());
                self.usable()
            }
        }
    }
}
