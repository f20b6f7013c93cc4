//! Connections to the session store: a `postgres://` URL parsed, with what may be shown of it;
//! each connection served by a thread of its own with a small runtime (so the synchronous log
//! writer can commit from inside the agent's runtime as it fsyncs a file), every statement within
//! a deadline; the advisory locks that make one writer per session, and who holds them.

use std::io::{self, BufRead, Read};
use std::sync::mpsc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls};

use crate::store::StoreError;
use crate::writer::Line;

/// The longest a connection attempt may take.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// The longest one statement (a commit, a batch of lines) may take.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(30);
/// Lines fetched per round trip when a log is read.
const READ_BATCH: i64 = 5_000;

/// Where the store is: a `postgres://` URL, parsed, and what may be shown of it.
#[derive(Clone)]
pub struct Database {
    config: tokio_postgres::Config,
    /// `postgres://USER@HOST:PORT/DB`, never with a password.
    shown: String,
    /// The variable the password comes from when the URL has none, for messages.
    password_env: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Database {
    /// Parses `url`; the password (when the URL has none) comes from `password`, read from the
    /// variable `password_env`.
    pub fn new(url: &str, password: Option<String>, password_env: &str) -> Result<Database, String> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|err| format!("not a PostgreSQL URL ({err}); expected postgres://USER@HOST:PORT/DB"))?;
        if config.get_password().is_none() {
            if let Some(password) = password {
                config.password(password);
            }
        }
        config.connect_timeout(CONNECT_DEADLINE);
        let shown = shown_url(&config);
        Ok(Database { config, shown, password_env: password_env.to_owned() })
    }

    /// The URL without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Opens a connection named `dsh:PID@HOST` (what a busy writer is told).
    pub fn connect(&self) -> Result<Connection, StoreError> {
        let mut config = self.config.clone();
        config.application_name(format!("dsh:{}@{}", std::process::id(), hostname()));
        Connection::open(config, self.shown.clone(), self.password_env.clone())
    }
}

fn shown_url(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().map(|user| format!("{user}@")).unwrap_or_default();
    format!("postgres://{user}{host}:{port}/{}", config.get_dbname().unwrap_or_default())
}

/// This machine's name, for the holder of a lock.
pub fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length, and gethostname NUL-terminates within it.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let end = buffer.iter().position(|byte| *byte == 0).unwrap_or(buffer.len());
    match result {
        0 => String::from_utf8_lossy(&buffer[..end]).into_owned(),
        _ => "unknown-host".to_owned(),
    }
}

type Job = Box<dyn FnOnce(&Runtime, &mut Client) + Send>;

/// One connection, served by its own thread. Dropping the last clone closes it (and releases
/// every advisory lock it holds).
#[derive(Clone)]
pub struct Connection {
    jobs: mpsc::Sender<Job>,
    url: String,
}

impl Connection {
    fn open(config: tokio_postgres::Config, url: String, password_env: String) -> Result<Connection, StoreError> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, opened) = mpsc::channel();
        let thread_url = url.clone();
        let no_password = config.get_password().is_none();
        std::thread::Builder::new()
            .name("dsh-postgres".into())
            .spawn(move || serve(config, thread_url, inbox, ready))
            .map_err(|err| StoreError::Connect { url: url.clone(), reason: err.to_string() })?;
        let gone = || StoreError::Gone { url: url.clone() };
        opened.recv().map_err(|_| gone())?.map_err(|err| match err {
            // The server asks for a password the URL does not give: say where dsh reads one.
            StoreError::Connect { url, reason } if no_password && reason.contains("password missing") => {
                let reason =
                    format!("{reason}; the server asks for a password: set {password_env}, or give it in the URL");
                StoreError::Connect { url, reason }
            }
            other => other,
        })?;
        Ok(Connection { jobs, url })
    }

    /// Runs `job` on the connection's thread; `what` names it in errors. Every statement is
    /// bounded by [`QUERY_DEADLINE`].
    pub fn call<T, F>(&self, what: &'static str, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: AsyncFnOnce(&mut Client) -> Result<T, tokio_postgres::Error> + Send + 'static,
    {
        let (reply, answer) = mpsc::channel();
        let url = self.url.clone();
        let run: Job = Box::new(move |runtime, client| {
            let outcome = runtime.block_on(async { tokio::time::timeout(QUERY_DEADLINE, job(client)).await });
            let _ = reply.send(match outcome {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(err)) => Err(StoreError::Query { url, what, reason: describe(&err) }),
                Err(_) => Err(StoreError::Deadline { url, what, deadline: QUERY_DEADLINE }),
            });
        });
        self.jobs.send(run).map_err(|_| StoreError::Gone { url: self.url.clone() })?;
        answer.recv().map_err(|_| StoreError::Gone { url: self.url.clone() })?
    }
}

