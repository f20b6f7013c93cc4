//! Where a home keeps its session logs, behind one interface: a [`Backend`] holds sessions, each
//! a [`Log`] that is read, locked and appended to through [`Held`] and [`Sink`]. One file per
//! backend: [`files`] (`sessions/<id>/session.jsonl` under the home, the default) and
//! `postgres` (a database any machine can reach, with the `postgres` feature), chosen by
//! `DSH_SESSIONS` or by `sessions.toml` in the home. Nothing above this module sees a backend's
//! types: the compiler keeps the reader, the writer and the checks free of them.

mod backend;
pub mod files;
#[cfg(feature = "postgres")]
pub mod postgres;

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::format::Format;
use crate::import::ImportError;
use crate::writer::Sink;
use crate::{locate, NotFound};
pub use backend::{
    created_at, sound_id, Backend, Held, Importing, Log, LogRef, OpenSinkError, SessionLock, StoreError, Tail,
    ATTACHMENT_PREFIX,
};

/// The environment variable that sets the store (`files` or `postgres://USER@HOST:PORT/DB`),
/// over the home's [`STORE_FILE`].
pub const STORE_ENV: &str = "DSH_SESSIONS";
/// The environment variable that sets the format new sessions are written in (`v4` or `v0`),
/// over the `format` of the home's [`STORE_FILE`].
pub const FORMAT_ENV: &str = "DSH_SESSION_FORMAT";
/// The file in the home that sets the store: `store = "postgres://…"` and, optionally,
/// `password-env = "NAME"`; and `format = "v0"` to keep writing DeepSeek Harness 0.1's format.
pub const STORE_FILE: &str = "sessions.toml";
/// Where the password comes from unless [`STORE_FILE`] names another variable.
pub const PASSWORD_ENV: &str = "PGPASSWORD";
#[derive(Debug, thiserror::Error)]
pub enum StoreSettingError {
    #[error("{}: {reason}", file.display())]
    File { file: PathBuf, reason: String },
    #[error("{source_name}: key store: {reason}")]
    Value { source_name: String, reason: String },
    #[error("{source_name}: key format: {reason}")]
    Format { source_name: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A home's session store, and the format it writes new sessions in.
#[derive(Clone)]
pub struct SessionStore(Arc<dyn Backend>, Format);

impl Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.describe())
    }
}

/// `value` as a `postgres://` URL when it is one, whatever the case of its scheme.
fn postgres_url(value: &str) -> Option<String> {
    let (scheme, rest) = value.split_once("://")?;
    matches!(scheme.to_ascii_lowercase().as_str(), "postgres" | "postgresql").then(|| format!("postgres://{rest}"))
}

/// `sessions.toml`, as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StoreFile {
    store: Option<String>,
    password_env: Option<String>,
    /// The format new sessions are written in: `v4` (the default) or `v0`.
    format: Option<String>,
}

impl StoreFile {
    /// The format new sessions are written in: [`FORMAT_ENV`], else `format`, else v4.
    fn format(&self, path: &Path) -> Result<Format, StoreSettingError> {
        let (named, source_name) = match std::env::var(FORMAT_ENV) {
            Ok(value) if !value.is_empty() => (Some(value), FORMAT_ENV.to_owned()),
            _ => (self.format.clone(), path.display().to_string()),
        };
        match named.as_deref() {
            None => Ok(crate::format::WRITTEN_BY_DEFAULT),
            Some("v4") => Ok(Format::V4),
            Some("v0") => Ok(Format::V0),
            Some(other) => Err(StoreSettingError::Format {
                source_name,
                reason: format!(
                    "{other:?} is not a format dsh writes (v4, what DeepSeek Harness 0.2 writes, or v0, 0.1's)"
                ),
            }),
        }
    }
}

