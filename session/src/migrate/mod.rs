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

mod extensions;
mod legacy;
mod seed;
mod v0_to_v4;
use seed::InheritedCut;
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
    let generation = source.generation();
    let (header, cut) = v4_header(source.header(), generation)?;
    let header_line = dsh_abi::js::to_string(&header);
    writeln!(out, "{header_line}")?;
    let id = header["id"].as_str().unwrap_or_default();
    let created_at = header["createdAt"].as_u64().unwrap_or_default();
    let mut migration = Migration::new(id, generation, created_at, cut);
    let mut written = Written { gate: Gate::for_header(&header_line, Vec::new()), count: 0 };
    let mut read = 0;
    while let Some(next) = source.next_event() {
        let event = next?.map_err(MigrateError::Damaged)?;
        let refused =
            |reason: String| MigrateError::Refused { at: event.at, event_type: event.event_type.to_owned(), reason };
        for shaped in migration.take(&event).map_err(refused)? {
            written.write(&shaped, out)?.map_err(refused)?;
        }
        read += 1;
    }
    for shaped in migration.finish().map_err(MigrateError::Header)? {
        written.write(&shaped, out)?.map_err(MigrateError::Header)?;
    }
    let mut found = Vec::new();
    written.gate.finish(&mut found);
    if let Some(finding) = found.pop() {
        return Err(MigrateError::Header(finding.message));
    }
    Ok(Counts { read, written: written.count })
}

/// The v4 log so far: its gate and how many events it holds.
struct Written {
    gate: Gate,
    count: u64,
}

impl Written {
    /// Writes `shaped` as the next event once the v4 gate admits it (`Ok(Err(finding))` when
    /// it does not).
    fn write(&mut self, shaped: &v0_to_v4::Shaped, out: &mut impl Write) -> io::Result<Result<(), String>> {
        let new_event = shaped.as_new_event();
        let line = envelope_line(&new_event, &new_event.data, self.count, shaped.time, is_surface(shaped));
        let candidate = GateEvent {
            event_type: &shaped.event_type,
            seq: Some(self.count as f64),
            time: Some(shaped.time as f64),
            data: &new_event.data,
            ignorable: shaped.ignorable,
            line: &line,
        };
        if let Err(finding) = self.gate.admit(&candidate) {
            return Ok(Err(finding.message));
        }
        writeln!(out, "{line}")?;
        self.count += 1;
        Ok(Ok(()))
    }
}

fn is_surface(shaped: &v0_to_v4::Shaped) -> bool {
    crate::vocabulary::is_surface(Format::V4, &shaped.event_type)
}

/// The v4 header of an older one of `generation`: `type, version, id, createdAt, [cwd],
/// [parentSession], isSeeded, [origin], delegationDepth, [agentPreset]` (v3 renamed the `code`
/// preset `ptc`), with the log's inherited cut: a v0 or v1 header says a fork by its
/// `seedLength` (how many events it inherited), a v2 or v3 one by `isSeeded`.
fn v4_header(header: &str, generation: u32) -> Result<(Value, InheritedCut), MigrateError> {
    let old: Map<String, Value> =
        serde_json::from_str(header).map_err(|err| MigrateError::Header(format!("unreadable header: {err}")))?;
    let (seeded, length) = inherited(&old, generation).map_err(MigrateError::Header)?;
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
    v4.insert("isSeeded".into(), seeded.into());
    for key in ["origin", "delegationDepth", "agentPreset"] {
        if let Some(value) = old.get(key) {
            let renamed = (key == "agentPreset" && value == "code").then(|| Value::from("ptc"));
            v4.insert(key.into(), renamed.unwrap_or_else(|| value.clone()));
        }
    }
    v4.entry("delegationDepth").or_insert(0.into());
    Ok((Value::Object(v4), InheritedCut::new(generation, seeded, length)))
}

