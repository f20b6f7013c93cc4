//! An open session log: the [`writer`](super::writer) that makes lines durable, the
//! [`gate`](super::gate) every event passes first, the [`state`](super::state) derived from the
//! events, and [`repair`](super::repair) when an existing log is opened after a crash.
//!
//! Every event passes the structure rules and every checker plugin before it is written (a
//! refused retry record is never written). Events are made durable at the points the agent loop
//! asks for — before a request is sent, after `llm/retry` (before its wait), after
//! `llm/retry-started`, at `turn/end` — and at the latest 200 ms after the oldest unsynced append.
//!
//! Opening an existing log repairs a crash: a torn last line is copied to
//! `session.jsonl.torn-<time>` and cut off; damage anywhere else is refused with its line and byte
//! offset (nothing after it is silently dropped); an interrupted turn gets its closers appended.

use std::io;

use dsh_abi::js;
use serde_json::Value;
use tokio::time::Instant;

use super::conversation::SurfaceMessage;
use super::format::Format;
use super::gate::{Finder, Finding, Gate, GateEvent, RowChecker};
use super::index::HistoryIndex;
pub use super::new_event::NewEvent;
use super::reader::{Damage, LogReader, Position, ReadError, MAX_LINE_BYTES};
use super::repair::{self, Repair};
use super::state::SessionState;
use super::store::{LogRef, OpenSinkError, SessionLock, SessionStore};
use super::structure::{header_violations, Rule, StructureRules};
use super::vocabulary;
use super::writer::{Echo, LogWriter, Sink, SyncPolicy, WriteFailed};

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
    #[error("refusing to append {event_type}: {violation}")]
    Structure { event_type: String, violation: String },
    /// The event's line would be longer than a log line may hold ([`MAX_LINE_BYTES`]); it was
    /// not written, and the log stays usable.
    #[error("refusing to append {event_type}: its line would take {bytes} bytes, more than the {} MiB ({MAX_LINE_BYTES} bytes) a session log line may hold", MAX_LINE_BYTES >> 20)]
    TooLong { event_type: String, bytes: usize },
    /// Writing or syncing failed; the log accepts nothing more.
    #[error(transparent)]
    Fatal(#[from] WriteFailed),
}

/// The most an event's envelope adds to its `data` and type: the widest `seq` and `time` (safe
/// integers), `ignorable`, `surfaceOp` and the newline.
const ENVELOPE_BYTES: usize = 128;