fn store_file(path: &Path) -> Result<StoreFile, StoreSettingError> {
    let failed = |reason: String| StoreSettingError::File { file: path.to_owned(), reason };
    match crate::fsutil::read_text_limited(path, crate::fsutil::MAX_SETTINGS_FILE_BYTES, STORE_FILE) {
        Ok(text) => toml::from_str::<StoreFile>(&text).map_err(|err| failed(err.message().to_owned())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(StoreFile::default()),
        Err(err) => Err(failed(err.to_string())),
    }
}

impl SessionStore {
    /// A store whose logs are files under `sessions`.
    pub fn files(sessions: PathBuf) -> SessionStore {
        SessionStore(Arc::new(files::Files::new(sessions)), crate::format::WRITTEN_BY_DEFAULT)
    }

    /// The store of the home at `root`: [`STORE_ENV`], else [`STORE_FILE`], else files. A
    /// database is connected to, and its schema checked, now.
    pub fn for_home(root: &Path) -> Result<SessionStore, StoreSettingError> {
        let file_path = root.join(STORE_FILE);
        let file = store_file(&file_path)?;
        let format = file.format(&file_path)?;
        let (value, source_name) = match std::env::var(STORE_ENV) {
            Ok(value) if !value.is_empty() => (Some(value), STORE_ENV.to_owned()),
            _ => (file.store.clone(), file_path.display().to_string()),
        };
        let sessions = root.join("sessions");
        let Some(value) = value.filter(|value| value != "files") else {
            return Ok(SessionStore(Arc::new(files::Files::new(sessions)), format));
        };
        crate::redact::learn_url(&value);
        let Some(url) = postgres_url(&value) else {
            let reason = format!("{:?} is neither \"files\" nor a postgres:// URL", crate::redact::url(&value));
            return Err(StoreSettingError::Value { source_name, reason });
        };
        let password_env = file.password_env.as_deref().unwrap_or(PASSWORD_ENV);
        Ok(SessionStore(database(&url, password_env, sessions, source_name)?, format))
    }

    /// The format new sessions are written in (`format` in [`STORE_FILE`]).
    pub fn format(&self) -> Format {
        self.1
    }

    /// The home's `sessions/` folder (the log files, or the kept copies of stored sessions).
    pub fn local_folder(&self) -> &Path {
        self.0.local_folder()
    }

    /// The folder whose files are the logs, when the store is one.
    pub fn files_folder(&self) -> Option<&Path> {
        self.0.files_folder()
    }

    /// Where the store is, for messages: a folder, or the URL without its password.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// The session a command continues: an id (or a unique prefix of one) in the store; a value
    /// with a path separator is a log file elsewhere.
    pub fn session_log(&self, value: &str) -> Result<LogRef, NotFound> {
        if let Some(sessions) = self.files_folder() {
            return locate::session_log(sessions, value).map(LogRef::file);
        }
        if value.contains(['/', '\\']) {
            return locate::resolve_log(Path::new("."), value).map(LogRef::file);
        }
        self.0.find(value)?.ok_or_else(|| {
            NotFound(format!("no session {value} in {} (give a path, with a '/', for a log file)", self.describe()))
        })
    }

    /// The session an id (or a unique prefix of one) names in the store; never a path.
    pub fn session_by_id(&self, id: &str) -> Result<LogRef, NotFound> {
        self.0.find(id)?.ok_or_else(|| NotFound(format!("no session {id} in {}", self.describe())))
    }

    /// A log named by id (or prefix) in the store, or by path (a file or a session folder).
    pub fn resolve(&self, name: &str) -> Result<LogRef, NotFound> {
        match self.files_folder() {
            Some(sessions) => locate::resolve_log(sessions, name).map(LogRef::file),
            None if name.contains(['/', '\\']) || Path::new(name).exists() => {
                locate::resolve_log(Path::new("."), name).map(LogRef::file)
            }
            None => self.session_log(name),
        }
    }

    /// Every session in the store, in no particular order, nothing of them read yet.
    pub fn logs(&self) -> Result<Vec<LogRef>, StoreError> {
        Ok(self.0.all()?.into_iter().map(|(_, log)| log).collect())
    }

    /// Every session in the store, oldest first, with its `createdAt` (0 when unknown).
    pub fn sessions(&self) -> Result<Vec<(f64, LogRef)>, StoreError> {
        let mut found = self.0.all()?;
        found.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name().cmp(&b.1.name())));
        Ok(found)
    }

    /// The ids of the store's sessions (for completion), in no particular order.
    pub fn ids(&self) -> Vec<String> {
        self.0.ids()
    }

    /// Creates session `id` holding `header_line` (see [`Backend::create`]).
    pub fn create(&self, id: &str, header_line: &str) -> io::Result<(LogRef, Box<dyn Sink>)> {
        self.0.create(id, header_line)
    }

    /// Starts importing session `id` (see [`Backend::begin_import`]).
    pub fn begin_import(&self, id: &str, header_line: &str) -> Result<Box<dyn Importing>, ImportError> {
        self.0.begin_import(id, header_line)
    }
}

#[cfg(feature = "postgres")]
fn database(
    url: &str,
    password_env: &str,
    sessions: PathBuf,
    source_name: String,
) -> Result<Arc<dyn Backend>, StoreSettingError> {
    let password = std::env::var(password_env).ok();
    if let Some(password) = &password {
        crate::redact::learn(password);
    }
    let database = postgres::Database::new(url, password, password_env)
        .map_err(|reason| StoreSettingError::Value { source_name, reason })?;
    Ok(Arc::new(postgres::Postgres::open(database, sessions)?))
}

#[cfg(not(feature = "postgres"))]
fn database(_: &str, _: &str, _: PathBuf, source_name: String) -> Result<Arc<dyn Backend>, StoreSettingError> {
    let reason = "this dsh was built without PostgreSQL support (the dsh-session feature `postgres`)".to_owned();
    Err(StoreSettingError::Value { source_name, reason })
}
