//! An older generation's log (v0–v3) upgraded to format v4 beside it, under its writer lock, as
//! DeepSeek Harness 0.2 publishes it: `dsh session migrate` does it to a v0 log, and continuing
//! a v1–v3 log does it first, as 0.2's write-open does.
//!
//! The v4 log ([`crate::migrate`]) is written to a staging file in the session's folder and
//! linked in as `session.v4.jsonl` only once it is complete and synced (never over one already
//! there); the original stays where it was, byte for byte. The session then reads as v4 (the
//! newest generation in a folder is the session's), and removing that file goes back to the
//! original.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::format::Format;
use crate::fsutil;
use crate::lock::LockError;
use crate::migrate::{self, Counts, MigrateError};
use crate::reader::{open_lines, LogReader, ReadError};
use crate::store::{LogRef, SessionLock};

/// A published v4 log.
#[derive(Debug)]
pub struct Upgraded {
    /// The v4 log written.
    pub path: PathBuf,
    pub counts: Counts,
}

/// Why a log was not upgraded; nothing was published.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("{log}: it is format v4 already; only older logs are migrated")]
    Current { log: String },
    #[error("{log}: it is stored in a database; migrate works on a sessions folder of files")]
    NotAFile { log: String },
    #[error("{log}: {path} already exists; the session was migrated before")]
    Exists { log: String, path: String },
    #[error("{log}: {reason}; dsh session repair {id} first")]
    Damaged { log: String, id: String, reason: MigrateError },
    #[error("{log}: {reason}")]
    Refused { log: String, reason: MigrateError },
    #[error("{log}: {reason}")]
    Read { log: String, reason: ReadError },
    #[error("{log}: {reason}")]
    Io { log: String, reason: io::Error },
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Upgrades the older log `log`, whose writer lock is `lock`, to v4 beside it.
pub fn to_v4(log: &LogRef, lock: SessionLock) -> Result<Upgraded, UpgradeError> {
    let name = log.name();
    let io_error = |reason| UpgradeError::Io { log: name.clone(), reason };
    let path = log.file_path().ok_or_else(|| UpgradeError::NotAFile { log: name.clone() })?.to_owned();
    let _held = lock;
    let read = |reason| UpgradeError::Read { log: name.clone(), reason };
    let mut source = LogReader::source(open_lines(&path).map_err(|err| read(err.into()))?).map_err(read)?;
    if source.generation() == Format::V4.version() {
        return Err(UpgradeError::Current { log: name });
    }
    let folder = path.parent().unwrap_or(Path::new("."));
    let target = folder.join(Format::V4.log_file());
    let exists = || UpgradeError::Exists { log: name.clone(), path: target.display().to_string() };
    if target.exists() {
        return Err(exists());
    }
    let mut staged = fsutil::temp_file_in(folder, ".dsh-migrate-").map_err(io_error)?;
    let mut out = io::BufWriter::new(staged.as_file_mut());
    let counts = migrate::write_v4(&mut source, &mut out).map_err(|reason| match reason {
        MigrateError::Damaged(_) => UpgradeError::Damaged { log: name.clone(), id: log.id(), reason },
        MigrateError::Io(reason) => io_error(reason),
        reason => UpgradeError::Refused { log: name.clone(), reason },
    })?;
    out.flush().map_err(io_error)?;
    drop(out);
    staged.as_file().sync_all().map_err(io_error)?;
    std::fs::hard_link(staged.path(), &target).map_err(|err| match err.kind() {
        io::ErrorKind::AlreadyExists => exists(),
        _ => io_error(err),
    })?;
    fsutil::sync_dir(folder).map_err(io_error)?;
    Ok(Upgraded { path: target, counts })
}

/// The log to continue for `log`: a v1–v3 log is upgraded to v4 beside it first (see [`to_v4`])
/// and the v4 log is continued, under its own lock, as 0.2 continues it; any other is `log`.
pub fn for_writing(log: &LogRef, lock: SessionLock) -> Result<(LogRef, SessionLock), UpgradeError> {
    let generation = log.file_path().and_then(|path| LogReader::source(open_lines(path).ok()?).ok());
    if !generation.is_some_and(|source| crate::format::MIGRATED_GENERATIONS.contains(&source.generation())) {
        return Ok((log.clone(), lock));
    }
    let upgraded = to_v4(log, lock)?;
    let v4 = LogRef::file(upgraded.path);
    let local = v4.file_path().and_then(Path::parent).and_then(Path::parent).unwrap_or(Path::new(".")).to_owned();
    let lock = v4.lock(&local)?;
    Ok((v4, lock))
}
