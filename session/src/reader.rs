//! Reading session logs, ours and DeepSeek Harness's, as a stream.
//!
//! A log is a header line then one event envelope per line (`{"type","seq","time","data",…}`).
//! Compressed files are decompressed on the fly (every zstd frame in turn). In a v0 log, packed
//! chunk rows (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`) expand to one
//! `assistant/chunk` per member with their exact seq and time; a v4 log has none (its streams are
//! inside the messages), so there such a row is an event of an unknown type. Lines are read into one reused buffer and only the
//! envelope is parsed: `data` stays raw JSON until a rule needs it. Nothing is mapped or loaded
//! whole.
//!
//! Damage is reported, never skipped silently: a last line without its newline, or a last line
//! that does not parse, is a torn write (a crash artefact); an unparseable line anywhere else is
//! corruption, reported with its physical line number (the header is line 1) and the byte offset
//! where it starts.

use dsh_abi::events;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::format::{Format, UnknownFormat};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Whether a file starting with these bytes is zstd-compressed (`session.jsonl.zstd`).
pub fn is_compressed(start: &[u8]) -> bool {
    start.starts_with(&ZSTD_MAGIC)
}
const BUFFER_BYTES: usize = 256 * 1024;

/// The longest line a log may hold: 64 MiB, as long as the longest stream the adapter reads. A
/// longer line is damage (it is skipped without being held in memory), in plain and zstd logs.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Reads one line (with its newline, if any) from `input` into `kept`, keeping at most `limit`
/// bytes of it and skipping the rest without holding it; returns the bytes the line took.
pub fn read_bounded_line(input: &mut impl BufRead, kept: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
    let mut read = 0usize;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if available.is_empty() {
            return Ok(read);
        }
        let (taken, done) = match memchr::memchr(b'\n', available) {
            Some(newline) => (newline + 1, true),
            None => (available.len(), false),
        };
        let room = limit.saturating_sub(kept.len());
        kept.extend_from_slice(&available[..taken.min(room)]);
        input.consume(taken);
        read += taken;
        if done {
            return Ok(read);
        }
    }
}

/// Where in the file a line starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Physical line number, from 1 (the header).
    pub line: u64,
    /// Byte offset of the line's first byte (in the decompressed stream for zstd files).
    pub offset: u64,
}

/// A line that could not be read as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The last line is cut short (no newline) or does not parse: a crash artefact.
    Torn { at: Position, len: usize },
    /// An unparseable line that is not the last one.
    Corrupt { at: Position, reason: String },
}

impl Damage {
    /// `line N (byte B)`, where the damaged line starts.
    pub fn position(&self) -> String {
        let (Damage::Torn { at, .. } | Damage::Corrupt { at, .. }) = self;
        format!("line {} (byte {})", at.line, at.offset)
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Torn { at, len } => {
                write!(f, "line {} (byte {}): torn last line of {len} bytes, a crash artefact", at.line, at.offset)
            }
            Damage::Corrupt { at, reason } => write!(f, "line {} (byte {}): {reason}", at.line, at.offset),
        }
    }
}

/// Why a log cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Store(#[from] crate::store_error::StoreError),
    #[error("line 1 (byte 0): {0}")]
    BadHeader(String),
    #[error("the log is empty (no header line)")]
    Empty,
    #[error("line 1 (byte 0): {0}")]
    Format(#[from] UnknownFormat),
    #[error("the format v{generation} log cannot be read as v4, as DeepSeek Harness 0.2 reads it: {reason}")]
    NotMigrated { generation: u32, reason: String },
}

/// One event, borrowed from the reader's buffers.
#[derive(Debug, Clone, Copy)]
pub struct EventView<'a> {
    pub event_type: &'a str,
    /// `None` when the envelope has no numeric seq.
    pub seq: Option<f64>,
    pub time: Option<f64>,
    /// The raw `data` JSON (`null` when absent).
    pub data: &'a str,
    pub ignorable: bool,
    /// A member of a v0 packed row (one physical line, `at`, holds them all).
    pub packed: bool,
    /// The whole line (for packed members, a synthesised envelope).
    pub line: &'a str,
    pub at: Position,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(default)]
    seq: Option<f64>,
    #[serde(default)]
    time: Option<f64>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
    #[serde(default)]
    ignorable: Option<bool>,
    #[serde(default, rename = "seq0")]
    first_seq: Option<f64>,
    #[serde(default, rename = "time0")]
    first_time: Option<f64>,
}

/// The delta type of each packed row kind, and the field of its member texts.
fn packed_kind(event_type: &str) -> Option<(&'static str, &'static str)> {
    match event_type {
        "text-chunks" => Some(("text-delta", "texts")),
        "reasoning-chunks" => Some(("reasoning-delta", "texts")),
        "tool-call-chunks" => Some(("tool-call-delta", "deltas")),
        _ => None,
    }
}