/// Whether a header of `generation` is a fork's, and before v2 how many events it inherited.
fn inherited(header: &Map<String, Value>, generation: u32) -> Result<(bool, Option<u64>), String> {
    let seed_length = header.get("seedLength");
    if generation <= 1 {
        let length = seed_length.map(|length| length.as_u64().ok_or(length));
        let length = length.transpose().map_err(|length| {
            format!("released v{generation} header seedLength must be a non-negative safe integer, not {length}")
        })?;
        return Ok((length.is_some(), length));
    }
    if seed_length.is_some() {
        return Err("session header has invalid field \"seedLength\"".to_owned());
    }
    match header.get("isSeeded") {
        Some(Value::Bool(seeded)) => Ok((*seeded, None)),
        _ => Err(format!("format v{generation} header isSeeded must be boolean")),
    }
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
    use serde_json::json;

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
    fn a_citation_of_nothing_is_refused_naming_its_line() {
        let dangling = r#"{"type":"session/title","seq":0,"time":2,"data":{"title":"t","messageSeqs":[7],"source":{"kind":"fallback"}}}"#;
        let refused = migrated(&format!("{V1_HEADER}\n{dangling}\n")).unwrap_err().to_string();
        assert!(
            refused.starts_with("line 2 (byte 74): session/title cannot be migrated to v4: it cites seq 7"),
            "{refused}"
        );
    }

    fn header_of(log: &str) -> Value {
        let mut source = LogReader::source(Box::new(io::Cursor::new(log.to_owned().into_bytes()))).unwrap();
        let mut out = Vec::new();
        write_v4(&mut source, &mut out).unwrap();
        serde_json::from_str(String::from_utf8(out).unwrap().lines().next().unwrap()).unwrap()
    }

    const TURN: [&str; 2] = [
        r#"{"type":"turn/start","seq":0,"time":2,"data":{"turn":1}}"#,
        r#"{"type":"turn/end","seq":1,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    ];

    /// The v4 log `log` migrates to, as written.
    fn migrated_text(log: &str) -> String {
        let mut source = LogReader::source(Box::new(io::Cursor::new(log.to_owned().into_bytes()))).unwrap();
        let mut out = Vec::new();
        write_v4(&mut source, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn forks_an_early_v0_log_and_a_v3_log_with_extensions_migrate_to_the_bytes_0_2_1_rc_2_wrote() {
        let seeded = include_str!("../../../tests/fixtures/v4/generations/seeded-v4.jsonl");
        for (generation, log) in [
            (1, include_str!("../../../tests/fixtures/v4/generations/seeded-v1.jsonl")),
            (2, include_str!("../../../tests/fixtures/v4/generations/seeded-v2.jsonl")),
            (3, include_str!("../../../tests/fixtures/v4/generations/seeded-v3.jsonl")),
        ] {
            assert_eq!(migrated_text(log), seeded, "the seeded v{generation} log");
        }
        let legacy = include_str!("../../../tests/fixtures/v4/generations/legacy-v0.jsonl");
        assert_eq!(migrated_text(legacy), include_str!("../../../tests/fixtures/v4/generations/legacy-v4.jsonl"));
        let extension = include_str!("../../../tests/fixtures/v4/generations/extension-v3.jsonl");
        assert_eq!(migrated_text(extension), include_str!("../../../tests/fixtures/v4/generations/extension-v4.jsonl"));
    }

    #[test]
    fn answers_cut_short_without_a_finish_chunk_migrate_to_the_failed_attempts_0_2_1_rc_2_wrote() {
        let expected = include_str!("../../../tests/fixtures/v4/generations/cut-stream-v4.jsonl");
        for (generation, log) in [
            (0, include_str!("../../../tests/fixtures/v4/generations/cut-stream-v0.jsonl")),
            (1, include_str!("../../../tests/fixtures/v4/generations/cut-stream-v1.jsonl")),
        ] {
            assert_eq!(migrated_text(log), expected, "the cut-stream v{generation} log");
        }
    }

    fn chunk(seq: u64, time: u64, step: u64, chunk: &str) -> String {
        format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":1,"step":{step},"chunk":{chunk}}}}}"#
        )
    }

    const TEXT: &str = r#"{"type":"text-delta","index":0,"text":"a"}"#;

    fn types(events: &[Value]) -> Vec<&str> {
        events.iter().map(|event| event["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn chunks_the_log_ends_in_are_a_failed_attempt_at_their_last_chunk_s_time() {
        let step = r#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}"#;
        let log = format!("{V1_HEADER}\n{}\n{step}\n{}\n{}\n", TURN[0], chunk(2, 3, 1, TEXT), chunk(3, 5, 1, TEXT));
        let events = migrated(&log).unwrap();
        assert_eq!(types(&events)[2..], ["system/message", "assistant/attempt"]);
        let stream = json!([{"type": "text-chunks", "time0": 3, "index": 0, "dt": [2], "texts": ["a", "a"]}]);
        assert_eq!((&events[3]["time"], &events[3]["data"]["stream"]), (&json!(5), &stream));
    }

    #[test]
    fn what_follows_an_answer_s_last_chunk_follows_its_attempt_and_a_chunk_after_a_finish_starts_another() {
        let finish = r#"{"type":"finish","reason":{"kind":"stop"}}"#;
        let rows = [
            r#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}"#.to_owned(),
            chunk(2, 3, 1, TEXT),
            chunk(3, 3, 1, finish),
            chunk(4, 4, 1, TEXT),
            r#"{"type":"request/context","seq":5,"time":5,"data":{"provider":"p","model":"m","contextWindow":9}}"#
                .to_owned(),
            r#"{"type":"step/end","seq":6,"time":6,"data":{"turn":1,"step":1}}"#.to_owned(),
        ];
        let events = migrated(&format!("{V1_HEADER}\n{}\n{}\n", TURN[0], rows.join("\n"))).unwrap();
        assert_eq!(
            types(&events)[2..],
            ["system/message", "assistant/attempt", "assistant/attempt", "request/context", "step/end"]
        );
        assert_eq!(events[3]["data"]["stream"].as_array().unwrap().len(), 2, "text, then its finish");
        assert_eq!(events[4]["time"], 4);
    }

    #[test]
    fn a_message_that_does_not_cite_its_answer_s_chunks_in_order_is_refused() {
        let step = r#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}"#;
        let message = |sources: &str| {
            format!(
                r#"{{"type":"assistant/message","seq":4,"time":5,"data":{{"turn":1,"step":1,"message":{{"id":"m","role":"assistant","content":[],"source":{{"kind":"model","provider":"p","model":"m"}}}}}}{sources}}}"#
            )
        };
        let log = |sources: &str| {
            format!(
                "{V1_HEADER}\n{}\n{step}\n{}\n{}\n{}\n",
                TURN[0],
                chunk(2, 3, 1, TEXT),
                chunk(3, 3, 1, TEXT),
                message(sources)
            )
        };
        let refused = |sources: &str| migrated(&log(sources)).unwrap_err().to_string();
        assert!(refused("").ends_with("assistant/message 4 does not cite its complete v1 chunk attempt"));
        let incomplete = "assistant/message 4 chunk references are not one complete ordered attempt";
        assert!(refused(r#","sourceEventSeqs":[3,2]"#).ends_with(incomplete));
        assert!(refused(r#","sourceEventSeqs":[2]"#).ends_with(incomplete));
        let cited = migrated(&log(r#","sourceEventSeqs":[2,3]"#)).unwrap();
        assert_eq!(types(&cited)[2..], ["system/message", "assistant/message"]);
        let uncited = migrated(&log(r#","sourceEventSeqs":[]"#)).unwrap();
        assert_eq!(types(&uncited)[2..], ["system/message", "assistant/attempt", "assistant/message"]);
        assert_eq!(uncited[4]["data"]["stream"], json!([]));
    }

    #[test]
    fn a_seeded_v1_log_is_a_seeded_v4_log_marking_its_inherited_cut_where_its_seed_length_ends() {
        let header = r#"{"type":"session","version":1,"id":"s","createdAt":1,"parentSession":"p","seedLength":2,"delegationDepth":0}"#;
        let own = r#"{"type":"turn/start","seq":2,"time":5,"data":{"turn":2}}"#;
        let log = format!("{header}\n{}\n{}\n{own}\n", TURN[0], TURN[1]);
        let v4 = header_of(&log);
        assert_eq!((&v4["isSeeded"], &v4["parentSession"], v4.get("seedLength")), (&json!(true), &json!("p"), None));
        let events = migrated(&log).unwrap();
        let types: Vec<&str> = events.iter().map(|event| event["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["turn/start", "turn/end", "session/end-seed", "turn/start"]);
        assert_eq!((&events[2]["data"], &events[2]["time"]), (&json!({"inherited": true}), &json!(5)));
    }

    #[test]
    fn a_seeded_v1_log_s_end_seed_at_the_cut_is_the_marker_and_one_of_only_inherited_events_ends_with_it() {
        let header = r#"{"type":"session","version":1,"id":"s","createdAt":1,"seedLength":2,"delegationDepth":0}"#;
        let seed = r#"{"type":"session/end-seed","seq":2,"time":4,"data":{}}"#;
        let events = migrated(&format!("{header}\n{}\n{}\n{seed}\n", TURN[0], TURN[1])).unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!((&events[2]["type"], &events[2]["data"]), (&json!("session/end-seed"), &json!({"inherited": true})));
        let events = migrated(&format!("{header}\n{}\n{}\n", TURN[0], TURN[1])).unwrap();
        assert_eq!(
            (&events[2]["data"], &events[2]["time"], &events[2]["seq"]),
            (&json!({"inherited": true}), &json!(3), &json!(2))
        );
    }

    #[test]
    fn a_fork_whose_header_and_marker_disagree_is_refused_naming_why() {
        let past = r#"{"type":"session","version":1,"id":"s","createdAt":1,"seedLength":3,"delegationDepth":0}"#;
        let refused = migrated(&format!("{past}\n{}\n{}\n", TURN[0], TURN[1])).unwrap_err().to_string();
        assert!(refused.contains("its seedLength 3 exceeds its 2 events"), "{refused}");
        let unmarked = r#"{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":true,"delegationDepth":0}"#;
        let refused = migrated(&format!("{unmarked}\n{}\n{}\n", TURN[0], TURN[1])).unwrap_err().to_string();
        assert!(refused.ends_with("format v3 seeded Session lacks an accepted inherited end-seed marker"), "{refused}");
        let unseeded = r#"{"type":"session","version":2,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;
        let marker = r#"{"type":"session/end-seed","seq":2,"time":4,"data":{"inherited":true}}"#;
        let refused = migrated(&format!("{unseeded}\n{}\n{}\n{marker}\n", TURN[0], TURN[1])).unwrap_err().to_string();
        let offset = unseeded.len() + TURN[0].len() + TURN[1].len() + 3;
        assert_eq!(
            refused,
            format!(
                "line 4 (byte {offset}): session/end-seed cannot be migrated to v4: format v2 unseeded Session \
                 contains an inherited end-seed marker"
            )
        );
        let both = r#"{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":false,"seedLength":0,"delegationDepth":0}"#;
        let refused = migrated(&format!("{both}\n")).unwrap_err().to_string();
        assert_eq!(
            refused,
            "line 1 (byte 0): its header cannot be migrated to v4: session header has invalid field \"seedLength\""
        );
    }

    #[test]
    fn a_cut_through_an_assistant_attempt_is_refused_at_the_chunk_past_it() {
        let header = r#"{"type":"session","version":1,"id":"s","createdAt":1,"seedLength":3,"delegationDepth":0}"#;
        let chunk = |seq: u64| {
            format!(
                r#"{{"type":"assistant/chunk","seq":{seq},"time":3,"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"a"}}}}}}"#
            )
        };
        let step = r#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}"#;
        let log = format!("{header}\n{}\n{step}\n{}\n{}\n", TURN[0], chunk(2), chunk(3));
        let refused = migrated(&log).unwrap_err().to_string();
        assert!(refused.starts_with("line 5 (byte "), "{refused}");
        assert!(
            refused.ends_with(
                "assistant/chunk cannot be migrated to v4: inherited Session cut 3 splits one Assistant attempt"
            ),
            "{refused}"
        );
    }

    const V3_HEADER: &str =
        r#"{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;

    #[test]
    fn a_v3_log_s_unknown_block_and_ignorable_event_are_namespaced_and_an_unknown_required_event_refused() {
        let splice = r#"{"type":"agent/inbox/spliced","seq":0,"time":2,"data":{"target":"next-turn","start":0,"inserted":[{"id":"m","role":"user","content":[{"type":"citation","n":1}],"source":{"kind":"user"}}]}}"#;
        let audit = r#"{"type":"acme/audit","seq":1,"time":3,"data":{"messageSeqs":[9]},"ignorable":true}"#;
        let events = migrated(&format!("{V3_HEADER}\n{splice}\n{audit}\n")).unwrap();
        assert_eq!(events[0]["data"]["inserted"][0]["content"], json!([{"type": "plugin:citation", "n": 1}]));
        assert_eq!(
            events[1],
            json!({"type": "plugin:acme/audit", "seq": 1, "time": 3, "data": {"messageSeqs": [9]}, "ignorable": true}),
            "kept opaque: its data as it was"
        );
        let required = r#"{"type":"acme/audit","seq":1,"time":3,"data":{}}"#;
        let refused = migrated(&format!("{V3_HEADER}\n{splice}\n{required}\n")).unwrap_err().to_string();
        assert!(refused.ends_with("format v3 contains unknown event type \"acme/audit\" at seq 1"), "{refused}");
    }

    #[test]
    fn a_v3_block_without_a_type_is_refused_naming_line_and_byte_offset() {
        let splice = r#"{"type":"agent/inbox/spliced","seq":0,"time":2,"data":{"target":"next-turn","start":0,"inserted":[{"id":"m","role":"user","content":[{"text":"untyped"}],"source":{"kind":"user"}}]}}"#;
        let refused = migrated(&format!("{V3_HEADER}\n{splice}\n")).unwrap_err().to_string();
        assert_eq!(
            refused,
            format!(
                "line 2 (byte {}): agent/inbox/spliced cannot be migrated to v4: format v3 agent/inbox/spliced at \
                 seq 0[0] requires content blocks with string type tags",
                V3_HEADER.len() + 1
            )
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

    const V0_HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}"#;

    #[test]
    fn a_first_shape_answer_whose_provenance_is_no_object_is_refused_naming_its_line_and_byte() {
        for provenance in [r#""p""#, "[]", "null"] {
            let answer = format!(
                r#"{{"type":"assistant/message","seq":1,"time":3,"data":{{"content":[],"provenance":{provenance}}}}}"#
            );
            let refused = migrated(&format!("{V0_HEADER}\n{}\n{answer}\n", TURN[0])).unwrap_err().to_string();
            assert_eq!(
                refused,
                format!(
                    "line 3 (byte {}): assistant/message cannot be migrated to v4: session \"s\" contains malformed \
                     pre-react-loop assistant/message at seq 1",
                    V0_HEADER.len() + TURN[0].len() + 2
                )
            );
        }
    }

    #[test]
    fn a_source_event_whose_seq_is_not_the_next_one_is_refused_naming_its_line_and_byte() {
        let at_seq = |seq: &str| {
            format!(r#"{{"type":"turn/end","seq":{seq},"time":3,"data":{{"turn":1,"reason":{{"kind":"completed"}}}}}}"#)
        };
        let refused =
            |seq: &str| migrated(&format!("{V1_HEADER}\n{}\n{}\n", TURN[0], at_seq(seq))).unwrap_err().to_string();
        let line =
            format!("line 3 (byte {}): turn/end cannot be migrated to v4: ", V1_HEADER.len() + TURN[0].len() + 2);
        assert_eq!(refused("1e30"), format!("{line}turn/end has no whole-number seq (expected 1)"));
        assert_eq!(refused("18446744073709551615"), format!("{line}turn/end has no whole-number seq (expected 1)"));
        assert_eq!(refused("5"), format!("{line}seq 5 where 1 was expected"));
        assert_eq!(refused("0"), format!("{line}seq 0 where 1 was expected"));
        assert_eq!(refused("1.5"), format!("{line}turn/end has no whole-number seq (expected 1)"));
    }

    #[test]
    fn a_fork_whose_events_skip_seqs_is_refused_at_the_first_skip_not_counted_by_its_highest_seq() {
        let header = r#"{"type":"session","version":1,"id":"s","createdAt":1,"seedLength":3,"delegationDepth":0}"#;
        let late = |seq: u64| TURN[0].replace(r#""seq":0"#, &format!(r#""seq":{seq}"#));
        let refused = migrated(&format!("{header}\n{}\n{}\n", late(5), late(6))).unwrap_err().to_string();
        assert_eq!(
            refused,
            format!(
                "line 2 (byte {}): turn/start cannot be migrated to v4: seq 5 where 0 was expected",
                header.len() + 1
            )
        );
    }

    #[test]
    fn each_member_of_a_packed_row_takes_the_next_seq() {
        let step = r#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}"#;
        let packed = r#"{"type":"text-chunks","seq0":2,"time0":3,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#;
        let after = |seq: u64| format!(r#"{{"type":"step/end","seq":{seq},"time":5,"data":{{"turn":1,"step":1}}}}"#);
        let log = |seq: u64| format!("{V0_HEADER}\n{}\n{step}\n{packed}\n{}\n", TURN[0], after(seq));
        let events = migrated(&log(4)).unwrap();
        assert_eq!(types(&events)[2..], ["system/message", "assistant/attempt", "step/end"]);
        let refused = migrated(&log(3)).unwrap_err().to_string();
        assert!(refused.ends_with("step/end cannot be migrated to v4: seq 3 where 4 was expected"), "{refused}");
    }
}