fn serve(
    config: tokio_postgres::Config,
    url: String,
    inbox: mpsc::Receiver<Job>,
    ready: mpsc::Sender<Result<(), StoreError>>,
) {
    let failed = |reason: String| StoreError::Connect { url: url.clone(), reason };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => return drop(ready.send(Err(failed(err.to_string())))),
    };
    let connected = runtime.block_on(async { tokio::time::timeout(CONNECT_DEADLINE, config.connect(NoTls)).await });
    let mut client = match connected {
        Ok(Ok((client, connection))) => {
            runtime.spawn(connection);
            client
        }
        Ok(Err(err)) => return drop(ready.send(Err(failed(describe(&err))))),
        Err(_) => return drop(ready.send(Err(failed(format!("no answer within {}s", CONNECT_DEADLINE.as_secs()))))),
    };
    let _ = ready.send(Ok(()));
    for job in inbox {
        job(&runtime, &mut client);
    }
}

/// A driver error as one line: the server's message when there is one.
fn describe(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(err) {
            Some(source) => format!("{err}: {source}"),
            None => err.to_string(),
        },
    }
}

/// An advisory-lock key: the first 63 bits of the sha256 of `<kind>:<name>`. A session's is
/// `lock_key("dsh-session", id)`; applying migrations takes `lock_key("dsh-schema",
/// "migrations")`. Every dsh sharing a database derives the same keys.
pub fn lock_key(kind: &str, name: &str) -> i64 {
    let digest = Sha256::digest(format!("{kind}:{name}").as_bytes());
    let bytes: [u8; 8] = digest[..8].try_into().expect("a sha256 has 8 bytes");
    i64::from_be_bytes(bytes) & i64::MAX
}

/// The advisory-lock key of session `id`'s writer.
pub fn session_key(id: &str) -> i64 {
    lock_key("dsh-session", id)
}

/// Who holds an advisory lock, from its connection's name: `(pid, host)`.
pub fn parse_holder(application_name: &str) -> Option<(u32, String)> {
    let (pid, host) = application_name.strip_prefix("dsh:")?.split_once('@')?;
    Some((pid.parse().ok()?, host.to_owned()))
}

const HOLDER_QUERY: &str = "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND ((l.classid::bigint << 32) | l.objid::bigint) = $1";

impl Connection {
    /// Takes the session's writer lock on this connection: `Ok(None)` when taken, else the
    /// holder (`None` inside when it cannot be told).
    pub fn try_lock_session(&self, session: &str) -> Result<Option<Option<(u32, String)>>, StoreError> {
        let key = session_key(session);
        self.call("writer lock", async move |client| {
            let taken: bool = client.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await?.get(0);
            if taken {
                return Ok(None);
            }
            let holder = client.query_opt(HOLDER_QUERY, &[&key]).await?;
            Ok(Some(holder.and_then(|row| parse_holder(row.get::<_, Option<&str>>(0)?))))
        })
    }

    /// The holder of a session's writer lock now, if any.
    pub fn session_holder(&self, session: &str) -> Result<Option<(u32, String)>, StoreError> {
        let key = session_key(session);
        self.call("writer lookup", async move |client| {
            let holder = client.query_opt(HOLDER_QUERY, &[&key]).await?;
            Ok(holder.and_then(|row| parse_holder(row.get::<_, Option<&str>>(0)?)))
        })
    }
}

/// A stored log read back as its JSONL bytes: the header line, then each event line, fetched in
/// batches so memory stays bounded.
pub struct StoredLines {
    connection: Connection,
    session: String,
    buffer: Vec<u8>,
    consumed: usize,
    last_line: i64,
    done: bool,
}

impl StoredLines {
    pub fn new(connection: Connection, session: &str, header: &str) -> StoredLines {
        StoredLines {
            connection,
            session: session.to_owned(),
            buffer: format!("{header}\n").into_bytes(),
            consumed: 0,
            last_line: 0,
            done: false,
        }
    }

