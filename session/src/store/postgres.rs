//! Sessions in PostgreSQL (`DSH_SESSIONS=postgres://…`), shared by every machine that reaches
//! the database: each event stored as its exact line (a commit where the file log fsyncs), the
//! header, `dsh.json` and kept files beside it; one writer per session through an advisory lock
//! held by the writer's own connection (it dies with the process, `kill -9` included); the
//! schema migrated only by commands that write ([`schema`]). The password comes from the
//! environment only and is never part of a message.

mod connection;
pub mod schema;

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use connection::StoredLines;
pub use connection::{hostname, lock_key, parse_holder, session_key, Connection, Database, CONNECT_DEADLINE};

use super::backend::{
    created_at, sound_id, Backend, Held, Importing, Log, LogRef, OpenSinkError, SessionLock, StoreError, Tail,
};
use crate::format::Format;
use crate::import::ImportError;
use crate::locate;
use crate::lock::{Busy, LockError};
use crate::meta::SessionMeta;
use crate::reader::{LogReader, ReadError};
use crate::writer::{Line, Sink, SyncPolicy};
use crate::NotFound;

/// How many lines an import sends per statement.
const IMPORT_BATCH: usize = 5_000;

/// A PostgreSQL store, with this process's connection for reading (shared by its clones).
#[derive(Clone)]
pub struct Postgres(Arc<Parts>);

struct Parts {
    database: Database,
    reads: Connection,
    /// The home's `sessions/` folder: where kept `--patch` copies of stored sessions are put.
    local: PathBuf,
    /// Set once the database was seen to hold a dsh schema (a read of a store nothing wrote yet
    /// finds none, until another process writes to it).
    has_schema: OnceLock<()>,
    /// Set once this process brought the schema up to date (the first write does).
    migrated: OnceLock<()>,
}

impl Postgres {
    /// Connects for reading and checks the schema is not newer than this dsh's; nothing is
    /// changed.
    pub fn open(database: Database, local: PathBuf) -> Result<Postgres, StoreError> {
        let reads = database.connect()?;
        let found = schema::check_not_newer(&reads, database.shown())?;
        let (migrated, has_schema) = (OnceLock::new(), OnceLock::new());
        if found.is_some() {
            let _ = has_schema.set(());
        }
        Ok(Postgres(Arc::new(Parts { database, reads, local, has_schema, migrated })))
    }

    pub fn shown(&self) -> &str {
        self.0.database.shown()
    }

    /// Brings the schema up to date before this process's first write.
    fn for_writing(&self) -> Result<(), StoreError> {
        if self.0.migrated.get().is_none() {
            schema::migrate(&self.0.reads, self.shown())?;
            let _ = self.0.migrated.set(());
        }
        Ok(())
    }

    /// Whether anything can be read: a store nothing wrote to has no tables yet (a long-running
    /// process looks again, for another one may have written since).
    fn readable(&self) -> bool {
        if self.0.has_schema.get().is_some() || self.0.migrated.get().is_some() {
            return true;
        }
        let found = matches!(schema::version(&self.0.reads), Ok(Some(_)));
        if found {
            let _ = self.0.has_schema.set(());
        }
        found
    }

    pub fn log(&self, id: &str) -> LogRef {
        LogRef::new(Arc::new(StoredLog { store: self.clone(), id: id.to_owned() }))
    }

