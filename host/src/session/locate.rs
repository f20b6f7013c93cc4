//! Where session logs are — `sessions/<id>/session.jsonl` under the home (or DeepSeek Harness's
//! compressed `session.jsonl.zstd`), found by session id or by path — and who writes them.

use std::path::{Path, PathBuf};

use super::reader::Damage;
use crate::lock::live_holder;
use crate::NotFound;

pub const LOG_FILE: &str = "session.jsonl";
pub const COMPRESSED_LOG_FILE: &str = "session.jsonl.zstd";
/// What a session id is, for messages.
pub const SESSION_ID_RULE: &str = "1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit";

/// Whether `id` can name a session: what dsh creates (a UUID) and DeepSeek Harness creates, and
/// nothing that a terminal or a shell reads as more than a name.
pub fn is_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The log of a session to continue: an id names a session under `sessions` (never a file in the
/// current folder); a value with a path separator is a path (a log file or session directory).
pub fn session_log(sessions: &Path, value: &str) -> Result<PathBuf, NotFound> {
    if value.contains(['/', '\\']) {
        return resolve_log(sessions, value);
    }
    find_log(&sessions.join(value)).ok_or_else(|| {
        NotFound(format!(
            "no session {value} under {} (give a path, with a '/', for a log elsewhere)",
            sessions.display()
        ))
    })
}

/// The log in a session directory: `session.jsonl`, or DeepSeek Harness's compressed
/// `session.jsonl.zstd`.
pub fn find_log(dir: &Path) -> Option<PathBuf> {
    [LOG_FILE, COMPRESSED_LOG_FILE].iter().map(|file| dir.join(file)).find(|path| path.is_file())
}

/// The file whose OS lock says who writes the log at `log` (see [`crate::lock`]).
pub fn lock_path(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    log.with_file_name(name)
}

/// A log named by path (a file, or a session directory) or by session id under `sessions`.
pub fn resolve_log(sessions: &Path, name: &str) -> Result<PathBuf, NotFound> {
    let path = Path::new(name);
    if path.is_file() {
        return Ok(path.to_owned());
    }
    if path.is_dir() {
        return find_log(path).ok_or_else(|| NotFound(format!("{name}: no session.jsonl in this directory")));
    }
    if !name.contains(['/', '\\']) {
        if let Some(found) = find_log(&sessions.join(name)) {
            return Ok(found);
        }
    }
    Err(NotFound(format!("{name}: no such log file, and no session of that id under {}", sessions.display())))
}

/// How a reader names a torn last line: the line a live writer is still writing, or a crash
/// artefact.
pub fn torn_note(log: &Path, damage: &Damage) -> String {
    match live_holder(&lock_path(log)) {
        Some(pid) => format!("{}: the last line is still being written by process {pid}", damage.position()),
        None => damage.to_string(),
    }
}
