//! Sessions as files: `sessions/<id>/session.jsonl` under the home (or DeepSeek Harness's
//! `session.jsonl.zstd`, read-only), `dsh.json` and the kept files beside it, one writer per log
//! through an OS lock beside it (`session.jsonl.lock`), every line fsynced when committed.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::backend::{
    created_at, lines_counted_after, Backend, Held, Importing, Log, LogRef, OpenSinkError, SessionLock, StoreError,
    Tail,
};
use crate::format::Format;
use crate::fsutil;
use crate::import::ImportError;
use crate::locate;
use crate::lock::{live_holder, LockError, WriterLock};
use crate::meta::SessionMeta;
use crate::reader::{is_compressed, Damage, LogReader, ReadError};
use crate::writer::{Line, Sink, SyncPolicy};
use crate::NotFound;

/// Logs under this `sessions/` folder.
pub struct Files {
    sessions: PathBuf,
}

impl Files {
    pub fn new(sessions: PathBuf) -> Files {
        Files { sessions }
    }
}

impl Backend for Files {
    fn describe(&self) -> String {
        self.sessions.display().to_string()
    }

    fn local_folder(&self) -> &Path {
        &self.sessions
    }

    fn files_folder(&self) -> Option<&Path> {
        Some(&self.sessions)
    }

    fn find(&self, id: &str) -> Result<Option<LogRef>, NotFound> {
        Ok(locate::find_by_id(&self.sessions, id)?.map(LogRef::file))
    }

    fn all(&self) -> Result<Vec<(f64, LogRef)>, StoreError> {
        let logs = locate::session_ids(&self.sessions)
            .into_iter()
            .filter_map(|id| locate::find_log(&self.sessions.join(id)).map(LogRef::file));
        Ok(logs.map(|log| (log.reader().ok().map_or(0.0, |reader| created_at(reader.header())), log)).collect())
    }

    fn ids(&self) -> Vec<String> {
        locate::session_ids(&self.sessions)
    }

    fn create(&self, id: &str, header_line: &str) -> io::Result<(LogRef, Box<dyn Sink>)> {
        let dir = self.sessions.join(id);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(log_file(header_line));
        let lock = locate::lock_file(&path).map_err(io::Error::other)?;
        if !fsutil::create_atomic(&path, format!("{header_line}\n").as_bytes())? {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} already exists", path.display())));
        }
        fsutil::sync_dir(&self.sessions)?;
        let file = OpenOptions::new().read(true).append(true).open(&path)?;
        Ok((LogRef::file(path.clone()), Box::new(FileSink { path, file, _lock: lock })))
    }

    fn begin_import(&self, id: &str, header_line: &str) -> Result<Box<dyn Importing>, ImportError> {
        let sessions = &self.sessions;
        if sessions.exists() && !sessions.is_dir() {
            return Err(ImportError::SessionsNotAFolder(sessions.to_owned()));
        }
        let dir = sessions.join(id);
        if dir.exists() {
            let log = locate::find_log(&dir).unwrap_or_else(|| dir.join(log_file(header_line)));
            return Err(ImportError::Exists { log: log.display().to_string(), id: id.to_owned() });
        }
        std::fs::create_dir_all(sessions)?;
        let staged = fsutil::temp_file_in(sessions, ".dsh-import-")?;
        let mut out = BufWriter::new(staged.reopen()?);
        writeln!(out, "{header_line}")?;
        let file = log_file(header_line);
        Ok(Box::new(FileImport { sessions: sessions.clone(), id: id.to_owned(), file, staged, out }))
    }
}

/// An import into files: the copy is written beside the sessions, fsynced, then moved into a new
/// `sessions/<id>/` folder — a crash leaves the old state or the whole copy, and an existing
/// session is never overwritten.
struct FileImport {
    sessions: PathBuf,
    id: String,
    file: &'static str,
    staged: tempfile::NamedTempFile,
    out: BufWriter<File>,
}

impl Importing for FileImport {
    fn push(&mut self, line: Line) -> Result<(), ImportError> {
        self.out.write_all(line.body.as_bytes())?;
        Ok(self.out.write_all(b"\n")?)
    }

    fn finish(self: Box<Self>) -> Result<LogRef, ImportError> {
        let FileImport { sessions, id, file, staged, mut out } = *self;
        out.flush()?;
        drop(out);
        staged.as_file().sync_all()?;
        let dir = sessions.join(&id);
        let log = dir.join(file);
        match std::fs::create_dir(&dir) {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Err(ImportError::Exists { log: log.display().to_string(), id })
            }
            other => other?,
        }
        staged.persist_noclobber(&log).map_err(|err| err.error)?;
        fsutil::sync_dir(&dir)?;
        fsutil::sync_dir(&sessions)?;
        Ok(LogRef::file(log))
    }
}

/// The file a log of this header is kept in: its format's name, plain (dsh writes no zstd).
fn log_file(header_line: &str) -> &'static str {
    Format::of_header(header_line).unwrap_or(Format::V0).log_file()
}