    /// The header line of session `id`, if it is in the store.
    fn header(&self, connection: &Connection, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_owned();
        connection.call("header", async move |client| {
            let row = client.query_opt("SELECT header FROM dsh_sessions WHERE id = $1", &[&id]).await?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn reader_on(&self, connection: &Connection, id: &str) -> Result<LogReader, ReadError> {
        let header = self.header(connection, id)?.ok_or_else(|| self.missing(id))?;
        LogReader::new(Box::new(StoredLines::new(connection.clone(), id, &header)))
    }

    fn missing(&self, id: &str) -> io::Error {
        io::Error::new(io::ErrorKind::NotFound, format!("no session {id} in {}", self.shown()))
    }
}

impl Backend for Postgres {
    fn describe(&self) -> String {
        self.shown().to_owned()
    }

    fn local_folder(&self) -> &Path {
        &self.0.local
    }

    fn find(&self, id: &str) -> Result<Option<LogRef>, NotFound> {
        if !self.readable() {
            return Ok(None);
        }
        let prefix = id.to_owned();
        let shown = locate::AMBIGUOUS_SHOWN as i64;
        let found: Result<(Vec<String>, i64), StoreError> = self.0.reads.call("session lookup", async move |client| {
            let rows = client
                .query(
                    "SELECT id, count(*) OVER () FROM dsh_sessions WHERE starts_with(id, $1) \
                     ORDER BY id = $1 DESC, id LIMIT $2",
                    &[&prefix, &shown],
                )
                .await?;
            let count = rows.first().map_or(0, |row| row.get(1));
            Ok((rows.iter().map(|row| row.get(0)).collect(), count))
        });
        let (matching, count) = found.map_err(|err| NotFound(err.to_string()))?;
        let matching: Vec<String> = matching.into_iter().filter(|id| sound_id(id)).collect();
        match matching.first() {
            Some(first) if first == id || count == 1 => Ok(Some(self.log(first))),
            None => Ok(None),
            Some(_) => Err(locate::ambiguous(id, matching, count as usize)),
        }
    }

    fn all(&self) -> Result<Vec<(f64, LogRef)>, StoreError> {
        if !self.readable() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String, i64)> = self.0.reads.call("session listing", async |client| {
            let rows = client.query("SELECT id, coalesce(created_at, 0) FROM dsh_sessions", &[]).await?;
            Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        })?;
        let kept = rows.into_iter().filter(|(id, _)| sound_id(id));
        Ok(kept.map(|(id, created)| (created as f64, self.log(&id))).collect())
    }

    fn ids(&self) -> Vec<String> {
        self.all().unwrap_or_default().iter().map(|(_, log)| log.name()).collect()
    }

    fn create(&self, id: &str, header_line: &str) -> io::Result<(LogRef, Box<dyn Sink>)> {
        self.for_writing()?;
        let writer = StoredWriter::lock(self, id).map_err(io::Error::other)?;
        writer.create(header_line)?;
        Ok((self.log(id), Box::new(StoredSink { writer, next_line: 1 })))
    }

    fn begin_import(&self, id: &str, header_line: &str) -> Result<Box<dyn Importing>, ImportError> {
        self.for_writing()?;
        let writer = StoredWriter::lock(self, id)?;
        if self.header(&writer.connection, id)?.is_some() {
            return Err(ImportError::Exists { log: self.shown().to_owned(), id: id.to_owned() });
        }
        writer.connection.execute("import", "BEGIN")?;
        writer.create(header_line)?;
        Ok(Box::new(StoredImport { writer, batch: Vec::new(), next_line: 1 }))
    }
}

/// An import into the database: one transaction, committed when the whole log is in.
struct StoredImport {
    writer: StoredWriter,
    batch: Vec<Line>,
    next_line: i64,
}

impl Importing for StoredImport {
    fn push(&mut self, line: Line) -> Result<(), ImportError> {
        self.batch.push(line);
        if self.batch.len() == IMPORT_BATCH {
            let batch = std::mem::take(&mut self.batch);
            self.writer.connection.insert_lines(&self.writer.id, self.next_line, batch)?;
            self.next_line += IMPORT_BATCH as i64;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<LogRef, ImportError> {
        let StoredImport { writer, batch, next_line } = *self;
        writer.connection.insert_lines(&writer.id, next_line, batch)?;
        writer.connection.execute("import", "COMMIT")?;
        Ok(writer.store.log(&writer.id))
    }
}

/// One stored session.
#[derive(Debug)]
struct StoredLog {
    store: Postgres,
    id: String,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.database)
    }
}

impl Log for StoredLog {
    fn name(&self) -> String {
        self.id.clone()
    }

    fn reader(&self) -> Result<LogReader, ReadError> {
        self.store.reader_on(&self.store.0.reads, &self.id)
    }

    fn lines(&self) -> Result<Box<dyn BufRead + Send>, ReadError> {
        let reads = &self.store.0.reads;
        let header = self.store.header(reads, &self.id)?.ok_or_else(|| self.store.missing(&self.id))?;
        Ok(Box::new(StoredLines::new(reads.clone(), &self.id, &header)))
    }

    /// A stored log's place is its last line's number (the header is kept apart); every new
    /// line is read, a batch at a time.
    fn lines_after(&self, tail: Tail) -> Result<(Vec<String>, Tail), ReadError> {
        let mut after = i64::try_from(tail.lines).unwrap_or(i64::MAX);
        let mut lines = Vec::new();
        loop {
            let (batch, last, complete) = self.store.0.reads.lines_after(&self.id, after)?;
            lines.extend(batch);
            after = last;
            if complete {
                return Ok((lines, Tail { bytes: 0, lines: after.max(0) as u64 }));
            }
        }
    }

    fn end(&self) -> Result<Tail, ReadError> {
        let last = self.store.0.reads.last_line(&self.id)?;
        Ok(Tail { bytes: 0, lines: last.max(0) as u64 })
    }

    fn writer(&self) -> Option<u32> {
        self.store.0.reads.session_holder(&self.id).ok().flatten().map(|(pid, _)| pid)
    }

    fn meta_anchor(&self) -> PathBuf {
        self.store.0.local.join(&self.id).join(Format::V0.log_file())
    }

    fn meta(&self) -> Result<SessionMeta, StoreError> {
        let session = self.id.clone();
        let meta: String = self.store.0.reads.call("session meta", async move |client| {
            Ok(client.query_one("SELECT meta FROM dsh_sessions WHERE id = $1", &[&session]).await?.get(0))
        })?;
        Ok(serde_json::from_str(&meta).unwrap_or_default())
    }

    /// Writes the session's kept files into the home's `sessions/<id>/`; one that cannot be
    /// written is missing there, which composing its layer then names.
    fn bring_kept_files(&self) {
        let session = self.id.clone();
        let files: Result<Vec<(String, Vec<u8>)>, StoreError> =
            self.store.0.reads.call("kept files", async move |client| {
                let rows =
                    client.query("SELECT name, content FROM dsh_session_files WHERE session = $1", &[&session]).await?;
                Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
            });
        let folder = self.store.0.local.join(&self.id);
        // A kept file's name is one plain path component, as a session id is.
        for (name, content) in files.unwrap_or_default().iter().filter(|(name, _)| locate::is_session_id(name)) {
            let _ = std::fs::create_dir_all(&folder)
                .and_then(|()| crate::fsutil::write_atomic(&folder.join(name), content));
        }
    }

    fn store_meta(&self, meta: &SessionMeta) -> io::Result<()> {
        self.store.for_writing()?;
        let folder = self.store.0.local.join(&self.id);
        let files: Vec<(String, Vec<u8>)> = meta
            .patches
            .iter()
            .filter_map(|patch| {
                let kept =
                    crate::fsutil::read_limited(&folder.join(&patch.kept), crate::fsutil::MAX_LAYER_BYTES, "a layer");
                Some((patch.kept.clone(), kept.ok()?))
            })
            .collect();
        let (session, text) = (self.id.clone(), serde_json::to_string(meta).unwrap_or_default());
        Ok(self.store.0.reads.call("session meta", async move |client| {
            let transaction = client.transaction().await?;
            transaction.execute("UPDATE dsh_sessions SET meta = $2 WHERE id = $1", &[&session, &text]).await?;
            for (name, content) in &files {
                let sql = "INSERT INTO dsh_session_files (session, name, content) VALUES ($1, $2, $3) \
                           ON CONFLICT (session, name) DO UPDATE SET content = EXCLUDED.content";
                transaction.execute(sql, &[&session, name, content]).await?;
            }
            transaction.commit().await
        })?)
    }

    fn keep_file(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.store.for_writing()?;
        let (session, name, content) = (self.id.clone(), name.to_owned(), bytes.to_vec());
        Ok(self.store.0.reads.call("kept file", async move |client| {
            let sql = "INSERT INTO dsh_session_files (session, name, content) VALUES ($1, $2, $3) \
                       ON CONFLICT (session, name) DO NOTHING";
            client.execute(sql, &[&session, &name, &content]).await.map(|_| ())
        })?)
    }

    fn lock(&self, _local: &Path) -> Result<SessionLock, LockError> {
        self.store.for_writing().map_err(|err| LockError::Unavailable(err.to_string()))?;
        Ok(SessionLock(Box::new(StoredWriter::lock(&self.store, &self.id)?)))
    }
}

/// The writer of a stored session: a connection of its own that holds the session's advisory
/// lock for as long as it lives (a `kill -9`ed writer's connection, and lock, die with it).
struct StoredWriter {
    store: Postgres,
    connection: Connection,
    id: String,
}

impl std::fmt::Debug for StoredWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writer of {} in {:?}", self.id, self.store)
    }
}

