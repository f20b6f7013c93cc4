//! Exclusive OS locks: one writer per session and per profile. A lock is an advisory `flock` on a
//! small file that names its holder's pid; the OS releases it when the process ends, however it
//! ends (`kill -9` included), so a lock is never left behind. Lock files are never opened through
//! a symbolic link, and whether a writer is live is asked of the OS's lock table, not of the pid
//! written in the file (a pid can be reused).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Another process holds the lock: exit code 6.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is busy: {} is writing it; try again when it is done", holder_text(*.holder, .host.as_deref()))]
pub struct Busy {
    /// What is locked, as the user names it (`session 3f2a…`, `profile web`).
    pub what: String,
    pub holder: Option<u32>,
    /// The machine the holder runs on, when it can be on another (a session in a database).
    pub host: Option<String>,
}

fn holder_text(holder: Option<u32>, host: Option<&str>) -> String {
    match (holder, host) {
        (Some(pid), Some(host)) => format!("process {pid} on {host}"),
        (Some(pid), None) => format!("process {pid}"),
        (None, _) => "another dsh process".to_owned(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    Busy(#[from] Busy),
    #[error("cannot lock {}: {reason}", path.display())]
    Io { path: PathBuf, reason: io::Error },
    /// The place that holds the lock (a database) cannot be reached.
    #[error("{0}")]
    Unavailable(String),
}

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct WriterLock {
    file: File,
    path: PathBuf,
    /// Remove the lock file on release (a log outside the home: nothing is left beside it).
    remove: bool,
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        // Removed while still held: a process that opened the file before sees, once it holds
        // the lock, that the path no longer names it, and opens the path again.
        if self.remove && self.still_named_by_path() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl WriterLock {
    /// Takes the lock at `path` now, or says who holds it. `what` names the locked thing in the
    /// error.
    pub fn try_acquire(path: &Path, what: &str) -> Result<WriterLock, LockError> {
        let io_error = |reason| LockError::Io { path: path.to_owned(), reason };
        let mut file = open_no_follow(path, true).map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Busy { what: what.to_owned(), holder: read_holder(&mut file), host: None }.into())
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(io_error(err)),
        }
        let mut lock = WriterLock { file, path: path.to_owned(), remove: false };
        if !lock.still_named_by_path() {
            return WriterLock::try_acquire(path, what);
        }
        lock.file
            .set_len(0)
            .and_then(|()| lock.file.rewind())
            .and_then(|()| write!(lock.file, "{}", std::process::id()))
            .map_err(io_error)?;
        Ok(lock)
    }

    /// Removes the lock file when the lock is released.
    pub fn remove_when_released(&mut self) {
        self.remove = true;
    }

    /// Whether the path still names the file this lock holds (it was not removed meanwhile).
    fn still_named_by_path(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
            _ => false,
        }
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

/// The pid a holder wrote into the lock file (what a busy writer is told).
fn read_holder(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Opens `path` for reading (and writing, creating it, with `write`) without following a
/// symbolic link: a link put in place of a state file is refused, never written through.
pub fn open_no_follow(path: &Path, write: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match opened {
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is a symbolic link; dsh never follows links for its lock and state files (remove the link)",
        )),
        Err(err) => Err(err),
        Ok(file) if !file.metadata()?.is_file() => {
            Err(io::Error::new(io::ErrorKind::InvalidInput, "it is not a regular file"))
        }
        Ok(file) => Ok(file),
    }
}

/// The process holding the lock at `path` now, if any (for readers, which never take it: a live
/// log's last line may still be being written). Asked of the kernel's lock table
/// (`/proc/locks`), so a stale pid in the file is never taken for a live writer.
pub fn live_holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok().filter(std::fs::Metadata::is_file)?;
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let device = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let held = fields.get(1) == Some(&"FLOCK")
            && fields.get(3) == Some(&"WRITE")
            && fields.get(5) == Some(&device.as_str());
        let pid = fields.get(4)?.parse::<u32>().ok()?;
        (held && pid != std::process::id()).then_some(pid)
    })
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
    fn a_lock_file_replaced_by_a_link_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let path = dir.path().join("session.jsonl.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = WriterLock::try_acquire(&path, "session s").unwrap_err();
        assert!(err.to_string().contains("it is a symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }

    #[test]
    fn a_stale_pid_in_a_lock_file_is_no_live_writer_and_a_held_lock_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.lock");
        std::fs::write(&path, "1").unwrap();
        assert_eq!(live_holder(&path), None, "pid 1 is alive but holds no lock on it");
        let mut child = std::process::Command::new("flock")
            .arg(&path)
            .args(["sleep", "30"])
            .spawn()
            .expect("flock(1) from util-linux");
        let held = (0..12_000).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            live_holder(&path).is_some()
        });
        let _ = child.kill();
        let _ = child.wait();
        assert!(held, "the child's lock was never seen");
    }

    #[test]
    fn a_lock_asked_to_go_leaves_no_file_and_can_be_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("elsewhere.jsonl.lock");
        let mut held = WriterLock::try_acquire(&path, "log").unwrap();
        held.remove_when_released();
        drop(held);
        assert!(!path.exists());
        drop(WriterLock::try_acquire(&path, "log").unwrap());
        assert!(path.exists(), "kept unless asked");
    }

    #[test]
    fn a_waiting_writer_gives_up_after_its_patience() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        let _held = WriterLock::try_acquire(&path, "profile p").unwrap();
        let mut told = 0;
        let err = WriterLock::acquire_waiting(&path, "profile p", Duration::from_secs(1), |_| told += 1);
        assert!(matches!(err, Err(LockError::Busy(_))));
        assert_eq!(told, 1);
    }
}
