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

#[cfg(test)]
mod tests {
    use super::*;

    fn migrated(log: &str) -> Result<Vec<Value>, MigrateError> {
        let mut source = LogReader::source(Box::new(io::Cursor::new(log.to_owned().into_bytes()))).unwrap();
        let mut out = Vec::new();
        write_v4(&mut source, &mut out)?;
        let text = String::from_utf8(out).unwrap();
        Ok(text.lines().skip(1).map(|line| serde_json::from_str(line).unwrap()).collect())
    }

    const V1_HEADER: &str = r#"{"type":"session","version":1,"id":"s","createdAt":1,"delegationDepth":0}"#;

    #[test]
    fn a_turn_a_new_one_started_while_it_was_open_ends_interrupted_as_0_2_ends_it() {
        let rows = [
            r#"{"type":"turn/start","seq":0,"time":2,"data":{"turn":1}}"#,
            r#"{"type":"agent/inbox/spliced","seq":1,"time":3,"data":{"target":"next-turn","start":0,"inserted":[{"id":"m","role":"user","content":[],"source":{"kind":"user"}}]}}"#,
            r#"{"type":"turn/start","seq":2,"time":4,"data":{"turn":2}}"#,
        ];
        let events = migrated(&format!("{V1_HEADER}\n{}\n", rows.join("\n"))).unwrap();
        let types: Vec<&str> = events.iter().map(|event| event["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["turn/start", "agent/inbox/spliced", "turn/end", "turn/start"]);
        assert_eq!(events[2]["data"], serde_json::json!({"turn": 1, "reason": {"kind": "interrupted"}}));
        assert_eq!((events[2]["time"].as_u64(), events[3]["seq"].as_u64()), (Some(4), Some(3)));
    }

    #[test]
    fn a_forked_session_and_a_citation_of_nothing_are_refused_naming_why() {
        let seeded = r#"{"type":"session","version":1,"id":"s","createdAt":1,"seedLength":0,"delegationDepth":0}"#;
        let refused = migrated(&format!("{seeded}\n")).unwrap_err().to_string();
        assert!(refused.contains("a forked (seeded) session is not migrated by dsh"), "{refused}");
        let dangling = r#"{"type":"session/title","seq":0,"time":2,"data":{"title":"t","messageSeqs":[7],"source":{"kind":"fallback"}}}"#;
        let refused = migrated(&format!("{V1_HEADER}\n{dangling}\n")).unwrap_err().to_string();
        assert!(
            refused.starts_with("line 2 (byte 74): session/title cannot be migrated to v4: it cites seq 7"),
            "{refused}"
        );
    }

    #[test]
    fn a_plugin_s_message_names_its_producer_kind_keeping_its_other_fields() {
        let source = serde_json::json!({"kind": "plugin", "plugin": "compact", "compactionId": "c"});
        let user = crate::encode_v4::with_producer_sources("user/message", serde_json::json!({"source": source}));
        assert_eq!(user["source"], serde_json::json!({"kind": "compact-checkpoint", "compactionId": "c"}));
        let own = serde_json::json!({"role": "user", "source": {"kind": "plugin", "plugin": "dsh-retry", "form": "f"}});
        let own = crate::encode_v4::with_producer_sources("user/message", own);
        assert_eq!(own["source"], serde_json::json!({"kind": "plugin:dsh-retry", "form": "f"}));
    }
}
