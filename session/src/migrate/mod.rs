//! `dsh session migrate`: a v0 log (plain or DeepSeek Harness's zstd) rewritten as format v4
//! beside it, under its writer lock.
//!
//! The events are migrated as DeepSeek Harness 0.2 migrates them ([`v0_to_v4`]: same events,
//! same times, same bytes where its are deterministic) and each passes the v4 gate on its way in,
//! so a log that migrates is a sound v4 log, and one that cannot is refused at its line. The v4 log is built in a staging folder and linked in as `session.v4.jsonl` only once it is
//! complete and synced; the v0 file stays where it was, untouched. The session then reads as v4
//! (its v4 file comes first), and removing that file goes back to v0.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod v0_to_v4;
use v0_to_v4::Migration;

use crate::format::Format;
use crate::fsutil;
use crate::log::SessionLog;
use crate::reader::{Damage, LogReader, ReadError};
use crate::store::{LogRef, SessionLock, SessionStore};
use crate::writer::SyncPolicy;

/// A finished migration.
#[derive(Debug)]
pub struct Migrated {
    /// The v4 log written.
    pub path: PathBuf,
    /// Events read from the v0 log.
    pub read: u64,
    /// Events in the v4 log (v4's system head and prompt changes are events of their own).
    pub written: u64,
}

/// Why a log was not migrated; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{log}: it is format {format}; only v0 logs are migrated")]
    NotV0 { log: String, format: Format },
    #[error("{log}: it is stored in a database; migrate works on a sessions folder of files")]
    NotAFile { log: String },
    #[error("{log}: {path} already exists; the session was migrated before")]
    Exists { log: String, path: String },
    #[error("{log}: {damage}; dsh session repair {id} first")]
    Damaged { log: String, id: String, damage: Damage },
    #[error("{log}: line {line}: {event_type} cannot be migrated to v4: {reason}")]
    Refused { log: String, line: u64, event_type: String, reason: String },
    #[error("{log}: {reason}")]
    Read { log: String, reason: ReadError },
    #[error("{log}: {reason}")]
    Io { log: String, reason: io::Error },
}

/// Migrates the v0 log `log`, whose writer lock is `lock`, to v4 beside it.
pub fn to_v4(log: &LogRef, lock: SessionLock, now_ms: u64) -> Result<Migrated, MigrateError> {
    let name = log.name();
    let io_error = |reason| MigrateError::Io { log: name.clone(), reason };
    let path = log.file_path().ok_or_else(|| MigrateError::NotAFile { log: name.clone() })?.to_owned();
    let _held = lock;
    let mut reader = log.reader().map_err(|reason| MigrateError::Read { log: name.clone(), reason })?;
    if reader.format() != Format::V0 {
        return Err(MigrateError::NotV0 { log: name, format: reader.format() });
    }
    let folder = path.parent().unwrap_or(Path::new("."));
    let target = folder.join(Format::V4.log_file());
    if target.exists() {
        return Err(MigrateError::Exists { log: name, path: target.display().to_string() });
    }
    let sessions = folder.parent().unwrap_or(Path::new("."));
    let staging = tempfile::Builder::new().prefix(".dsh-migrate-").tempdir_in(sessions).map_err(io_error)?;
    let mut v4 = create_v4(&staging, &reader, &log.id(), now_ms).map_err(io_error)?;
    let read = copy_events(&mut reader, &mut v4, &name, &log.id())?;
    v4.commit().map_err(|err| io_error(io::Error::other(err.to_string())))?;
    let written = v4.rules().next_seq();
    let staged = v4.location().file_path().map(Path::to_owned).unwrap_or_default();
    drop(v4);
    std::fs::hard_link(&staged, &target).map_err(|err| match err.kind() {
        io::ErrorKind::AlreadyExists => MigrateError::Exists { log: name.clone(), path: target.display().to_string() },
        _ => io_error(err),
    })?;
    fsutil::sync_dir(folder).map_err(io_error)?;
    Ok(Migrated { path: target, read, written })
}

/// The v4 log in `staging`, with the v0 header's id, creation time, folder and depth.
fn create_v4(staging: &tempfile::TempDir, reader: &LogReader, id: &str, now_ms: u64) -> io::Result<SessionLog> {
    let old: Value = serde_json::from_str(reader.header()).unwrap_or_default();
    let created_at = old.get("createdAt").and_then(Value::as_u64).unwrap_or(now_ms);
    let mut header = Format::V4.new_header(id, created_at, old.get("cwd").and_then(Value::as_str));
    if let Some(depth) = old.get("delegationDepth") {
        header["delegationDepth"] = depth.clone();
    }
    let store = SessionStore::files(staging.path().to_owned());
    SessionLog::create(&store, id, &header, |_| Vec::new(), SyncPolicy::Durable)
}

/// Appends every event of `reader` to `v4`, migrated; returns how many were read.
fn copy_events(reader: &mut LogReader, v4: &mut SessionLog, log: &str, id: &str) -> Result<u64, MigrateError> {
    let mut migration = Migration::new(id);
    let mut read = 0;
    while let Some(next) = reader.next_event() {
        let event = next
            .map_err(|err| MigrateError::Read { log: log.to_owned(), reason: err.into() })?
            .map_err(|damage| MigrateError::Damaged { log: log.to_owned(), id: id.to_owned(), damage })?;
        let refused = |reason: String| MigrateError::Refused {
            log: log.to_owned(),
            line: event.at.line,
            event_type: event.event_type.to_owned(),
            reason,
        };
        for shaped in migration.take(&event).map_err(refused)? {
            v4.append_as_shaped(shaped.as_new_event(), shaped.time).map_err(|err| refused(err.to_string()))?;
        }
        read += 1;
    }
    Ok(read)
}
