//! The interface every session store implements — a [`Backend`] keeps sessions, each a [`Log`]
//! read, locked ([`Held`]) and appended to ([`Sink`]) — and the handle the rest of dsh holds a
//! log by ([`LogRef`]), whatever store it is in.

use std::fmt::Debug;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::import::ImportError;
use crate::lock::LockError;
use crate::meta::{PatchCopy, SessionMeta};
use crate::reader::{Damage, LogReader, ReadError};
pub use crate::store_error::StoreError;
use crate::writer::{Line, Sink};
use crate::{locate, NotFound};

/// The name a kept attachment has beside the log, before its sha256.
pub const ATTACHMENT_PREFIX: &str = "attachment-";

/// Why a held log could not be opened for appending.
#[derive(Debug)]
pub enum OpenSinkError {
    /// A DeepSeek Harness `session.jsonl.zstd`: read-only.
    Compressed,
    Read(ReadError),
    Io(io::Error),
}

/// Where sessions are kept.
pub trait Backend: Send + Sync {
    /// Where the store is, for messages: a folder, or a URL without its password.
    fn describe(&self) -> String;
    /// The home's `sessions/` folder (the log files, or the kept copies of stored sessions).
    fn local_folder(&self) -> &Path;
    /// The folder whose files are the logs, when the store is one.
    fn files_folder(&self) -> Option<&Path> {
        None
    }
    /// The session of id `id`, else the one whose id starts with it (as git takes a prefix).
    fn find(&self, id: &str) -> Result<Option<LogRef>, NotFound>;
    /// Every session with its `createdAt` (0 when unknown), in no particular order.
    fn all(&self) -> Result<Vec<(f64, LogRef)>, StoreError>;
    /// The ids of the sessions (for completion), in no particular order.
    fn ids(&self) -> Vec<String>;
    /// Creates session `id` holding `header_line`, durably and atomically (it appears whole or
    /// not at all), under its writer lock; the sink appends after the header.
    fn create(&self, id: &str, header_line: &str) -> io::Result<(LogRef, Box<dyn Sink>)>;
    /// Starts importing session `id`: lines pushed are kept out of sight until the import is
    /// finished, so a crash or failure leaves the store as it was.
    fn begin_import(&self, id: &str, header_line: &str) -> Result<Box<dyn Importing>, ImportError>;
}

/// An import under way.
pub trait Importing {
    fn push(&mut self, line: Line) -> Result<(), ImportError>;
    fn finish(self: Box<Self>) -> Result<LogRef, ImportError>;
}

/// One session's log in its backend.
pub trait Log: Send + Sync + Debug {
    /// How messages name the log: its path, or its session id.
    fn name(&self) -> String;
    /// The file the log is, when it is one.
    fn file(&self) -> Option<&Path> {
        None
    }
    /// Reads the log from its header on, as the JSONL its file holds.
    fn reader(&self) -> Result<LogReader, ReadError>;
    /// The log's lines exactly as stored (a compressed file decompressed).
    fn lines(&self) -> Result<Box<dyn BufRead + Send>, ReadError>;
    /// The complete lines after `tail`, and the tail after them, so a follower of a log another
    /// process appends to reads only what is new. `Tail::default()` is the start: the header
    /// line first, where the store keeps it in the log. This one counts lines; a store that can
    /// go straight to a place does.
    fn lines_after(&self, tail: Tail) -> Result<(Vec<String>, Tail), ReadError> {
        lines_counted_after(self.lines()?, tail)
    }
    /// Where the log ends now: after its last complete line.
    fn end(&self) -> Result<Tail, ReadError> {
        Ok(self.lines_after(Tail::default())?.1)
    }
    /// The process writing the log now, if one is (stored logs: on any machine).
    fn writer(&self) -> Option<u32>;
    /// How a reader names a torn last line.
    fn torn_note(&self, damage: &Damage) -> String {
        damage.to_string()
    }
    /// The path the session's kept files (`dsh.json`, `--patch` copies) are named from.
    fn meta_anchor(&self) -> PathBuf;
    /// What dsh keeps with the session (nothing, for a log kept without it); `Err` when the store
    /// cannot say.
    fn meta(&self) -> Result<SessionMeta, StoreError>;
    /// Puts the session's kept files where [`Log::meta_anchor`] names them, when they are kept
    /// elsewhere.
    fn bring_kept_files(&self) {}
    /// Keeps `meta`, whose `--patch` copies are written beside the anchor already.
    fn store_meta(&self, meta: &SessionMeta) -> io::Result<()>;
    /// Keeps `bytes` with the session as the file `name`; one there already is left as it is.
    fn keep_file(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Takes the log's one-writer lock; a log outside `local` leaves no lock file behind.
    fn lock(&self, local: &Path) -> Result<SessionLock, LockError>;
}

/// Where a follower of a log is, in its store's terms: for a plain file, the bytes up to the
/// end of the last complete line read; for a compressed one, its size and the lines read; for a
/// stored log, the number of its last line read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tail {
    pub(crate) bytes: u64,
    pub(crate) lines: u64,
}

