//! Where a home keeps its session logs: files under `sessions/` (the default) or a PostgreSQL
//! database any machine can reach, set by `DSH_SESSIONS` or by `sessions.toml` in the home — and
//! how a log is named, found, read, locked and described on either.

pub mod postgres;

use crate::fsutil::MAX_LAYER_BYTES;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use self::postgres::{Connection, Database, StoreError, StoredLines};
use super::locate::{self, LOG_FILE};
use super::meta::{PatchCopy, SessionMeta};
use super::reader::{Damage, LogReader, ReadError};
use crate::lock::{live_holder, Busy, LockError, WriterLock};
use crate::NotFound;

/// The environment variable that sets the store (`files` or `postgres://USER@HOST:PORT/DB`),
/// over the home's [`STORE_FILE`].
pub const STORE_ENV: &str = "DSH_SESSIONS";
/// The file in the home that sets the store: `store = "postgres://…"` and, optionally,
/// `password-env = "NAME"`.
pub const STORE_FILE: &str = "sessions.toml";
/// Where the password comes from unless [`STORE_FILE`] names another variable.
pub const PASSWORD_ENV: &str = "PGPASSWORD";

/// A home's session store.
#[derive(Debug, Clone)]
pub enum SessionStore {
    /// `sessions/<id>/session.jsonl` under this folder.
    Files(PathBuf),
    Postgres(Stored),
}

/// A PostgreSQL store, with this process's connection for reading (shared by its clones).
#[derive(Clone)]
pub struct Stored(Arc<StoredParts>);

struct StoredParts {
    database: Database,
    reads: Connection,
    /// The home's `sessions/` folder: where kept `--patch` copies of stored sessions are put.
    local: PathBuf,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.database)
    }
}

/// `sessions.toml`, as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StoreFile {
    store: Option<String>,
    password_env: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreSettingError {
    #[error("{}: {reason}", file.display())]
    File { file: PathBuf, reason: String },
    #[error("{source_name}: key store: {reason}")]
    Value { source_name: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `value` as a `postgres://` URL when it is one, whatever the case of its scheme.
fn postgres_url(value: &str) -> Option<String> {
    let (scheme, rest) = value.split_once("://")?;
    matches!(scheme.to_ascii_lowercase().as_str(), "postgres" | "postgresql").then(|| format!("postgres://{rest}"))
}

impl SessionStore {
    /// The store of the home at `root`: [`STORE_ENV`], else [`STORE_FILE`], else files. A
    /// database is connected to (and its schema checked or created) now.
    pub fn for_home(root: &Path) -> Result<SessionStore, StoreSettingError> {
        let file_path = root.join(STORE_FILE);
        let read = crate::fsutil::read_text_limited(&file_path, crate::fsutil::MAX_SETTINGS_FILE_BYTES, STORE_FILE);
        let file = match read {
            Ok(text) => toml::from_str::<StoreFile>(&text)
                .map_err(|err| StoreSettingError::File { file: file_path.clone(), reason: err.message().to_owned() })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => StoreFile::default(),
            Err(err) => return Err(StoreSettingError::File { file: file_path, reason: err.to_string() }),
        };
        let (value, source_name) = match std::env::var(STORE_ENV) {
            Ok(value) if !value.is_empty() => (Some(value), STORE_ENV.to_owned()),
            _ => (file.store.clone(), file_path.display().to_string()),
        };
        let sessions = root.join("sessions");
        let Some(value) = value.filter(|value| value != "files") else { return Ok(SessionStore::Files(sessions)) };
        crate::redact::learn_url(&value);
        let Some(value) = postgres_url(&value) else {
            let reason = format!("{:?} is neither \"files\" nor a postgres:// URL", crate::redact::url(&value));
            return Err(StoreSettingError::Value { source_name, reason });
        };
        let password_env = file.password_env.as_deref().unwrap_or(PASSWORD_ENV);
        let password = std::env::var(password_env).ok();
        if let Some(password) = &password {
            crate::redact::learn(password);
        }
        let database = Database::new(&value, password)
            .map_err(|reason| StoreSettingError::Value { source_name: source_name.clone(), reason })?;
        let reads = database.connect()?;
        Ok(SessionStore::Postgres(Stored(Arc::new(StoredParts { database, reads, local: sessions }))))
    }

    /// The home's `sessions/` folder (the log files, or the kept copies of stored sessions).
    pub fn local_folder(&self) -> &Path {
        match self {
            SessionStore::Files(sessions) => sessions,
            SessionStore::Postgres(stored) => &stored.0.local,
        }
    }

    /// Where the store is, for messages: a folder, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            SessionStore::Files(sessions) => sessions.display().to_string(),
            SessionStore::Postgres(stored) => stored.0.database.shown().to_owned(),
        }
    }

    /// The session a command continues: an id (or a unique prefix of one) in the store; a value
    /// with a path separator is a log file elsewhere.
    pub fn session_log(&self, value: &str) -> Result<LogRef, NotFound> {
        match self {
            SessionStore::Files(sessions) => locate::session_log(sessions, value).map(LogRef::File),
            SessionStore::Postgres(_) if value.contains(['/', '\\']) => {
                locate::resolve_log(Path::new("."), value).map(LogRef::File)
            }
            SessionStore::Postgres(stored) => stored.find(value)?.ok_or_else(|| {
                NotFound(format!("no session {value} in {} (give a path, with a '/', for a log file)", self.describe()))
            }),
        }
    }

    /// A log named by id (or prefix) in the store, or by path (a file or a session folder).
    pub fn resolve(&self, name: &str) -> Result<LogRef, NotFound> {
        match self {
            SessionStore::Files(sessions) => locate::resolve_log(sessions, name).map(LogRef::File),
            SessionStore::Postgres(_) if name.contains(['/', '\\']) || Path::new(name).exists() => {
                locate::resolve_log(Path::new("."), name).map(LogRef::File)
            }
            SessionStore::Postgres(_) => self.session_log(name),
        }
    }

    /// Every session in the store, in no particular order, nothing of them read yet.
    pub fn logs(&self) -> Result<Vec<LogRef>, StoreError> {
        Ok(match self {
            SessionStore::Files(sessions) => locate::session_ids(sessions)
                .into_iter()
                .filter_map(|id| locate::find_log(&sessions.join(id)).map(LogRef::File))
                .collect(),
            SessionStore::Postgres(stored) => stored.all()?.into_iter().map(|(_, log)| log).collect(),
        })
    }

    /// Every session in the store, oldest first, with its `createdAt` (0 when unknown).
    pub fn sessions(&self) -> Result<Vec<(f64, LogRef)>, StoreError> {
        let mut found = match self {
            SessionStore::Files(_) => self
                .logs()?
                .into_iter()
                .map(|log| (log.reader().ok().map_or(0.0, |reader| created_at(reader.header())), log))
                .collect(),
            SessionStore::Postgres(stored) => stored.all()?,
        };
        found.sort_by(|a: &(f64, LogRef), b| a.0.total_cmp(&b.0).then_with(|| a.1.name().cmp(&b.1.name())));
        Ok(found)
    }

    /// The ids of the store's sessions (for completion), in no particular order.
    pub fn ids(&self) -> Vec<String> {
        match self {
            SessionStore::Files(sessions) => locate::session_ids(sessions),
            SessionStore::Postgres(_) => self.logs().unwrap_or_default().iter().map(LogRef::name).collect(),
        }
    }
}