struct Synthetic {
    event_type: &'static str,
    seq: f64,
    time: f64,
    data: String,
    line: String,
    at: Position,
}

/// The lines of a log file, decompressed when it is `session.jsonl.zstd`.
pub fn open_lines(path: &Path) -> io::Result<Box<dyn BufRead + Send>> {
    let mut file = BufReader::with_capacity(BUFFER_BYTES, crate::fsutil::open_regular(path)?);
    Ok(match is_compressed(file.fill_buf()?) {
        true => Box::new(BufReader::with_capacity(BUFFER_BYTES, zstd::Decoder::with_buffer(file)?)),
        false => Box::new(file),
    })
}

/// A streaming reader over one log.
pub struct LogReader {
    input: Box<dyn BufRead + Send>,
    buffer: Vec<u8>,
    /// Physical line number of the line in `buffer`.
    line: u64,
    /// The line in `buffer` went past [`MAX_LINE_BYTES`]; its length, all of it.
    overlong: Option<u64>,
    /// Byte offset where the next line starts.
    offset: u64,
    pending: VecDeque<Synthetic>,
    current: Option<Synthetic>,
    header: String,
    format: Format,
    /// The generation the header names (0 to 4).
    generation: u32,
}

impl LogReader {
    /// Opens a log file (plain or zstd-compressed) and reads its header.
    pub fn open(path: &Path) -> Result<LogReader, ReadError> {
        LogReader::new(open_lines(path)?)
    }

    /// Reads a log from any buffered input; a generation read only through its migration
    /// ([`crate::format::MIGRATED_GENERATIONS`]) is [`UnknownFormat::Migrated`].
    pub fn new(input: Box<dyn BufRead + Send>) -> Result<LogReader, ReadError> {
        let reader = LogReader::source(input)?;
        match reader.generation {
            0 | 4 => Ok(reader),
            version => Err(UnknownFormat::Migrated { version }.into()),
        }
    }

    /// Reads a log of any generation dsh knows, v1–v3 as the events they hold (their packed
    /// rows expanded as v0's, in v1), for their migration to read.
    pub fn source(input: Box<dyn BufRead + Send>) -> Result<LogReader, ReadError> {
        let mut reader = LogReader {
            input,
            buffer: Vec::with_capacity(4096),
            line: 0,
            overlong: None,
            offset: 0,
            pending: VecDeque::new(),
            current: None,
            header: String::new(),
            format: Format::V0,
            generation: 0,
        };
        let read = reader.read_line()?;
        if read == 0 {
            return Err(ReadError::Empty);
        }
        let text =
            std::str::from_utf8(&reader.buffer).map_err(|_| ReadError::BadHeader("the header is not UTF-8".into()))?;
        let header: Value = serde_json::from_str(text.trim_end())
            .map_err(|err| ReadError::BadHeader(format!("unreadable header: {err}")))?;
        if header.get("type").and_then(Value::as_str) != Some("session") {
            return Err(ReadError::BadHeader(
                "the first line is not a session header ({\"type\":\"session\",…})".into(),
            ));
        }
        reader.generation = crate::format::generation_of_header(text)?;
        reader.format = if reader.generation <= 1 { Format::V0 } else { Format::V4 };
        reader.header = text.trim_end().to_owned();
        Ok(reader)
    }

    /// The generation the header names: 0 to 4.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The header line.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// The format the header names (for a v1–v3 source read by its migration, the one whose
    /// rows it shares: v0's packed chunks in v1, none after).
    pub fn format(&self) -> Format {
        self.format
    }

    /// Reads one line into `buffer`, keeping at most [`MAX_LINE_BYTES`] of it; returns the
    /// bytes the line took in the input.
    fn read_line(&mut self) -> io::Result<usize> {
        self.buffer.clear();
        self.overlong = None;
        let read = read_bounded_line(&mut self.input, &mut self.buffer, MAX_LINE_BYTES)?;
        if read > MAX_LINE_BYTES {
            self.overlong = Some(read as u64);
        }
        if read > 0 {
            self.line += 1;
            self.offset += read as u64;
        }
        Ok(read)
    }