/// The lines of `lines` after `tail`'s count, and how many it holds in all.
pub(crate) fn lines_counted_after(
    lines: Box<dyn BufRead + Send>,
    tail: Tail,
) -> Result<(Vec<String>, Tail), ReadError> {
    let mut after = Vec::new();
    let mut count = 0;
    for line in lines.lines() {
        count += 1;
        if count > tail.lines {
            after.push(line?);
        }
    }
    Ok((after, Tail { lines: count.max(tail.lines), ..tail }))
}

/// A held writer lock: opening the log for appending reads it to its end and hands the lock to
/// the sink that writes after it.
pub trait Held: Send + Debug {
    fn open(self: Box<Self>) -> Result<(LogReader, Box<dyn Sink>), OpenSinkError>;
    /// Removes the session — its log and everything kept with it — while the lock is held, so
    /// no writer is in the middle of it; a removal cut short leaves no half session behind.
    fn delete(self: Box<Self>) -> io::Result<()>;
}

/// A session's writer lock, held until it is dropped or handed to its log's sink.
#[derive(Debug)]
pub struct SessionLock(pub Box<dyn Held>);

impl SessionLock {
    pub fn open(self) -> Result<(LogReader, Box<dyn Sink>), OpenSinkError> {
        self.0.open()
    }

    /// See [`Held::delete`].
    pub fn delete(self) -> io::Result<()> {
        self.0.delete()
    }
}

/// One session's log, in whichever store it is.
#[derive(Debug, Clone)]
pub struct LogRef(Arc<dyn Log>);

/// `createdAt` of a header line (0 when it has none).
pub fn created_at(header: &str) -> f64 {
    serde_json::from_str::<Value>(header)
        .ok()
        .and_then(|header| header.get("createdAt").and_then(Value::as_f64))
        .unwrap_or(0.0)
}

/// Whether an id read from a store can name a session ([`locate::is_session_id`]); any other
/// (one another program stored, say `../../x` or one holding escapes) is left out with a warning
/// that shows it escaped, so it never becomes a path or reaches a terminal as it is.
pub fn sound_id(id: &str) -> bool {
    let sound = locate::is_session_id(id);
    if !sound {
        tracing::warn!(
            "the session store holds a session whose id {} is not a session id ({}); it is left out",
            serde_json::Value::from(id),
            locate::SESSION_ID_RULE
        );
    }
    sound
}

impl LogRef {
    pub fn new(log: Arc<dyn Log>) -> LogRef {
        LogRef(log)
    }

    pub fn name(&self) -> String {
        self.0.name()
    }

    /// The file the log is, when it is one.
    pub fn file_path(&self) -> Option<&Path> {
        self.0.file()
    }

    /// The session's id: a stored session's own, the name of a log file's folder.
    pub fn id(&self) -> String {
        let folder = self.0.file().and_then(Path::parent).and_then(Path::file_name);
        folder.map_or_else(|| self.name(), |folder| folder.to_string_lossy().into_owned())
    }

    pub fn reader(&self) -> Result<LogReader, ReadError> {
        self.0.reader()
    }

    /// The log's lines exactly as stored: what `session export` writes.
    /// See [`Log::lines_after`].
    pub fn lines_after(&self, tail: Tail) -> Result<(Vec<String>, Tail), ReadError> {
        self.0.lines_after(tail)
    }

    /// See [`Log::end`].
    pub fn end(&self) -> Result<Tail, ReadError> {
        self.0.end()
    }

    /// The log's lines exactly as stored (a compressed file decompressed).
    pub fn lines(&self) -> Result<Box<dyn BufRead + Send>, ReadError> {
        self.0.lines()
    }

    pub fn writer(&self) -> Option<u32> {
        self.0.writer()
    }

    pub fn torn_note(&self, damage: &Damage) -> String {
        self.0.torn_note(damage)
    }

    pub fn meta_anchor(&self) -> PathBuf {
        self.0.meta_anchor()
    }

    pub fn meta(&self) -> Result<SessionMeta, StoreError> {
        self.0.meta()
    }

    /// The layers a continued session runs with, and what to tell the user (see
    /// [`SessionMeta::patches_for`]); kept copies kept elsewhere are brought beside the anchor
    /// first, when it runs with them.
    pub fn patches_for(&self, meta: &SessionMeta, explicit: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
        if explicit.is_empty() && !meta.patches.is_empty() {
            self.0.bring_kept_files();
        }
        meta.patches_for(&self.meta_anchor(), explicit)
    }

    /// Keeps `meta` and the copies of `patches` with the session.
    pub fn keep_meta(&self, meta: &mut SessionMeta, patches: &[PatchCopy]) -> io::Result<()> {
        let anchor = self.meta_anchor();
        if let Some(folder) = anchor.parent().filter(|_| !patches.is_empty()) {
            std::fs::create_dir_all(folder)?;
        }
        meta.keep_patches(&anchor, patches)?;
        self.0.store_meta(meta)
    }

    /// Keeps a tool result's attachment (`id` its sha256) with the session as
    /// `attachment-<id>`, durably, before the event that names it is written.
    pub fn keep_attachment(&self, id: &str, bytes: &[u8]) -> io::Result<()> {
        self.0.keep_file(&format!("{ATTACHMENT_PREFIX}{id}"), bytes)
    }

    /// Takes the log's one-writer lock.
    pub fn lock(&self, local: &Path) -> Result<SessionLock, LockError> {
        self.0.lock(local)
    }
}