impl StoredWriter {
    /// Connects and takes session `id`'s advisory lock, or says who holds it.
    fn lock(store: &Postgres, id: &str) -> Result<StoredWriter, LockError> {
        let unavailable = |err: StoreError| LockError::Unavailable(err.to_string());
        let connection = store.0.database.connect().map_err(unavailable)?;
        match connection.try_lock_session(id).map_err(unavailable)? {
            None => Ok(StoredWriter { store: store.clone(), connection, id: id.to_owned() }),
            Some(holder) => Err(LockError::Busy(Busy {
                what: format!("session {id}"),
                holder: holder.as_ref().map(|(pid, _)| *pid),
                host: holder.map(|(_, host)| host),
            })),
        }
    }

    /// The number the next line gets (the header is line 0).
    fn next_line(&self) -> Result<i64, StoreError> {
        let id = self.id.clone();
        self.connection.call("line count", async move |client| {
            let row = client
                .query_one("SELECT coalesce(max(line), 0) + 1 FROM dsh_events WHERE session = $1", &[&id])
                .await?;
            Ok(row.get(0))
        })
    }

    /// Stores a new session's header; fails when the id is taken.
    fn create(&self, header: &str) -> Result<(), StoreError> {
        let (id, header, created) = (self.id.clone(), header.to_owned(), created_at(header) as i64);
        self.connection.call("create", async move |client| {
            client
                .execute(
                    "INSERT INTO dsh_sessions (id, created_at, header) VALUES ($1, $2, $3)",
                    &[&id, &created, &header],
                )
                .await?;
            Ok(())
        })
    }
}