    /// The next event, a damaged line, or `None` at the end of the log.
    pub fn next_event(&mut self) -> Option<io::Result<Result<EventView<'_>, Damage>>> {
        if let Some(member) = self.pending.pop_front() {
            self.current = Some(member);
            return Some(Ok(Ok(self.current_view())));
        }
        match self.read_line() {
            Err(err) => return Some(Err(err)),
            Ok(0) => return None,
            Ok(_) => {}
        }
        let len = self.buffer.len();
        if let Some(bytes) = self.overlong {
            let at = Position { line: self.line, offset: self.offset - bytes };
            let reason =
                format!("a line of {bytes} bytes, longer than the {} MiB a log line may hold", MAX_LINE_BYTES >> 20);
            return Some(Ok(Err(Damage::Corrupt { at, reason })));
        }
        let at = Position { line: self.line, offset: self.offset - len as u64 };
        let complete = self.buffer.last() == Some(&b'\n');
        let parsed =
            std::str::from_utf8(&self.buffer).map_err(|_| "the line is not UTF-8".to_owned()).and_then(|text| {
                let text = text.trim_end();
                serde_json::from_str::<Envelope<'_>>(text)
                    .map(|envelope| (text, envelope))
                    .map_err(|err| err.to_string())
            });
        let (text, envelope) = match parsed {
            Ok(_) if !complete => return Some(Ok(Err(Damage::Torn { at, len }))),
            Ok(parsed) => parsed,
            Err(_) if !complete => return Some(Ok(Err(Damage::Torn { at, len }))),
            Err(reason) => {
                return Some(match self.input.fill_buf() {
                    Err(err) => Err(err),
                    Ok([]) => Ok(Err(Damage::Torn { at, len })),
                    Ok(_) => Ok(Err(Damage::Corrupt { at, reason: describe_unparseable(&self.buffer, &reason) })),
                });
            }
        };
        if let Some((delta, members)) = packed_kind(&envelope.event_type).filter(|_| self.format == Format::V0) {
            let mut expanded = match expand_packed(&envelope, delta, members, at) {
                Ok(expanded) => expanded,
                Err(reason) => return Some(Ok(Err(Damage::Corrupt { at, reason }))),
            };
            let Some(first) = expanded.pop_front() else {
                return Some(Ok(Err(Damage::Corrupt { at, reason: "a packed row without members".into() })));
            };
            self.pending = expanded;
            self.current = Some(first);
            return Some(Ok(Ok(self.current_view())));
        }
        let event_type = match envelope.event_type {
            Cow::Borrowed(event_type) => event_type,
            Cow::Owned(_) => return Some(Ok(Err(Damage::Corrupt { at, reason: "the event type is escaped".into() }))),
        };
        Some(Ok(Ok(EventView {
            event_type,
            seq: envelope.seq,
            time: envelope.time,
            data: envelope.data.map_or("null", RawValue::get),
            ignorable: envelope.ignorable == Some(true),
            packed: false,
            line: text,
            at,
        })))
    }

    fn current_view(&self) -> EventView<'_> {
        let member = self.current.as_ref().expect("set before viewing");
        EventView {
            event_type: member.event_type,
            seq: Some(member.seq),
            time: Some(member.time),
            data: &member.data,
            ignorable: false,
            packed: true,
            line: &member.line,
            at: member.at,
        }
    }
}

fn describe_unparseable(line: &[u8], reason: &str) -> String {
    if !line.is_empty() && line.iter().all(|byte| *byte == 0 || *byte == b'\n') {
        format!("a run of {} NUL bytes", line.iter().filter(|byte| **byte == 0).count())
    } else {
        format!("unparseable event line ({reason})")
    }
}

