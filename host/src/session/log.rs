//! Writing the durable session log, and crash repair on open.
//!
//! Every event passes the structure rules and every checker plugin before it is written (a
//! refused retry record is never written). Events are buffered and made durable with `fsync` at
//! the points the agent loop asks for — before a request is sent, after `llm/retry` (before its
//! wait), after `llm/retry-started`, at `turn/end` — and at the latest 200 ms after the oldest
//! unsynced append. A failed `fsync` poisons the log: nothing more is written, never retried in
//! place. The log also keeps what later calls need without rereading the file: the history index
//! plugins query, the surface (model-visible) history, and the structure state.
//!
//! Opening an existing log repairs a crash: a torn last line is copied to
//! `session.jsonl.torn-<time>` and cut off; damage anywhere else is refused with its line and byte
//! offset (nothing after it is silently dropped); an interrupted turn gets its closers appended.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use abi_stable::std_types::{RResult, RStr};
use dsh_abi::{js, CheckerObject, EventRef, Verdict};
use serde_json::{json, Value};

use super::index::HistoryIndex;
use super::message_text;
use super::reader::{is_compressed, Damage, LogReader, Position, ReadError};
use super::structure::StructureRules;
use super::verify::KNOWN_EVENT_TYPES;
use crate::fsutil;

/// The longest an appended event stays unsynced.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(200);

/// Whether commits reach the disk. Simulations and benchmarks of the loop itself turn it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    Durable,
    Unsynced,
}

/// A checker plugin's per-session state, with the row that owns it.
pub struct LogChecker {
    pub row_id: String,
    pub checker: CheckerObject,
}

/// A model-visible message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceMessage {
    pub role: &'static str,
    pub text: String,
}

/// Receives every appended line once it is durable (`dsh run --json`).
pub type Echo = Box<dyn FnMut(&str) + Send>;

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub event_type: &'a str,
    /// The `data` JSON, written byte for byte (plugin records keep their key order).
    pub data: String,
    /// Written with `"ignorable":true`, so readers that do not know the type skip it.
    pub ignorable: bool,
}

impl<'a> NewEvent<'a> {
    pub fn new(event_type: &'a str, data: &Value) -> Self {
        NewEvent { event_type, data: js::to_string(data), ignorable: false }
    }
}

/// Where an appended event landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    /// Epoch milliseconds, as written.
    pub time: u64,
    /// When it was stamped, on the runtime's clock (a wait's deadline counts from here).
    pub at: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// A checker refused the event; it was not written.
    #[error("{message} (refused by row \"{row}\")")]
    Refused { row: String, message: String },
    /// The host built an event that breaks the session structure (a bug); it was not written.
    #[error("refusing to append {event_type}: {violations}")]
    Structure { event_type: String, violations: String },
    /// Writing or syncing failed; the log accepts nothing more.
    #[error("the session log {path} can no longer be written: {reason}")]
    Fatal { path: PathBuf, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{}: {reason}", path.display())]
    Read { path: PathBuf, reason: ReadError },
    #[error("{}: line {} (byte {}): {reason}; refusing to write after it (repair or move the file by hand; later events were not dropped)", path.display(), at.line, at.offset)]
    Corrupt { path: PathBuf, at: Position, reason: String },
    #[error("{}: compressed logs (DeepSeek Harness session.jsonl.zstd) are read-only", path.display())]
    Compressed { path: PathBuf },
    #[error("{}: {reason}", path.display())]
    Io { path: PathBuf, reason: io::Error },
}

/// What opening a log repaired.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Repair {
    /// A torn last line: where it was, its length, and the copy kept.
    pub torn: Option<(Position, usize, PathBuf)>,
    /// The closer events appended for an interrupted turn, e.g. `turn/end`.
    pub closers: Vec<String>,
    /// Rule violations found in the existing events (the log was written by something else).
    pub warnings: Vec<String>,
}

/// An open session log.
pub struct SessionLog {
    id: String,
    path: PathBuf,
    file: File,
    header: String,
    pending: Vec<u8>,
    pending_since: Option<Instant>,
    rules: StructureRules,
    checkers: Vec<LogChecker>,
    index: HistoryIndex,
    surface: Vec<SurfaceMessage>,
    message_ids: HashSet<String>,
    last_request_header: Option<String>,
    fatal: Option<String>,
    policy: SyncPolicy,
    echo: Option<Echo>,
    /// Lines appended but not yet committed, for `echo`.
    unechoed: Vec<String>,
}

const LOG_FILE: &str = "session.jsonl";
const COMPRESSED_LOG_FILE: &str = "session.jsonl.zstd";