impl LogRef {
    /// The log file at `path`, wherever it is.
    pub fn file(path: PathBuf) -> LogRef {
        LogRef::new(std::sync::Arc::new(FileLog(path)))
    }
}

/// A log file, anywhere.
#[derive(Debug)]
pub struct FileLog(pub PathBuf);

impl FileLog {
    /// Whether the file is of a generation (v1–v3) the reader migrates to v4.
    fn is_migrated_on_read(&self) -> bool {
        let name = self.0.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        let name = name.strip_suffix(".zstd").unwrap_or(name);
        (1..4).any(|generation| name == crate::format::generation_log_file(generation))
    }

    /// The file, and whether it is compressed.
    fn open_checked(&self) -> io::Result<(File, bool)> {
        let mut file = fsutil::open_regular(&self.0)?;
        let mut magic = [0u8; 4];
        let read = file.read(&mut magic)?;
        Ok((file, is_compressed(&magic[..read])))
    }
}

impl Log for FileLog {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn file(&self) -> Option<&Path> {
        Some(&self.0)
    }

    fn reader(&self) -> Result<LogReader, ReadError> {
        crate::migrate::open(&self.0)
    }

    fn lines(&self) -> Result<Box<dyn BufRead + Send>, ReadError> {
        Ok(crate::reader::open_lines(&self.0)?)
    }

    /// A plain file is read from the byte after the last complete line read; a compressed one,
    /// counted again only when its size changed (DeepSeek Harness 0.2 appends frames). A v1–v3
    /// log has nothing new: it is never appended to (continuing it publishes a v4 log beside it),
    /// and its readers see it migrated, not as its lines.
    fn lines_after(&self, tail: Tail) -> Result<(Vec<String>, Tail), ReadError> {
        if self.is_migrated_on_read() {
            return Ok((Vec::new(), tail));
        }
        let (mut file, compressed) = self.open_checked()?;
        let length = file.metadata()?.len();
        if compressed {
            if tail.lines > 0 && tail.bytes == length {
                return Ok((Vec::new(), tail));
            }
            let (lines, tail) = lines_counted_after(self.lines()?, tail)?;
            return Ok((lines, Tail { bytes: length, ..tail }));
        }
        if length <= tail.bytes {
            return Ok((Vec::new(), tail));
        }
        file.seek(SeekFrom::Start(tail.bytes))?;
        let mut bytes = Vec::new();
        file.take(length - tail.bytes).read_to_end(&mut bytes)?;
        let complete = bytes.iter().rposition(|byte| *byte == b'\n').map_or(0, |end| end + 1);
        let lines = bytes[..complete].split(|byte| *byte == b'\n').filter(|line| !line.is_empty());
        let lines = lines.map(|line| String::from_utf8_lossy(line).into_owned()).collect();
        Ok((lines, Tail { bytes: tail.bytes + complete as u64, lines: 0 }))
    }

    /// A plain file ends after its last newline: only the torn tail is read, backwards.
    fn end(&self) -> Result<Tail, ReadError> {
        let (mut file, compressed) = self.open_checked()?;
        if compressed || self.is_migrated_on_read() {
            return Ok(self.lines_after(Tail::default())?.1);
        }
        let mut end = file.metadata()?.len();
        let mut block = vec![0u8; 64 * 1024];
        while end > 0 {
            let start = end.saturating_sub(block.len() as u64);
            file.seek(SeekFrom::Start(start))?;
            let read = &mut block[..(end - start) as usize];
            file.read_exact(read)?;
            if let Some(newline) = read.iter().rposition(|byte| *byte == b'\n') {
                return Ok(Tail { bytes: start + newline as u64 + 1, lines: 0 });
            }
            end = start;
        }
        Ok(Tail::default())
    }

    fn writer(&self) -> Option<u32> {
        live_holder(&locate::lock_path(&self.0))
    }

    fn torn_note(&self, damage: &Damage) -> String {
        locate::torn_note(&self.0, damage)
    }

    fn meta_anchor(&self) -> PathBuf {
        self.0.clone()
    }

    fn meta(&self) -> Result<SessionMeta, StoreError> {
        Ok(SessionMeta::read(&self.0))
    }

    fn store_meta(&self, meta: &SessionMeta) -> io::Result<()> {
        meta.write(&self.0)
    }

    fn keep_file(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        fsutil::create_atomic(&self.0.with_file_name(name), bytes).map(|_| ())
    }

    fn lock(&self, local: &Path) -> Result<SessionLock, LockError> {
        let mut lock = locate::lock_file(&self.0)?;
        if !self.0.starts_with(local) {
            lock.remove_when_released();
        }
        Ok(SessionLock(Box::new(HeldFile { path: self.0.clone(), lock })))
    }
}

/// A log file's writer lock, held.
#[derive(Debug)]
struct HeldFile {
    path: PathBuf,
    lock: WriterLock,
}