/// `createdAt` of a header line (0 when it has none).
pub fn created_at(header: &str) -> f64 {
    serde_json::from_str::<Value>(header)
        .ok()
        .and_then(|header| header.get("createdAt").and_then(Value::as_f64))
        .unwrap_or(0.0)
}

impl Stored {
    pub fn database(&self) -> &Database {
        &self.0.database
    }

    /// The session of id `id`, else the one whose id starts with it (as git takes a prefix).
    fn find(&self, id: &str) -> Result<Option<LogRef>, NotFound> {
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

    /// Every session's id and `createdAt` (kept in its own column when the session was created).
    fn all(&self) -> Result<Vec<(f64, LogRef)>, StoreError> {
        let rows: Vec<(String, i64)> = self.0.reads.call("session listing", async |client| {
            let rows = client.query("SELECT id, coalesce(created_at, 0) FROM dsh_sessions", &[]).await?;
            Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        })?;
        let kept = rows.into_iter().filter(|(id, _)| sound_id(id));
        Ok(kept.map(|(id, created)| (created as f64, self.log(&id))).collect())
    }

    pub fn log(&self, id: &str) -> LogRef {
        LogRef::Stored { store: self.clone(), id: id.to_owned() }
    }

    /// The header line of session `id`, if it is in the store.
    pub fn header(&self, connection: &Connection, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_owned();
        connection.call("header", async move |client| {
            let row = client.query_opt("SELECT header FROM dsh_sessions WHERE id = $1", &[&id]).await?;
            Ok(row.map(|row| row.get(0)))
        })
    }
}

/// Whether an id read from a database can name a session ([`locate::is_session_id`]); any other
/// (one another program stored, say `../../x` or one holding escapes) is left out with a warning
/// that shows it escaped, so it never becomes a path or reaches a terminal as it is.
fn sound_id(id: &str) -> bool {
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

/// The name a kept attachment has beside the log, before its sha256.
pub const ATTACHMENT_PREFIX: &str = "attachment-";

/// One session's log: a file, or a session in a database.
#[derive(Debug, Clone)]
pub enum LogRef {
    File(PathBuf),
    Stored { store: Stored, id: String },
}

impl LogRef {
    /// How messages name the log: its path, or its session id.
    pub fn name(&self) -> String {
        match self {
            LogRef::File(path) => path.display().to_string(),
            LogRef::Stored { id, .. } => id.clone(),
        }
    }

    /// Reads the log from its header on, as the JSONL its file holds.
    pub fn reader(&self) -> Result<LogReader, ReadError> {
        match self {
            LogRef::File(path) => LogReader::open(path),
            LogRef::Stored { store, id } => reader_on(store, &store.0.reads, id),
        }
    }

    /// The log's lines exactly as stored (a compressed file decompressed): what `session
    /// export` writes.
    pub fn lines(&self) -> Result<Box<dyn std::io::BufRead + Send>, ReadError> {
        match self {
            LogRef::File(path) => Ok(super::reader::open_lines(path)?),
            LogRef::Stored { store, id } => {
                let header = store.header(&store.0.reads, id)?.ok_or_else(|| missing(store, id))?;
                Ok(Box::new(StoredLines::new(store.0.reads.clone(), id, &header)))
            }
        }
    }

    /// The process writing the log now, if one is (stored logs: on any machine).
    pub fn writer(&self) -> Option<u32> {
        match self {
            LogRef::File(path) => live_holder(&locate::lock_path(path)),
            LogRef::Stored { store, id } => store.0.reads.session_holder(id).ok().flatten().map(|(pid, _)| pid),
        }
    }

    /// How a reader names a torn last line (see [`locate::torn_note`]).
    pub fn torn_note(&self, damage: &Damage) -> String {
        match self {
            LogRef::File(path) => locate::torn_note(path, damage),
            LogRef::Stored { .. } => damage.to_string(),
        }
    }

    /// The path the session's kept files (`dsh.json`, `--patch` copies) are named from: beside a
    /// log file, or in the home's `sessions/<id>/` for a stored session.
    pub fn meta_anchor(&self) -> PathBuf {
        match self {
            LogRef::File(path) => path.clone(),
            LogRef::Stored { store, id } => store.0.local.join(id).join(LOG_FILE),
        }
    }

    /// What dsh keeps with the session (see [`SessionMeta`]); stored sessions keep it in the
    /// database.
    pub fn meta(&self) -> SessionMeta {
        match self {
            LogRef::File(path) => SessionMeta::read(path),
            LogRef::Stored { store, id } => stored_meta(store, id).unwrap_or_default(),
        }
    }

    /// The layers a continued session runs with, and what to tell the user (see
    /// [`SessionMeta::patches_for`]); a stored session's kept copies are put back in the home's
    /// `sessions/<id>/` first, when it runs with them.
    pub fn patches_for(&self, meta: &SessionMeta, explicit: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
        if let LogRef::Stored { store, id } = self {
            if explicit.is_empty() && !meta.patches.is_empty() {
                bring_kept_files(store, id);
            }
        }
        meta.patches_for(&self.meta_anchor(), explicit)
    }

    /// Keeps `meta` and the kept copies of `patches` with the session.
    pub fn keep_meta(&self, meta: &mut SessionMeta, patches: &[PatchCopy]) -> std::io::Result<()> {
        let anchor = self.meta_anchor();
        if let (LogRef::Stored { .. }, Some(folder)) = (self, anchor.parent().filter(|_| !patches.is_empty())) {
            std::fs::create_dir_all(folder)?;
        }
        meta.keep_patches(&anchor, patches)?;
        match self {
            LogRef::File(path) => meta.write(path),
            LogRef::Stored { store, id } => Ok(keep_stored_meta(store, id, meta, &anchor)?),
        }
    }

    /// Keeps `bytes` with the session as `attachment-<id>` (a tool result's image or file, `id`
    /// its sha256), durably, before the event that names it is written: beside the log file, or
    /// in the database. Keeping one that is there already changes nothing.
    pub fn keep_attachment(&self, id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let name = format!("{ATTACHMENT_PREFIX}{id}");
        match self {
            LogRef::File(path) => {
                crate::fsutil::create_atomic(&path.with_file_name(&name), bytes)?;
                Ok(())
            }
            LogRef::Stored { store, id: session } => {
                let (session, content) = (session.clone(), bytes.to_vec());
                Ok(store.0.reads.call("attachment", async move |client| {
                    let sql = "INSERT INTO dsh_session_files (session, name, content) VALUES ($1, $2, $3) \
                               ON CONFLICT (session, name) DO NOTHING";
                    client.execute(sql, &[&session, &name, &content]).await.map(|_| ())
                })?)
            }
        }
    }

    /// Takes the log's one-writer lock: a file's OS lock (removed when released for a log
    /// outside `local`), or the session's advisory lock on a connection of its own.
    pub fn lock(&self, local: &Path) -> Result<SessionLock, LockError> {
        match self {
            LogRef::File(path) => {
                let mut lock = locate::lock_file(path)?;
                if !path.starts_with(local) {
                    lock.remove_when_released();
                }
                Ok(SessionLock::File(lock))
            }
            LogRef::Stored { store, id } => Ok(SessionLock::Stored(StoredWriter::lock(store, id)?)),
        }
    }
}

fn reader_on(store: &Stored, connection: &Connection, id: &str) -> Result<LogReader, ReadError> {
    let header = store.header(connection, id)?.ok_or_else(|| missing(store, id))?;
    LogReader::new(Box::new(StoredLines::new(connection.clone(), id, &header)))
}

fn missing(store: &Stored, id: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotFound, format!("no session {id} in {}", store.0.database.shown()))
}

fn stored_meta(store: &Stored, id: &str) -> Result<SessionMeta, StoreError> {
    let session = id.to_owned();
    let meta: String = store.0.reads.call("session meta", async move |client| {
        Ok(client.query_one("SELECT meta FROM dsh_sessions WHERE id = $1", &[&session]).await?.get(0))
    })?;
    Ok(serde_json::from_str(&meta).unwrap_or_default())
}

/// Writes a stored session's kept files into the home's `sessions/<id>/`; one that cannot be
/// written is missing there, which composing its layer then names.
fn bring_kept_files(store: &Stored, id: &str) {
    let session = id.to_owned();
    let files: Result<Vec<(String, Vec<u8>)>, StoreError> = store.0.reads.call("kept files", async move |client| {
        let rows = client.query("SELECT name, content FROM dsh_session_files WHERE session = $1", &[&session]).await?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    });
    let folder = store.0.local.join(id);
    // A kept file's name is one plain path component, as a session id is.
    for (name, content) in files.unwrap_or_default().iter().filter(|(name, _)| locate::is_session_id(name)) {
        let _ =
            std::fs::create_dir_all(&folder).and_then(|()| crate::fsutil::write_atomic(&folder.join(name), content));
    }
}

fn keep_stored_meta(store: &Stored, id: &str, meta: &SessionMeta, anchor: &Path) -> Result<(), StoreError> {
    let folder = anchor.parent().unwrap_or(Path::new("."));
    let files: Vec<(String, Vec<u8>)> = meta
        .patches
        .iter()
        .filter_map(|patch| {
            let kept = crate::fsutil::read_limited(&folder.join(&patch.kept), MAX_LAYER_BYTES, "a layer").ok()?;
            Some((patch.kept.clone(), kept))
        })
        .collect();
    let (session, text) = (id.to_owned(), serde_json::to_string(meta).unwrap_or_default());
    store.0.reads.call("session meta", async move |client| {
        let transaction = client.transaction().await?;
        transaction.execute("UPDATE dsh_sessions SET meta = $2 WHERE id = $1", &[&session, &text]).await?;
        for (name, content) in &files {
            transaction
                .execute(
                    "INSERT INTO dsh_session_files (session, name, content) VALUES ($1, $2, $3) \
                     ON CONFLICT (session, name) DO UPDATE SET content = EXCLUDED.content",
                    &[&session, name, content],
                )
                .await?;
        }
        transaction.commit().await
    })
}

/// A held writer lock.
#[derive(Debug)]
pub enum SessionLock {
    File(WriterLock),
    Stored(StoredWriter),
}

/// The writer of a stored session: a connection of its own that holds the session's advisory
/// lock for as long as it lives (a `kill -9`ed writer's connection, and lock, die with it).
pub struct StoredWriter {
    pub store: Stored,
    pub connection: Connection,
    pub id: String,
}

impl std::fmt::Debug for StoredWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writer of {} in {:?}", self.id, self.store)
    }
}

impl StoredWriter {
    /// Connects and takes session `id`'s advisory lock, or says who holds it.
    pub fn lock(store: &Stored, id: &str) -> Result<StoredWriter, LockError> {
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

    /// Reads the log through the writer's own connection.
    pub fn reader(&self) -> Result<LogReader, ReadError> {
        reader_on(&self.store, &self.connection, &self.id)
    }

    /// The number the next line gets (the header is line 0).
    pub fn next_line(&self) -> Result<i64, StoreError> {
        let id = self.id.clone();
        self.connection.call("line count", async move |client| {
            let row = client
                .query_one("SELECT coalesce(max(line), 0) + 1 FROM dsh_events WHERE session = $1", &[&id])
                .await?;
            Ok(row.get(0))
        })
    }

    /// Stores a new session's header; fails when the id is taken.
    pub fn create(&self, header: &str) -> Result<(), StoreError> {
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