impl Held for StoredWriter {
    fn open(self: Box<Self>) -> Result<(LogReader, Box<dyn Sink>), OpenSinkError> {
        let reader = self.store.reader_on(&self.connection, &self.id).map_err(OpenSinkError::Read)?;
        let next_line = self.next_line().map_err(|err| OpenSinkError::Io(err.into()))?;
        Ok((reader, Box::new(StoredSink { writer: *self, next_line })))
    }

    /// One statement removes the session's lines, files and row, through the connection that
    /// holds its lock; then its local folder (the kept copies) goes.
    fn delete(self: Box<Self>) -> io::Result<()> {
        let id = self.id.clone();
        self.connection.call("delete", async move |client| {
            client
                .execute(
                    "WITH lines AS (DELETE FROM dsh_events WHERE session = $1), \
                          files AS (DELETE FROM dsh_session_files WHERE session = $1) \
                     DELETE FROM dsh_sessions WHERE id = $1",
                    &[&id],
                )
                .await?;
            Ok(())
        })?;
        // The session is gone from the store now; copies left on this machine are only a warning.
        let local = self.store.0.local.join(&self.id);
        match std::fs::remove_dir_all(&local) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                tracing::warn!(
                    "session {} is deleted, but not its local copies in {}: {err}",
                    self.id,
                    local.display()
                );
            }
            _ => {}
        }
        Ok(())
    }
}

/// A stored session's new lines, each commit one statement through the writer's connection.
struct StoredSink {
    writer: StoredWriter,
    next_line: i64,
}

impl Sink for StoredSink {
    fn name(&self) -> String {
        self.writer.id.clone()
    }

    fn write(&mut self, lines: Vec<Line>, _policy: SyncPolicy) -> Result<(), String> {
        let count = lines.len() as i64;
        self.writer.connection.insert_lines(&self.writer.id, self.next_line, lines).map_err(|err| err.to_string())?;
        self.next_line += count;
        Ok(())
    }

    fn in_service(&self) -> bool {
        true
    }
}
