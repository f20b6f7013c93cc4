//! Where session logs are — `sessions/<id>/session.jsonl` under the home (or DeepSeek Harness's
//! compressed `session.jsonl.zstd`), found by session id or by path — and who writes them.

use std::path::{Path, PathBuf};

use super::format;
use super::reader::Damage;
use crate::lock::{live_holder, LockError, WriterLock};
use crate::NotFound;

/// What a session folder holds a log as, for messages.
pub const LOG_FILES: &str = "session.jsonl, session.v1.jsonl … session.v4.jsonl or their .zstd";
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
    find_by_id(sessions, value)?.ok_or_else(|| {
        NotFound(format!(
            "no session {value} under {} (give a path, with a '/', for a log elsewhere)",
            sessions.display()
        ))
    })
}

/// How many matching ids an ambiguous prefix's message lists.
pub const AMBIGUOUS_SHOWN: usize = 8;

/// The log of the session `id` names under `sessions`: the session of that id, else the one
/// session whose id starts with it, as git takes a commit's prefix. A prefix several sessions
/// start with is an error listing them.
pub fn find_by_id(sessions: &Path, id: &str) -> Result<Option<PathBuf>, NotFound> {
    if let Some(found) = is_session_id(id).then(|| find_log(&sessions.join(id))).flatten() {
        return Ok(Some(found));
    }
    let matching = session_ids(sessions).into_iter().filter(|name| name.starts_with(id)).collect::<Vec<_>>();
    match matching.len() {
        0 => Ok(None),
        1 => Ok(find_log(&sessions.join(&matching[0]))),
        count => Err(ambiguous(id, matching, count)),
    }
}

/// The error for a prefix that `count` sessions' ids start with, naming the first of `matching`.
pub fn ambiguous(id: &str, mut matching: Vec<String>, count: usize) -> NotFound {
    matching.sort();
    let more = if count > AMBIGUOUS_SHOWN { ", …" } else { "" };
    matching.truncate(AMBIGUOUS_SHOWN);
    NotFound(format!(
        "session id {id} is ambiguous: {count} sessions start with it ({}{more}); give more of it",
        matching.join(", ")
    ))
}

/// The ids of the sessions under `sessions` that have a log, in no particular order.
pub fn session_ids(sessions: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(sessions) else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| is_session_id(name) && find_log(&sessions.join(name)).is_some())
        .collect()
}

/// The log in a session directory: its generation's file, plain or compressed (DeepSeek
/// Harness's `.zstd`); where a folder holds two generations, as DeepSeek Harness 0.2 leaves one
/// it migrated, the newest wins.
pub fn find_log(dir: &Path) -> Option<PathBuf> {
    format::generations_newest_first()
        .map(format::generation_log_file)
        .flat_map(|file| [dir.join(&file), dir.join(format!("{file}.zstd"))])
        .find(|path| path.is_file())
}

/// The file whose OS lock says who writes the log at `log` (see [`crate::lock`]).
pub fn lock_path(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    log.with_file_name(name)
}

/// Takes the one-writer lock of the log file at `path` (`session.jsonl.lock` beside it), or
/// says which process holds it.
pub fn lock_file(path: &Path) -> Result<WriterLock, LockError> {
    let session = path
        .parent()
        .and_then(Path::file_name)
        .map_or_else(|| path.display().to_string(), |dir| dir.to_string_lossy().into_owned());
    WriterLock::try_acquire(&lock_path(path), &format!("session {session}"))
}

/// A log named by path (a file, or a session directory) or by session id under `sessions`.
pub fn resolve_log(sessions: &Path, name: &str) -> Result<PathBuf, NotFound> {
    let path = Path::new(name);
    if path.is_file() {
        return Ok(path.to_owned());
    }
    if path.is_dir() {
        return find_log(path)
            .ok_or_else(|| NotFound(format!("{name}: no session log ({LOG_FILES}) in this directory")));
    }
    if !name.contains(['/', '\\']) {
        if let Some(found) = find_by_id(sessions, name)? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    fn sessions(ids: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for id in ids {
            std::fs::create_dir_all(dir.path().join(id)).unwrap();
            std::fs::write(dir.path().join(id).join(Format::V0.log_file()), "").unwrap();
        }
        dir
    }

    #[test]
    fn a_unique_prefix_names_its_session_and_a_whole_id_wins_over_longer_ones() {
        let dir = sessions(&["764d9a22-aa", "81ff", "81ff0"]);
        let found = find_by_id(dir.path(), "764d").unwrap().unwrap();
        assert_eq!(found, dir.path().join("764d9a22-aa").join(Format::V0.log_file()));
        assert_eq!(
            find_by_id(dir.path(), "81ff").unwrap().unwrap(),
            dir.path().join("81ff").join(Format::V0.log_file())
        );
        assert_eq!(find_by_id(dir.path(), "9").unwrap(), None);
    }

    #[test]
    fn an_ambiguous_prefix_lists_the_sessions_it_starts() {
        let dir = sessions(&["ab1", "ab2", "cd"]);
        let error = find_by_id(dir.path(), "ab").unwrap_err();
        assert_eq!(error.0, "session id ab is ambiguous: 2 sessions start with it (ab1, ab2); give more of it");
    }

    #[test]
    fn a_folder_without_a_log_is_not_a_session() {
        let dir = sessions(&["ab1"]);
        std::fs::create_dir_all(dir.path().join("ab2")).unwrap();
        assert!(find_by_id(dir.path(), "ab").unwrap().is_some());
    }
}