    fn fetch(&mut self) -> Result<(), StoreError> {
        let (session, after) = (self.session.clone(), self.last_line);
        let rows: Vec<(i64, String)> = self.connection.call("read", async move |client| {
            let rows = client
                .query(
                    "SELECT line, body FROM dsh_events WHERE session = $1 AND line > $2 ORDER BY line LIMIT $3",
                    &[&session, &after, &READ_BATCH],
                )
                .await?;
            Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        })?;
        self.done = (rows.len() as i64) < READ_BATCH;
        self.buffer.clear();
        self.consumed = 0;
        for (line, body) in rows {
            self.last_line = line;
            self.buffer.extend_from_slice(body.as_bytes());
            self.buffer.push(b'\n');
        }
        Ok(())
    }
}

impl Read for StoredLines {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let taken = available.len().min(out.len());
        out[..taken].copy_from_slice(&available[..taken]);
        self.consume(taken);
        Ok(taken)
    }
}

impl BufRead for StoredLines {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.consumed == self.buffer.len() && !self.done {
            self.fetch()?;
        }
        Ok(&self.buffer[self.consumed..])
    }

    fn consume(&mut self, amount: usize) {
        self.consumed = (self.consumed + amount).min(self.buffer.len());
    }
}

impl Connection {
    /// The session's lines after line number `after` (at most a read batch of them), the
    /// number of the last, and whether they were all there were.
    pub fn lines_after(&self, session: &str, after: i64) -> Result<(Vec<String>, i64, bool), StoreError> {
        let session = session.to_owned();
        self.call("read new lines", async move |client| {
            let rows = client
                .query(
                    "SELECT line, body FROM dsh_events WHERE session = $1 AND line > $2 ORDER BY line LIMIT $3",
                    &[&session, &after, &READ_BATCH],
                )
                .await?;
            let last = rows.last().map_or(after, |row| row.get(0));
            let complete = (rows.len() as i64) < READ_BATCH;
            Ok((rows.iter().map(|row| row.get(1)).collect(), last, complete))
        })
    }

    /// The number of the session's last line (0 when it has none).
    pub fn last_line(&self, session: &str) -> Result<i64, StoreError> {
        let session = session.to_owned();
        self.call("last line", async move |client| {
            let row = client
                .query_one("SELECT coalesce(max(line), 0) FROM dsh_events WHERE session = $1", &[&session])
                .await?;
            Ok(row.get(0))
        })
    }

    /// Runs statements that return nothing (`BEGIN`, `COMMIT`).
    pub fn execute(&self, what: &'static str, sql: &'static str) -> Result<(), StoreError> {
        self.call(what, async move |client| client.batch_execute(sql).await)
    }

    /// Commits `lines` as the session's next lines, from `first_line` on, in one statement: all
    /// of them or none.
    pub fn insert_lines(&self, session: &str, first_line: i64, lines: Vec<Line>) -> Result<(), StoreError> {
        let session = session.to_owned();
        let numbers: Vec<i64> = (first_line..first_line + lines.len() as i64).collect();
        let (mut seqs, mut types, mut bodies) = (Vec::new(), Vec::new(), Vec::new());
        for line in lines {
            seqs.push(line.seq);
            types.push(line.event_type);
            bodies.push(line.body);
        }
        self.call("commit", async move |client| {
            client
                .execute(
                    "INSERT INTO dsh_events (session, line, seq, type, body) \
                     SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[])",
                    &[&session, &numbers, &seqs, &types, &bodies],
                )
                .await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password() {
        let database = Database::new("postgres://ann:secret@db.example:6543/fleet", None, "PGPASSWORD").unwrap();
        assert_eq!(database.shown(), "postgres://ann@db.example:6543/fleet");
        assert!(!format!("{database:?}").contains("secret"));
    }

    #[test]
    fn a_holder_is_read_from_its_connection_name() {
        assert_eq!(parse_holder("dsh:4242@build-7"), Some((4242, "build-7".to_owned())));
        assert_eq!(parse_holder("psql"), None);
        assert_eq!(parse_holder("dsh:x@h"), None);
    }

    #[test]
    fn lock_keys_are_stable_and_not_negative() {
        assert_eq!(session_key("a"), session_key("a"));
        assert_ne!(session_key("a"), session_key("b"));
        assert!(["a", "b", "c", "764d9a22"].iter().all(|id| session_key(id) >= 0));
        assert_eq!(session_key("a"), lock_key("dsh-session", "a"), "the key of the schema before it");
    }

    #[test]
    fn a_bad_url_is_refused_with_the_expected_shape() {
        let err = Database::new("mysql://x", None, "PGPASSWORD").unwrap_err();
        assert!(err.contains("expected postgres://USER@HOST:PORT/DB"), "{err}");
    }
}