/// The log in a session directory: `session.jsonl`, or DeepSeek Harness's compressed
/// `session.jsonl.zstd`.
pub fn find_log(dir: &Path) -> Option<PathBuf> {
    [LOG_FILE, COMPRESSED_LOG_FILE].iter().map(|file| dir.join(file)).find(|path| path.is_file())
}

impl SessionLog {
    /// Creates `sessions/<id>/session.jsonl` with its header line, durably and atomically: the
    /// file appears complete with its header or not at all (the new directory entries are synced
    /// too). `make_checkers` opens the checkers for the header.
    pub fn create(
        sessions: &Path,
        id: &str,
        header: &Value,
        make_checkers: impl FnOnce(&str) -> Vec<LogChecker>,
        policy: SyncPolicy,
    ) -> io::Result<SessionLog> {
        let dir = sessions.join(id);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(LOG_FILE);
        let header_line = js::to_string(header);
        if !fsutil::create_atomic(&path, format!("{header_line}\n").as_bytes())? {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} already exists", path.display())));
        }
        fsutil::sync_dir(sessions)?;
        let file = OpenOptions::new().read(true).append(true).open(&path)?;
        let checkers = make_checkers(&header_line);
        Ok(SessionLog::empty(id, path, file, header_line, checkers, policy))
    }

    fn empty(
        id: &str,
        path: PathBuf,
        file: File,
        header: String,
        checkers: Vec<LogChecker>,
        policy: SyncPolicy,
    ) -> SessionLog {
        SessionLog {
            id: id.to_owned(),
            path,
            file,
            index: HistoryIndex::new(header.clone()),
            header,
            pending: Vec::new(),
            pending_since: None,
            rules: StructureRules::default(),
            checkers,
            surface: Vec::new(),
            message_ids: HashSet::new(),
            last_request_header: None,
            fatal: None,
            policy,
            echo: None,
            unechoed: Vec::new(),
        }
    }

    /// Opens an existing log for appending, repairing a crash first (see the module doc). With
    /// `close_open_turn`, a turn left open is closed as `interrupted`.
    pub fn open(
        path: &Path,
        make_checkers: impl FnOnce(&str) -> Vec<LogChecker>,
        policy: SyncPolicy,
        now_ms: u64,
        close_open_turn: bool,
    ) -> Result<(SessionLog, Repair), OpenError> {
        let io_error = |reason| OpenError::Io { path: path.to_owned(), reason };
        let mut start = [0u8; 4];
        let read = File::open(path).and_then(|mut file| file.read(&mut start)).map_err(io_error)?;
        if is_compressed(&start[..read]) {
            return Err(OpenError::Compressed { path: path.to_owned() });
        }
        let mut reader = LogReader::open(path).map_err(|reason| OpenError::Read { path: path.to_owned(), reason })?;
        let header = reader.header().to_owned();
        let id = serde_json::from_str::<Value>(&header)
            .ok()
            .and_then(|value| value.get("id")?.as_str().map(str::to_owned))
            .unwrap_or_default();
        let file = OpenOptions::new().read(true).append(true).open(path).map_err(io_error)?;
        let checkers = make_checkers(&header);
        let mut log = SessionLog::empty(&id, path.to_owned(), file, header, checkers, policy);
        let mut repair = Repair::default();
        let mut torn = None;
        while let Some(next) = reader.next_event() {
            match next.map_err(|error| OpenError::Read { path: path.to_owned(), reason: error.into() })? {
                Ok(event) => {
                    let mut violations = Vec::new();
                    let interpret = !event.ignorable || KNOWN_EVENT_TYPES.contains(&event.event_type);
                    log.rules.check(event.seq, event.time, event.event_type, event.data, interpret, &mut violations);
                    if interpret {
                        let view = event_ref(
                            event.event_type,
                            event.seq.unwrap_or(0.0) as u64,
                            event.time.unwrap_or(0.0),
                            event.data,
                        );
                        log.checkers.retain_mut(|check| match check_event(check, view) {
                            Checked::Accepted => true,
                            Checked::Refused(message) => {
                                violations.push(message);
                                true
                            }
                            Checked::Failed => false,
                        });
                    }
                    let seq = event.seq.map_or_else(|| "?".to_owned(), js::number);
                    repair.warnings.extend(violations.into_iter().map(|message| format!("seq {seq}: {message}")));
                    log.take_in(event.event_type, event.line, event.data);
                }
                Err(Damage::Torn { at, len }) => torn = Some((at, len)),
                Err(Damage::Corrupt { at, reason }) => {
                    return Err(OpenError::Corrupt { path: path.to_owned(), at, reason })
                }
            }
        }
        if let Some((at, len)) = torn {
            let backup = path.with_file_name(format!("{LOG_FILE}.torn-{now_ms}"));
            log.cut_torn_tail(at.offset, &backup).map_err(io_error)?;
            repair.torn = Some((at, len, backup));
        }
        if close_open_turn {
            repair.closers = log.close_open_turn(now_ms).map_err(|err| io_error(io::Error::other(err.to_string())))?;
        }
        Ok((log, repair))
    }

    fn cut_torn_tail(&mut self, offset: u64, backup: &Path) -> io::Result<()> {
        let mut tail = Vec::new();
        self.file.seek(SeekFrom::Start(offset))?;
        self.file.read_to_end(&mut tail)?;
        fsutil::write_atomic(backup, &tail)?;
        self.file.set_len(offset)?;
        self.file.sync_all()
    }

    /// Appends the closers of a turn left open (a crash): a synthetic error result for each tool
    /// call without one, `step/end`, then `turn/end {reason: {kind: interrupted}}`. Returns the
    /// types appended.
    pub fn close_open_turn(&mut self, now_ms: u64) -> Result<Vec<String>, AppendError> {
        let Some(turn) = self.rules.open_turn() else {
            return Ok(Vec::new());
        };
        let mut closers = Vec::new();
        if let Some(step) = self.rules.open_step() {
            let mut calls: Vec<String> = self.rules.pending_calls().map(str::to_owned).collect();
            calls.sort();
            for call_id in calls {
                let data = json!({
                    "turn": turn, "step": step, "callId": call_id,
                    "message": {"role": "tool", "content": [{"type": "text", "text": "The host stopped before this tool call finished; its outcome is unknown."}], "source": {"kind": "tool", "callId": call_id}},
                    "error": {"message": "the host stopped before this tool call finished", "code": "TOOL_OUTCOME_UNKNOWN"},
                });
                self.append(NewEvent::new("tool/result", &data), now_ms)?;
                closers.push("tool/result".to_owned());
            }
            self.append(NewEvent::new("step/end", &json!({"turn": turn, "step": step})), now_ms)?;
            closers.push("step/end".to_owned());
        }
        self.append(NewEvent::new("turn/end", &json!({"turn": turn, "reason": {"kind": "interrupted"}})), now_ms)?;
        closers.push("turn/end".to_owned());
        self.commit()?;
        Ok(closers)
    }

    /// Also hands every appended line to `echo`, once it is committed (`dsh run --json`): a line
    /// seen there survives any crash.
    pub fn set_echo(&mut self, echo: Echo) {
        self.echo = Some(echo);
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &str {
        &self.header
    }

    pub fn index(&self) -> &HistoryIndex {
        &self.index
    }

    pub fn rules(&self) -> &StructureRules {
        &self.rules
    }

    /// The model-visible history, in order.
    pub fn surface(&self) -> &[SurfaceMessage] {
        &self.surface
    }

    /// Whether a `user/message` with this id is already in the log.
    pub fn has_message(&self, id: &str) -> bool {
        self.message_ids.contains(id)
    }

    /// The `data` of the last `request/header`.
    pub fn last_request_header(&self) -> Option<&str> {
        self.last_request_header.as_deref()
    }

    /// Updates the derived state with an event that is (or is about to be) in the log.
    fn take_in(&mut self, event_type: &str, line: &str, data: &str) {
        self.index.observe(event_type, line, data);
        match event_type {
            "user/message" | "assistant/message" => {
                if let Ok(value) = serde_json::from_str::<Value>(data) {
                    if event_type == "user/message" {
                        if let Some(id) = value.get("id").and_then(Value::as_str) {
                            self.message_ids.insert(id.to_owned());
                        }
                        self.surface.push(SurfaceMessage { role: "user", text: message_text(&value) });
                    } else {
                        let message = value.get("message").cloned().unwrap_or(Value::Null);
                        self.surface.push(SurfaceMessage { role: "assistant", text: message_text(&message) });
                    }
                }
            }
            "request/header" => self.last_request_header = Some(data.to_owned()),
            _ => {}
        }
    }

    /// Appends one event (buffered); see [`SessionLog::commit`] for durability.
    pub fn append(&mut self, event: NewEvent<'_>, now_ms: u64) -> Result<Appended, AppendError> {
        if let Some(reason) = &self.fatal {
            return Err(AppendError::Fatal { path: self.path.clone(), reason: reason.clone() });
        }
        let seq = self.rules.next_seq();
        let time = self.rules.last_time().map_or(now_ms, |last| now_ms.max(last as u64));
        let mut violations = Vec::new();
        let mut probe = self.rules.clone();
        probe.check(Some(seq as f64), Some(time as f64), event.event_type, &event.data, true, &mut violations);
        if !violations.is_empty() {
            return Err(AppendError::Structure {
                event_type: event.event_type.to_owned(),
                violations: violations.join("; "),
            });
        }
        let view = event_ref(event.event_type, seq, time as f64, &event.data);
        let mut refusal = None;
        self.checkers.retain_mut(|check| {
            if refusal.is_some() {
                return true;
            }
            match check_event(check, view) {
                Checked::Accepted => true,
                Checked::Refused(message) => {
                    refusal = Some(AppendError::Refused { row: check.row_id.clone(), message });
                    true
                }
                Checked::Failed => false,
            }
        });
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        self.rules = probe;
        let surface = matches!(event.event_type, "user/message" | "assistant/message" | "tool/result");
        let line = format!(
            "{{\"type\":{},\"seq\":{seq},\"time\":{time},\"data\":{}{}{}}}",
            js::to_string(event.event_type),
            event.data,
            if event.ignorable { ",\"ignorable\":true" } else { "" },
            if surface { ",\"surfaceOp\":\"append\"" } else { "" },
        );
        self.take_in(event.event_type, &line, &event.data);
        self.pending.extend_from_slice(line.as_bytes());
        self.pending.push(b'\n');
        if self.echo.is_some() {
            self.unechoed.push(line);
        }
        let at = Instant::now();
        let oldest = *self.pending_since.get_or_insert(at);
        if at.duration_since(oldest) >= SYNC_INTERVAL {
            self.commit()?;
        }
        Ok(Appended { seq, time, at })
    }

    /// Writes the buffered events and syncs them to disk.
    pub fn commit(&mut self) -> Result<(), AppendError> {
        if let Some(reason) = &self.fatal {
            return Err(AppendError::Fatal { path: self.path.clone(), reason: reason.clone() });
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let written = self.file.write_all(&self.pending).and_then(|()| match self.policy {
            SyncPolicy::Durable => self.file.sync_data(),
            SyncPolicy::Unsynced => Ok(()),
        });
        match written {
            Ok(()) => {
                self.pending.clear();
                self.pending_since = None;
                if let Some(echo) = &mut self.echo {
                    for line in self.unechoed.drain(..) {
                        echo(&line);
                    }
                }
                Ok(())
            }
            Err(err) => {
                let reason = err.to_string();
                self.fatal = Some(reason.clone());
                Err(AppendError::Fatal { path: self.path.clone(), reason })
            }
        }
    }
}

fn event_ref<'a>(event_type: &'a str, seq: u64, time: f64, data: &'a str) -> EventRef<'a> {
    EventRef { event_type: RStr::from_str(event_type), seq, time, data: RStr::from_str(data) }
}

/// What a checker made of one event.
enum Checked {
    Accepted,
    Refused(String),
    /// The checker failed; it leaves the session.
    Failed,
}

/// Feeds one event to a checker. A warning (report mode) is logged and accepts the event; a
/// failure is logged, and the caller drops the checker from the session.
fn check_event(check: &mut LogChecker, event: EventRef<'_>) -> Checked {
    match check.checker.check_event(event) {
        RResult::ROk(Verdict::Accept) => Checked::Accepted,
        RResult::ROk(Verdict::Refuse(message)) => Checked::Refused(message.into_string()),
        RResult::ROk(Verdict::Warn(message)) => {
            tracing::warn!(row = check.row_id, "row \"{}\": {message}", check.row_id);
            Checked::Accepted
        }
        RResult::RErr(err) => {
            tracing::warn!(
                row = check.row_id,
                "row \"{}\": checker failed and is dropped from the session: {}",
                check.row_id,
                err.message
            );
            Checked::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use abi_stable::sabi_trait::TD_Opaque;
    use dsh_abi::{PluginError, SessionChecker, SessionChecker_TO};

    use super::*;

    /// A checker that fails on every event, counting how often it is asked.
    struct Failing(Arc<AtomicUsize>);

    impl SessionChecker for Failing {
        fn check_event(&mut self, _event: EventRef<'_>) -> RResult<Verdict, PluginError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            RResult::RErr(PluginError::failed("broken"))
        }
    }

    #[test]
    fn a_checker_that_fails_is_dropped_and_the_events_are_written() {
        let sessions = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let checker = SessionChecker_TO::from_value(Failing(Arc::clone(&calls)), TD_Opaque);
        let mut log = SessionLog::create(
            sessions.path(),
            "s",
            &json!({"type": "session", "version": 0, "id": "s", "createdAt": 1, "delegationDepth": 0}),
            |_| vec![LogChecker { row_id: "broken".into(), checker }],
            SyncPolicy::Unsynced,
        )
        .unwrap();
        log.append(NewEvent::new("turn/start", &json!({"turn": 1})), 5).unwrap();
        log.append(NewEvent::new("turn/end", &json!({"turn": 1, "reason": {"kind": "done"}})), 6).unwrap();
        log.commit().unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let written = std::fs::read_to_string(log.path()).unwrap();
        assert_eq!(written.lines().count(), 3, "{written}");
    }
}
