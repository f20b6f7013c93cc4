//! Exclusive OS locks: one writer per session and per profile. A lock is an advisory `flock` on a
//! small file that names its holder's pid; the OS releases it when the process ends, however it
//! ends (`kill -9` included), so a lock is never left behind.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Another process holds the lock: exit code 6.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is busy: {} is writing it; try again when it is done", holder_text(*.holder))]
pub struct Busy {
    /// What is locked, as the user names it (`session 3f2a…`, `profile web`).
    pub what: String,
    pub holder: Option<u32>,
}

fn holder_text(holder: Option<u32>) -> String {
    match holder {
        Some(pid) => format!("process {pid}"),
        None => "another dsh process".to_owned(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    Busy(#[from] Busy),
    #[error("cannot lock {}: {reason}", path.display())]
    Io { path: PathBuf, reason: io::Error },
}

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
    path: PathBuf,
}

impl WriterLock {
    /// Takes the lock at `path` now, or says who holds it. `what` names the locked thing in the
    /// error.
    pub fn try_acquire(path: &Path, what: &str) -> Result<WriterLock, LockError> {
        let io_error = |reason| LockError::Io { path: path.to_owned(), reason };
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Busy { what: what.to_owned(), holder: read_holder(&mut file) }.into())
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(io_error(err)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()))
            .map_err(io_error)?;
        Ok(WriterLock { _file: file, path: path.to_owned() })
    }

    /// Takes the lock, waiting up to `patience` for its holder to finish; `waiting` is told once,
    /// with the holder, when there is a wait.
    pub fn acquire_waiting(
        path: &Path,
        what: &str,
        patience: Duration,
        waiting: impl FnOnce(&Busy),
    ) -> Result<WriterLock, LockError> {
        let deadline = Instant::now() + patience;
        let mut waiting = Some(waiting);
        loop {
            match WriterLock::try_acquire(path, what) {
                Err(LockError::Busy(busy)) if Instant::now() < deadline => {
                    if let Some(waiting) = waiting.take() {
                        waiting(&busy);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The pid a holder wrote into the lock file.
fn read_holder(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The holder of the lock at `path`, if a live process holds it (for readers, which never take
/// it: a live log's last line may still be being written).
pub fn live_holder(path: &Path) -> Option<u32> {
    let mut file = File::open(path).ok()?;
    let holder = read_holder(&mut file)?;
    // SAFETY: kill with signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(holder as libc::pid_t, 0) } == 0;
    (alive && holder != std::process::id()).then_some(holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_told_who_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.lock");
        let held = WriterLock::try_acquire(&path, "session s").unwrap();
        let err = WriterLock::try_acquire(&path, "session s").unwrap_err();
        assert!(
            matches!(&err, LockError::Busy(Busy { holder: Some(pid), .. }) if *pid == std::process::id()),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("session s is busy: process {} is writing it; try again when it is done", std::process::id())
        );
        drop(held);
        WriterLock::try_acquire(&path, "session s").expect("free again once dropped");
    }

    #[test]
    fn a_waiting_writer_gives_up_after_its_patience() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        let _held = WriterLock::try_acquire(&path, "profile p").unwrap();
        let mut told = 0;
        let err = WriterLock::acquire_waiting(&path, "profile p", Duration::from_millis(50), |_| told += 1);
        assert!(matches!(err, Err(LockError::Busy(_))));
        assert_eq!(told, 1);
    }
}
