//! A log of an older generation (v0–v3) as the format v4 log DeepSeek Harness 0.2 makes of it.
//!
//! The events are migrated as 0.2 migrates them ([`v0_to_v4`]: same events, same times, same
//! bytes where its are deterministic), each generation entering the chain at its own step, and
//! each passes the v4 gate on its way out, so a log that migrates is a sound v4 log and one that
//! cannot is refused at its line. v1–v3 logs are read this way wherever a log is read
//! ([`open`]: the v4 log is made in an anonymous file, nothing is published, as 0.2's read-only
//! open does); `crate::upgrade` publishes it beside the original.

use std::io::{self, BufReader, Seek, Write};
use std::path::Path;

use serde_json::{Map, Value};

mod v0_to_v4;
use v0_to_v4::Migration;

use crate::format::{Format, MIGRATED_GENERATIONS};
use crate::gate::{Gate, GateEvent};
use crate::new_event::envelope_line;
use crate::reader::{Damage, LogReader, Position, ReadError};

/// How many events a migration read and wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Events read from the older log.
    pub read: u64,
    /// Events in the v4 log (v4's system head and prompt changes are events of their own).
    pub written: u64,
}

/// Why a log cannot be migrated; nothing of it was published.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("line 1 (byte 0): its header cannot be migrated to v4: {0}")]
    Header(String),
    #[error("line {} (byte {}): {event_type} cannot be migrated to v4: {reason}", at.line, at.offset)]
    Refused { at: Position, event_type: String, reason: String },
    #[error("{0}")]
    Damaged(Damage),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Writes the v4 log that `source` (of generation 0 to 3) migrates to into `out`: the header
/// line, then every event, each checked by the v4 gate before it is written.
pub fn write_v4(source: &mut LogReader, out: &mut impl Write) -> Result<Counts, MigrateError> {
    let header = v4_header(source.header())?;
    writeln!(out, "{}", dsh_abi::js::to_string(&header))?;
    let id = header["id"].as_str().unwrap_or_default();
    let mut migration = Migration::new(id, source.generation());
    let mut gate = Gate::new(Format::V4, Vec::new());
    let mut counts = Counts { read: 0, written: 0 };
    while let Some(next) = source.next_event() {
        let event = next?.map_err(MigrateError::Damaged)?;
        let refused =
            |reason: String| MigrateError::Refused { at: event.at, event_type: event.event_type.to_owned(), reason };
        for shaped in migration.take(&event).map_err(refused)? {
            let new_event = shaped.as_new_event();
            let line = envelope_line(&new_event, &new_event.data, counts.written, shaped.time, is_surface(&shaped));
            let candidate = GateEvent {
                event_type: &shaped.event_type,
                seq: Some(counts.written as f64),
                time: Some(shaped.time as f64),
                data: &new_event.data,
                ignorable: shaped.ignorable,
                line: &line,
            };
            gate.admit(&candidate).map_err(|finding| refused(finding.message))?;
            writeln!(out, "{line}")?;
            counts.written += 1;
        }
        counts.read += 1;
    }
    Ok(counts)
}

fn is_surface(shaped: &v0_to_v4::Shaped) -> bool {
    crate::vocabulary::is_surface(Format::V4, &shaped.event_type)
}

/// The v4 header of an older one: `type, version, id, createdAt, [cwd], [parentSession],
/// isSeeded, [origin], delegationDepth, [agentPreset]` (v3 renamed the `code` preset `ptc`). A
/// forked (seeded) session's inherited cut is not migrated by dsh: it is refused.
fn v4_header(header: &str) -> Result<Value, MigrateError> {
    let old: Map<String, Value> =
        serde_json::from_str(header).map_err(|err| MigrateError::Header(format!("unreadable header: {err}")))?;
    if old.contains_key("seedLength") || old.get("isSeeded") == Some(&Value::Bool(true)) {
        return Err(MigrateError::Header("a forked (seeded) session is not migrated by dsh".into()));
    }
    let mut v4 = Map::new();
    v4.insert("type".into(), "session".into());
    v4.insert("version".into(), Format::V4.version().into());
    for key in ["id", "createdAt", "cwd", "parentSession"] {
        if let Some(value) = old.get(key) {
            v4.insert(key.into(), value.clone());
        }
    }
    if !v4.contains_key("id") || !v4.contains_key("createdAt") {
        return Err(MigrateError::Header("it has no id or no createdAt".into()));
    }
    v4.insert("isSeeded".into(), false.into());
    for key in ["origin", "delegationDepth", "agentPreset"] {
        if let Some(value) = old.get(key) {
            let renamed = (key == "agentPreset" && value == "code").then(|| Value::from("ptc"));
            v4.insert(key.into(), renamed.unwrap_or_else(|| value.clone()));
        }
    }
    v4.entry("delegationDepth").or_insert(0.into());
    Ok(Value::Object(v4))
}

/// A reader of `source`: a v0 or v4 log as it is, a v1–v3 log as the v4 log its migration
/// gives (made in an anonymous temporary file that goes when the reader does).
pub fn read(source: LogReader) -> Result<LogReader, ReadError> {
    if !MIGRATED_GENERATIONS.contains(&source.generation()) {
        return Ok(source);
    }
    let generation = source.generation();
    let mut source = source;
    let mut file = tempfile::tempfile()?;
    let mut out = io::BufWriter::new(&mut file);
    let migrated = write_v4(&mut source, &mut out);
    out.flush()?;
    drop(out);
    migrated.map_err(|err| ReadError::NotMigrated { generation, reason: err.to_string() })?;
    file.rewind()?;
    LogReader::new(Box::new(BufReader::new(file)))
}

/// [`read`] of the log file at `path`.
pub fn open(path: &Path) -> Result<LogReader, ReadError> {
    read(LogReader::source(crate::reader::open_lines(path)?)?)
}