/// Expands a packed row: member `i` has seq `seq0 + i`, time `time0 + dt[0] + … + dt[i-1]` and
/// data `{turn, step, chunk: {type: <delta>, index, text}}` (`argumentsDelta`-style members keep
/// their own fields).
fn expand_packed(
    envelope: &Envelope<'_>,
    delta: &'static str,
    members_key: &str,
    at: Position,
) -> Result<VecDeque<Synthetic>, String> {
    let data: Value =
        serde_json::from_str(envelope.data.map_or("null", RawValue::get)).map_err(|err| err.to_string())?;
    let (Some(first_seq), Some(first_time)) = (envelope.first_seq, envelope.first_time) else {
        return Err(format!("packed {} row without seq0/time0", envelope.event_type));
    };
    let members =
        data.get(members_key).and_then(Value::as_array).ok_or_else(|| format!("packed row without {members_key}"))?;
    let gaps = data.get("dt").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut time = first_time;
    let mut expanded = VecDeque::with_capacity(members.len());
    for (position, member) in members.iter().enumerate() {
        if position > 0 {
            time += gaps.get(position - 1).and_then(Value::as_f64).unwrap_or(0.0);
        }
        let mut chunk = serde_json::Map::new();
        chunk.insert("type".into(), Value::from(delta));
        chunk.insert("index".into(), data.get("index").cloned().unwrap_or(Value::Null));
        match member {
            Value::String(text) => {
                chunk.insert("text".into(), Value::from(text.as_str()));
            }
            Value::Object(fields) => chunk.extend(fields.clone()),
            other => {
                chunk.insert("text".into(), other.clone());
            }
        }
        let member_data = serde_json::json!({
            "turn": data.get("turn").cloned().unwrap_or(Value::Null),
            "step": data.get("step").cloned().unwrap_or(Value::Null),
            "chunk": chunk,
        });
        let seq = first_seq + position as f64;
        let data = dsh_abi::js::to_string(&member_data);
        let line = format!(
            "{{\"type\":\"assistant/chunk\",\"seq\":{},\"time\":{},\"data\":{data}}}",
            dsh_abi::js::number(seq),
            dsh_abi::js::number(time)
        );
        expanded.push_back(Synthetic { event_type: events::ASSISTANT_CHUNK, seq, time, data, line, at });
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn read_all(text: &str) -> (Vec<(String, f64, String)>, Vec<Damage>) {
        let mut reader = LogReader::new(Box::new(io::Cursor::new(text.as_bytes().to_vec()))).unwrap();
        let mut events = Vec::new();
        let mut damage = Vec::new();
        while let Some(next) = reader.next_event() {
            match next.unwrap() {
                Ok(event) => events.push((event.event_type.to_owned(), event.seq.unwrap(), event.data.to_owned())),
                Err(found) => damage.push(found),
            }
        }
        (events, damage)
    }

    #[test]
    fn events_come_with_raw_data_and_seq() {
        let (events, damage) =
            read_all(&format!("{HEADER}{{\"type\":\"turn/start\",\"seq\":0,\"time\":5,\"data\":{{\"turn\":1}}}}\n"));
        assert_eq!(events, [("turn/start".to_owned(), 0.0, "{\"turn\":1}".to_owned())]);
        assert!(damage.is_empty());
    }

    #[test]
    fn packed_rows_expand_to_one_chunk_per_member_with_exact_seq_and_time() {
        let text = format!(
            "{HEADER}{{\"type\":\"text-chunks\",\"seq0\":14,\"time0\":100,\"data\":{{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[0,2],\"texts\":[\"a\",\"b\",\"c\"]}}}}\n"
        );
        let mut reader = LogReader::new(Box::new(io::Cursor::new(text.into_bytes()))).unwrap();
        let mut seen = Vec::new();
        while let Some(next) = reader.next_event() {
            let event = next.unwrap().unwrap();
            seen.push((event.event_type.to_owned(), event.seq.unwrap(), event.time.unwrap(), event.data.to_owned()));
        }
        assert_eq!(
            seen,
            [
                (
                    "assistant/chunk".into(),
                    14.0,
                    100.0,
                    r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#.into()
                ),
                (
                    "assistant/chunk".into(),
                    15.0,
                    100.0,
                    r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}"#.into()
                ),
                (
                    "assistant/chunk".into(),
                    16.0,
                    102.0,
                    r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"c"}}"#.into()
                ),
            ]
        );
    }

    #[test]
    fn a_cut_last_line_is_torn_and_a_bad_middle_line_is_corrupt() {
        let good = "{\"type\":\"x\",\"seq\":0,\"time\":1,\"data\":{}}\n";
        let (_, damage) = read_all(&format!("{HEADER}{good}{{\"type\":\"x\",\"se"));
        assert_eq!(
            damage,
            [Damage::Torn { at: Position { line: 3, offset: (HEADER.len() + good.len()) as u64 }, len: 15 }]
        );
        let (events, damage) = read_all(&format!("{HEADER}garbage\n{good}"));
        assert_eq!(events.len(), 1, "the events after the damage are still read");
        assert!(
            matches!(&damage[..], [Damage::Corrupt { at: Position { line: 2, offset }, .. }] if *offset == HEADER.len() as u64)
        );
        let (_, damage) = read_all(&format!("{HEADER}garbage\n"));
        assert!(matches!(&damage[..], [Damage::Torn { .. }]), "an unparseable last line is torn");
    }

    #[test]
    fn a_nul_run_is_named_as_such() {
        let (_, damage) = read_all(&format!("{HEADER}\0\0\0\0\n{{\"type\":\"x\",\"seq\":0,\"time\":1}}\n"));
        assert!(
            matches!(&damage[..], [Damage::Corrupt { reason, .. }] if reason == "a run of 4 NUL bytes"),
            "{damage:?}"
        );
    }

    #[test]
    fn a_missing_or_foreign_header_is_refused() {
        assert!(matches!(LogReader::new(Box::new(io::Cursor::new(Vec::new()))), Err(ReadError::Empty)));
        let foreign = b"{\"type\":\"turn/start\"}\n".to_vec();
        assert!(matches!(LogReader::new(Box::new(io::Cursor::new(foreign))), Err(ReadError::BadHeader(_))));
    }
}