/// What a session folder is renamed to while it is removed: no longer a session id, so no
/// reader lists it, and removed by the next deletion if a crash cut this one short.
const DELETING_PREFIX: &str = ".deleting-";

impl HeldFile {
    /// Renames the session's folder out of the way, then removes it and any a crash left.
    fn remove_folder(&self) -> io::Result<()> {
        let folder = self
            .path
            .parent()
            .filter(|dir| dir.file_name().and_then(|name| name.to_str()).is_some_and(locate::is_session_id));
        let (Some(folder), Some(sessions)) = (folder, folder.and_then(Path::parent)) else {
            return Err(io::Error::other(format!("{} is not in a session folder of the home", self.path.display())));
        };
        let away =
            sessions.join(format!("{DELETING_PREFIX}{}", folder.file_name().unwrap_or_default().to_string_lossy()));
        remove_if_there(&away)?;
        std::fs::rename(folder, &away)?;
        fsutil::sync_dir(sessions)?;
        remove_if_there(&away)?;
        for entry in std::fs::read_dir(sessions)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(DELETING_PREFIX) {
                // Another deletion may be removing it now.
                let _ = remove_if_there(&entry.path());
            }
        }
        Ok(())
    }
}

/// Removes the folder at `path`; one already gone is fine.
fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl Held for HeldFile {
    fn open(self: Box<Self>) -> Result<(LogReader, Box<dyn Sink>), OpenSinkError> {
        let HeldFile { path, lock } = *self;
        let mut start = [0u8; 4];
        let read = File::open(&path).and_then(|mut file| file.read(&mut start)).map_err(OpenSinkError::Io)?;
        if is_compressed(&start[..read]) {
            return Err(OpenSinkError::Compressed);
        }
        let reader = LogReader::open(&path).map_err(OpenSinkError::Read)?;
        let file = OpenOptions::new().read(true).append(true).open(&path).map_err(OpenSinkError::Io)?;
        Ok((reader, Box::new(FileSink { path, file, _lock: lock })))
    }

    fn delete(self: Box<Self>) -> io::Result<()> {
        self.remove_folder()
    }
}

/// Lines appended to a log file, then fsynced, under its writer lock.
struct FileSink {
    path: PathBuf,
    file: File,
    _lock: WriterLock,
}

impl Sink for FileSink {
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn write(&mut self, lines: Vec<Line>, policy: SyncPolicy) -> Result<(), String> {
        let mut bytes = Vec::with_capacity(lines.iter().map(|line| line.body.len() + 1).sum());
        for line in &lines {
            bytes.extend_from_slice(line.body.as_bytes());
            bytes.push(b'\n');
        }
        self.file
            .write_all(&bytes)
            .and_then(|()| match policy {
                SyncPolicy::Durable => self.file.sync_data(),
                SyncPolicy::Unsynced => Ok(()),
            })
            .map_err(|err| err.to_string())
    }

    fn file(&mut self) -> Option<&mut File> {
        Some(&mut self.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_reads_only_what_was_appended_and_never_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, "header\none\n").unwrap();
        let log = FileLog(path.clone());
        let at = |bytes: u64| Tail { bytes, lines: 0 };
        let (lines, tail) = log.lines_after(Tail::default()).unwrap();
        assert_eq!((lines, tail), (vec!["header".to_owned(), "one".to_owned()], at(11)));
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"two\nthr").unwrap();
        assert_eq!(log.end().unwrap(), at(15), "the end is after the last complete line");
        assert_eq!(log.lines_after(tail).unwrap(), (vec!["two".to_owned()], at(15)));
        file.write_all(b"ee\n").unwrap();
        assert_eq!(log.lines_after(at(15)).unwrap(), (vec!["three".to_owned()], at(21)));
        assert_eq!(log.lines_after(at(21)).unwrap(), (Vec::new(), at(21)));
        assert_eq!(log.end().unwrap(), at(21));
    }

    #[test]
    fn the_end_of_a_file_whose_last_line_is_longer_than_a_block_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let long = "x".repeat(200 * 1024);
        std::fs::write(&path, format!("header\n{long}\n{long}")).unwrap();
        let end = FileLog(path).end().unwrap();
        assert_eq!(end, Tail { bytes: 7 + long.len() as u64 + 1, lines: 0 });
        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, "torn").unwrap();
        assert_eq!(FileLog(empty).end().unwrap(), Tail::default());
    }

    #[test]
    fn a_compressed_log_is_followed_by_its_line_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        std::fs::write(&path, zstd::encode_all(&b"header\none\ntwo\n"[..], 3).unwrap()).unwrap();
        let log = FileLog(path);
        let read_two = Tail { bytes: 0, lines: 2 };
        let (lines, tail) = log.lines_after(read_two).unwrap();
        assert_eq!(lines, ["two"]);
        assert_eq!(log.lines_after(tail).unwrap(), (Vec::new(), tail), "an unchanged file is not read again");
        assert_eq!(log.end().unwrap(), tail);
    }
}