/// Whether an event of `event_type` with `data` (its JSON text) fits in one log line, whatever
/// `seq` and `time` it gets; `Err` says how long its line could be. Checked before anything of a
/// turn is written, so input that cannot be logged is refused without leaving a trace.
pub fn check_line_fits(event_type: &str, data: &str) -> Result<(), AppendError> {
    let bytes = data.len() + event_type.len() + ENVELOPE_BYTES;
    if bytes > MAX_LINE_BYTES {
        return Err(AppendError::TooLong { event_type: event_type.to_owned(), bytes });
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{log}: {reason}")]
    Read { log: String, reason: ReadError },
    #[error("{log}: line {} (byte {}): {reason}; refusing to write after it (repair or move the file by hand; later events were not dropped)", at.line, at.offset)]
    Corrupt { log: String, at: Position, reason: String },
    #[error("{log}: line {} (byte {}): {message}; refusing to write after it (dsh session repair does not change what was written: fix or move the file by hand)", at.line, at.offset)]
    Violation { log: String, at: Position, message: String },
    #[error("{log}: compressed logs (DeepSeek Harness session.jsonl.zstd) are read-only; `dsh session import` makes a plain copy")]
    Compressed { log: String },
    #[error("{log}: {reason}")]
    Io { log: String, reason: io::Error },
    #[error(transparent)]
    Upgrade(#[from] super::upgrade::UpgradeError),
}

/// An open session log.
pub struct SessionLog {
    id: String,
    header: String,
    location: LogRef,
    writer: LogWriter,
    gate: Gate,
    state: SessionState,
}

impl SessionLog {
    /// Creates session `id` in `store` with its header line, durably and atomically: the log
    /// appears complete with its header or not at all (a file's new directory entries are
    /// synced too; a database row is committed). `open_checkers` opens the checkers for the
    /// header.
    pub fn create(
        store: &SessionStore,
        id: &str,
        header: &Value,
        open_checkers: impl FnOnce(&str) -> Vec<RowChecker>,
        policy: SyncPolicy,
    ) -> io::Result<SessionLog> {
        let header_line = js::to_string(header);
        let (location, sink) = store.create(id, &header_line)?;
        let checkers = open_checkers(&header_line);
        Ok(SessionLog::assemble(id, location, sink, header_line, checkers, policy))
    }

    fn assemble(
        id: &str,
        location: LogRef,
        sink: Box<dyn Sink>,
        header: String,
        checkers: Vec<RowChecker>,
        policy: SyncPolicy,
    ) -> SessionLog {
        SessionLog {
            id: id.to_owned(),
            gate: Gate::for_header(&header, checkers),
            state: SessionState::new(header.clone()),
            header,
            location,
            writer: LogWriter::new(sink, policy),
        }
    }

    /// Opens an existing log for appending under its writer `lock` ([`LogRef::lock`]),
    /// repairing a crash first (see the module doc). A log that breaks an integrity rule (a seq
    /// gap, time going back, an unknown required event, a bad header) is refused. With
    /// `close_open_turn`, a turn left open is closed as `interrupted`. A v1–v3 log is upgraded
    /// to v4 beside it first, and the v4 log is the one opened ([`super::upgrade::for_writing`]).
    pub fn open(
        location: &LogRef,
        lock: SessionLock,
        open_checkers: impl FnOnce(&str) -> Vec<RowChecker>,
        policy: SyncPolicy,
        now_ms: u64,
        close_open_turn: bool,
    ) -> Result<(SessionLog, Repair), OpenError> {
        let (location, lock) = super::upgrade::for_writing(location, lock)?;
        let location = &location;
        let name = location.name();
        let io_error = |reason| OpenError::Io { log: name.clone(), reason };
        let (mut reader, sink) = lock.open().map_err(|err| match err {
            OpenSinkError::Compressed => OpenError::Compressed { log: name.clone() },
            OpenSinkError::Read(reason) => OpenError::Read { log: name.clone(), reason },
            OpenSinkError::Io(reason) => io_error(reason),
        })?;
        let header = reader.header().to_owned();
        if let Some(message) = header_violations(&header).into_iter().next() {
            return Err(OpenError::Violation { log: name, at: Position { line: 1, offset: 0 }, message });
        }
        let id = serde_json::from_str::<Value>(&header)
            .ok()
            .and_then(|value| value.get("id")?.as_str().map(str::to_owned))
            .unwrap_or_default();
        let checkers = open_checkers(&header);
        let mut log = SessionLog::assemble(&id, location.clone(), sink, header, checkers, policy);
        let mut repair = Repair::default();
        let torn = log.take_in_existing(&mut reader, &mut repair)?;
        if let Some((at, len)) = torn {
            let (Some(path), Some(file)) = (location.file_path(), log.writer.file()) else {
                let reason = "the last stored line is not an event".to_owned();
                return Err(OpenError::Corrupt { log: name, at, reason });
            };
            let mut backup_name = path.file_name().unwrap_or_default().to_owned();
            backup_name.push(format!(".torn-{now_ms}"));
            let backup = path.with_file_name(backup_name);
            repair::cut_torn_tail(file, at.offset, &backup).map_err(io_error)?;
            repair.torn = Some((at, len, backup));
        }
        if close_open_turn {
            repair.closers = log.close_open_turn(now_ms).map_err(|err| io_error(io::Error::other(err.to_string())))?;
        }
        Ok((log, repair))
    }

    /// Passes every event already in the log through the gate and into the state; returns a
    /// torn last line's place.
    fn take_in_existing(
        &mut self,
        reader: &mut LogReader,
        repair: &mut Repair,
    ) -> Result<Option<(Position, usize)>, OpenError> {
        let name = self.location.name();
        let mut torn = None;
        let mut found = Vec::new();
        while let Some(next) = reader.next_event() {
            match next.map_err(|error| OpenError::Read { log: name.clone(), reason: error.into() })? {
                Ok(event) => {
                    self.gate.observe(&GateEvent::from(&event), &mut found);
                    if let Some(broken) =
                        found.iter().position(|finding| finding.finder == Finder::Rules(Rule::Integrity))
                    {
                        let message = found.swap_remove(broken).message;
                        return Err(OpenError::Violation { log: name, at: event.at, message });
                    }
                    let seq = event.seq.map_or_else(|| "?".to_owned(), js::number);
                    repair.warnings.extend(found.drain(..).map(|finding| format!("seq {seq}: {}", finding.describe())));
                    let seq = event.seq.filter(|seq| js::is_safe_integer(*seq) && *seq >= 0.0).map(|seq| seq as u64);
                    self.state.take_in(event.event_type, seq, event.line, event.data);
                }
                Err(Damage::Torn { at, len }) => torn = Some((at, len)),
                Err(Damage::Corrupt { at, reason }) => return Err(OpenError::Corrupt { log: name, at, reason }),
            }
        }
        self.gate.finish(&mut found);
        repair.warnings.extend(found.drain(..).map(|finding| format!("line 1 (byte 0): {}", finding.describe())));
        Ok(torn)
    }

    /// Appends the closers of a turn left open (a crash) and commits them. Returns the types
    /// appended.
    pub fn close_open_turn(&mut self, now_ms: u64) -> Result<Vec<String>, AppendError> {
        let closers = repair::closers(self.gate.rules());
        let mut appended = Vec::new();
        for (event_type, data, source_seqs) in closers {
            self.append(NewEvent { source_seqs, ..NewEvent::new(event_type, &data) }, now_ms)?;
            appended.push(event_type.to_owned());
        }
        self.commit()?;
        Ok(appended)
    }

    /// Marks where the history a new process restored ends, as DeepSeek Harness 0.2 does on
    /// every write-open: a `session/end-seed` in a v4 log that holds events and does not end with
    /// one already (a v0 log is left as it is).
    pub fn mark_restored(&mut self, now_ms: u64) -> Result<(), AppendError> {
        let rules = self.gate.rules();
        let Some(v4) = rules.v4() else { return Ok(()) };
        if rules.next_seq() == 0 || v4.ends_with_seed() {
            return Ok(());
        }
        self.append(NewEvent::raw(dsh_abi::events::SESSION_END_SEED, "{}".to_owned()), now_ms)?;
        self.commit()
    }

    /// Also hands every appended line to `echo`, once it is committed (`dsh run --json`): a line
    /// seen there survives any crash.
    pub fn set_echo(&mut self, echo: Echo) {
        self.writer.set_echo(echo);
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the log is: its file, or its session in a database.
    pub fn location(&self) -> &LogRef {
        &self.location
    }

    pub fn header(&self) -> &str {
        &self.header
    }

    pub fn index(&self) -> &HistoryIndex {
        self.state.index()
    }

    pub fn rules(&self) -> &StructureRules {
        self.gate.rules()
    }

    /// The model-visible history, in order.
    pub fn surface(&self) -> &[SurfaceMessage] {
        self.state.surface()
    }

    /// Whether a `user/message` with this id is already in the log.
    pub fn has_message(&self, id: &str) -> bool {
        self.state.has_message(id)
    }

    /// The `data` of the last `request/header`.
    pub fn last_request_header(&self) -> Option<&str> {
        self.state.last_request_header()
    }

    /// The tool calls of the open step that no result answers yet: after a crash, the calls
    /// whose answer was lost.
    pub fn open_calls(&self) -> &[crate::state::OpenCall] {
        self.state.open_calls()
    }

    /// Appends one event (buffered) once the gate admits it, with every secret the process knows
    /// taken out of it ([`crate::redact`]); see [`SessionLog::commit`] for durability. In a v4
    /// log the event takes v4's shape first ([`encode_v4`](super::encode_v4)), which may put a
    /// `system/message` before or after it; the place of the event itself is returned.
    pub fn append(&mut self, event: NewEvent<'_>, now_ms: u64) -> Result<Appended, AppendError> {
        if self.gate.rules().format() == Format::V0 {
            return self.append_as_shaped(event, now_ms);
        }
        let event_type = event.event_type;
        let mut placed = None;
        for encoded in super::encode_v4::encode(event, self.gate.rules(), now_ms) {
            let own = encoded.event_type == event_type;
            let appended = self.append_as_shaped(encoded, now_ms)?;
            placed = placed.or(own.then_some(appended));
        }
        Ok(placed.expect("an event is always written as itself"))
    }

    /// Appends an event already in the shape of the log's format, as [`SessionLog::append`]
    /// does after encoding it (a migration's events are shaped by the migration).
    pub fn append_as_shaped(&mut self, event: NewEvent<'_>, now_ms: u64) -> Result<Appended, AppendError> {
        self.writer.usable()?;
        let rules = self.gate.rules();
        let seq = rules.next_seq();
        let time = rules.last_time().map_or(now_ms, |last| now_ms.max(last as u64));
        let known = crate::redact::known();
        let data = known.redact_json(&event.data);
        let surface = vocabulary::is_surface(rules.format(), event.event_type);
        let line = super::new_event::envelope_line(&event, &data, seq, time, surface);
        if line.len() + 1 > MAX_LINE_BYTES {
            return Err(AppendError::TooLong { event_type: event.event_type.to_owned(), bytes: line.len() + 1 });
        }
        let candidate = GateEvent {
            event_type: event.event_type,
            seq: Some(seq as f64),
            time: Some(time as f64),
            data: &data,
            ignorable: event.ignorable,
            line: &line,
        };
        self.gate.admit(&candidate).map_err(|finding| refusal(event.event_type, finding))?;
        self.state.take_in(event.event_type, Some(seq), &line, &data);
        let at = self.writer.push(line, seq, event.event_type)?;
        Ok(Appended { seq, time, at })
    }

    /// Writes the buffered events and syncs them to disk.
    pub fn commit(&mut self) -> Result<(), AppendError> {
        Ok(self.writer.commit()?)
    }
}

fn refusal(event_type: &str, finding: Finding) -> AppendError {
    match finding.finder {
        Finder::Refused { row } => AppendError::Refused { row, message: finding.message },
        _ => AppendError::Structure { event_type: event_type.to_owned(), violation: finding.message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A new log `s` in files under `sessions`, without checkers or syncs.
    fn scratch_log(sessions: &std::path::Path) -> SessionLog {
        let header = json!({"type": "session", "version": 0, "id": "s", "createdAt": 1, "delegationDepth": 0});
        let store = SessionStore::files(sessions.to_owned());
        SessionLog::create(&store, "s", &header, |_| Vec::new(), SyncPolicy::Unsynced).unwrap()
    }

    fn file_of(log: &SessionLog) -> std::path::PathBuf {
        log.location().file_path().expect("a file log").to_owned()
    }

    #[test]
    fn a_created_log_holds_its_header_and_every_committed_event() {
        let sessions = tempfile::tempdir().unwrap();
        let mut log = scratch_log(sessions.path());
        log.append(NewEvent::new("turn/start", &json!({"turn": 1})), 5).unwrap();
        log.append(NewEvent::new("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}})), 6).unwrap();
        log.commit().unwrap();
        let written = std::fs::read_to_string(file_of(&log)).unwrap();
        assert_eq!(written.lines().count(), 3, "{written}");
    }

    fn padded(len: usize) -> NewEvent<'static> {
        NewEvent { ignorable: true, ..NewEvent::raw("test/pad", format!("{{\"pad\":\"{}\"}}", "a".repeat(len))) }
    }

    #[test]
    fn a_line_of_exactly_the_reader_limit_is_written_and_read_back_and_one_byte_more_is_refused() {
        let sessions = tempfile::tempdir().unwrap();
        let mut log = scratch_log(sessions.path());
        let envelope = r#"{"type":"test/pad","seq":0,"time":5,"data":{"pad":""},"ignorable":true}"#.len() + 1;
        let err = log.append(padded(MAX_LINE_BYTES - envelope + 1), 5).unwrap_err();
        assert!(matches!(err, AppendError::TooLong { bytes, .. } if bytes == MAX_LINE_BYTES + 1), "{err}");
        log.append(padded(MAX_LINE_BYTES - envelope), 5).unwrap();
        log.commit().unwrap();
        assert_eq!(std::fs::metadata(file_of(&log)).unwrap().len() as usize, log.header().len() + 1 + MAX_LINE_BYTES);
        let mut reader = LogReader::open(&file_of(&log)).unwrap();
        assert!(matches!(reader.next_event(), Some(Ok(Ok(_)))), "the reader takes the longest line the writer writes");
        assert!(reader.next_event().is_none());
    }

    #[test]
    fn the_turn_check_refuses_data_that_could_not_be_one_line() {
        let fits = format!("{{\"pad\":\"{}\"}}", "a".repeat(MAX_LINE_BYTES - 300));
        check_line_fits("user/message", &fits).unwrap();
        let over = format!("{{\"pad\":\"{}\"}}", "a".repeat(MAX_LINE_BYTES));
        let err = check_line_fits("user/message", &over).unwrap_err();
        assert!(err.to_string().contains("more than the 64 MiB (67108864 bytes) a session log line may hold"), "{err}");
    }

    #[test]
    fn an_event_that_breaks_the_structure_is_not_written() {
        let sessions = tempfile::tempdir().unwrap();
        let mut log = scratch_log(sessions.path());
        let err = log.append(NewEvent::new("step/start", &json!({"turn": 1, "step": 1})), 5).unwrap_err();
        assert!(matches!(err, AppendError::Structure { .. }), "{err}");
        log.commit().unwrap();
        assert_eq!(std::fs::read_to_string(file_of(&log)).unwrap().lines().count(), 1);
    }
}
