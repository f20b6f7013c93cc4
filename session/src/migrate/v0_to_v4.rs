//! The events of a v0 log as format v4, as DeepSeek Harness 0.2 migrates them along
//! v0→v1→v2→v3→v4 (its steps are described in `tests/fixtures/v4/FORMAT.md`):
//!
//! - v1→v2: top-level `assistant/chunk`s and packed chunk rows go into the `stream` of the
//!   `assistant/message` they precede (whose `sourceEventSeqs` go), or of an `assistant/attempt`
//!   where they end in a finish error, at that chunk's time; a message without chunks gets
//!   `stream: []`. dsh's own v0 attempts (`{turn, step, failure}`) take v4's shape too;
//! - v2→v3: the system prompt leaves `request/header` for `system/message` events — an empty head
//!   right after the first `step/start`, replaced where the prompt first shows or changes — with
//!   0.2's generated ids; `tool/code-dispatch*` become `tool/ptc-dispatch*`;
//! - v3→v4: a tool result becomes a `role: "tool"` message citing its call;
//! - seqs are renumbered densely and the references follow them (`sourceEventSeqs`,
//!   `messageSeqs`, `headerSeq`, `sourceEventSeq`).

use std::collections::HashMap;

use dsh_abi::events;
use serde_json::{json, Map, Value};

use crate::encode_v4;
use crate::format::Format;
use crate::new_event::NewEvent;
use crate::reader::{EventView, Position};

/// One v4 event of the migration.
#[derive(Debug)]
pub struct Shaped {
    pub event_type: String,
    pub data: Value,
    pub time: u64,
    pub source_seqs: Vec<u64>,
    /// The system head this `system/message` replaces.
    pub replaces: Option<u64>,
    pub ignorable: bool,
}

impl Shaped {
    fn new(event_type: &str, data: Value, time: u64) -> Shaped {
        Shaped {
            event_type: event_type.to_owned(),
            data,
            time,
            source_seqs: Vec::new(),
            replaces: None,
            ignorable: false,
        }
    }

    /// The event to append (its time is [`Shaped::time`]).
    pub fn as_new_event(&self) -> NewEvent<'_> {
        let raw = NewEvent::raw(&self.event_type, dsh_abi::js::to_string(&self.data));
        NewEvent { ignorable: self.ignorable, source_seqs: self.source_seqs.clone(), replaces: self.replaces, ..raw }
    }
}

/// The migration of one log, fed its v0 events in order.
pub struct Migration {
    session_id: String,
    /// Seq of the next event in the v2 log (chunks folded, no system messages yet).
    v2_seq: u64,
    next_seq: u64,
    seqs: HashMap<u64, u64>,
    calls: HashMap<String, u64>,
    /// Stream records of the attempt being read.
    stream: Vec<Value>,
    /// The packed row the last stream record came from, and its last member's time.
    packed: Option<(Position, u64)>,
    open_step: Option<(Value, Value)>,
    /// The system head's v4 seq and text.
    head: Option<(u64, String)>,
}

impl Migration {
    pub fn new(session_id: &str) -> Migration {
        Migration {
            session_id: session_id.to_owned(),
            v2_seq: 0,
            next_seq: 0,
            seqs: HashMap::new(),
            calls: HashMap::new(),
            stream: Vec::new(),
            packed: None,
            open_step: None,
            head: None,
        }
    }

    /// The v4 events `event` becomes, in order; an error says why it cannot be migrated.
    pub fn take(&mut self, event: &EventView<'_>) -> Result<Vec<Shaped>, String> {
        let time = event.time.unwrap_or_default() as u64;
        let data: Value = serde_json::from_str(event.data).map_err(|err| format!("its data is not JSON: {err}"))?;
        if event.event_type == events::ASSISTANT_CHUNK {
            return Ok(self.chunk(event, data, time));
        }
        let envelope: Value = serde_json::from_str(event.line).unwrap_or_default();
        if envelope.get("surfaceOp").is_some_and(|op| op != "append") {
            return Err("a surface replacement (a compaction) is not migrated by dsh yet".to_owned());
        }
        let mut out = Vec::new();
        let v2_seq = self.v2_seq;
        let own = self.own_event(event, data, &envelope, time, &mut out)?;
        let seq = self.emit(own, &mut out);
        if let Some(old) = event.seq {
            self.seqs.insert(old as u64, seq);
        }
        if event.event_type == events::STEP_START && self.head.is_none() {
            let (turn, step) = self.open_step.clone().unwrap_or_default();
            let head = Shaped { time, ..self.system_message(&turn, &step, "", v2_seq, events::STEP_START) };
            let head_seq = self.emit(head, &mut out);
            self.head = Some((head_seq, String::new()));
        }
        Ok(out)
    }

    /// Places `shaped` at the next v4 seq; returns it.
    fn emit(&mut self, shaped: Shaped, out: &mut Vec<Shaped>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if shaped.event_type == events::TOOL_CALL {
            if let Some(call) = shaped.data.get("callId").and_then(Value::as_str) {
                self.calls.insert(call.to_owned(), seq);
            }
        }
        out.push(shaped);
        seq
    }

    /// The event itself in v4's shape, after any `system/message` it needs before it.
    fn own_event(
        &mut self,
        event: &EventView<'_>,
        mut data: Value,
        envelope: &Value,
        time: u64,
        out: &mut Vec<Shaped>,
    ) -> Result<Shaped, String> {
        self.remap_references(&mut data);
        let v2_seq = self.v2_seq;
        self.v2_seq += 1;
        let event_type = event.event_type.replace("tool/code-dispatch", "tool/ptc-dispatch");
        let mut source_seqs = self.cited(envelope);
        let data = match event.event_type {
            events::STEP_START => {
                self.open_step = Some((data["turn"].clone(), data["step"].clone()));
                data
            }
            events::STEP_END => {
                self.open_step = None;
                data
            }
            events::REQUEST_HEADER => self.request_header(data, v2_seq, time, out)?,
            events::ASSISTANT_MESSAGE => {
                source_seqs.clear();
                with_stream(data, std::mem::take(&mut self.stream))
            }
            events::ASSISTANT_ATTEMPT => encode_v4::attempt(&data, time),
            events::TOOL_RESULT => return Ok(self.tool_result(data, source_seqs, time)),
            _ => data,
        };
        let dsh_only = crate::vocabulary::DSH_ONLY_V4_TYPES.contains(&event.event_type);
        let ignorable = (event.ignorable || dsh_only) && !crate::vocabulary::is_known(Format::V4, &event_type);
        Ok(Shaped { source_seqs, ignorable, ..Shaped::new(&event_type, data, time) })
    }

    /// The v4 seqs of the events the v0 line cites.
    fn cited(&self, envelope: &Value) -> Vec<u64> {
        let cited = envelope.get("sourceEventSeqs").and_then(Value::as_array).into_iter().flatten();
        cited.filter_map(Value::as_u64).filter_map(|seq| self.seqs.get(&seq).copied()).collect()
    }

    fn remap_references(&self, data: &mut Value) {
        let renumber = |seq: &mut Value| {
            if let Some(new) = seq.as_u64().and_then(|old| self.seqs.get(&old)) {
                *seq = Value::from(*new);
            }
        };
        if let Some(seqs) = data.get_mut("messageSeqs").and_then(Value::as_array_mut) {
            seqs.iter_mut().for_each(renumber);
        }
        for key in ["headerSeq", "sourceEventSeq"] {
            if let Some(seq) = data.get_mut(key) {
                renumber(seq);
            }
        }
    }

    /// The header without `system`; a `system/message` replacing the head before it when the
    /// prompt differs from the head's.
    fn request_header(
        &mut self,
        mut data: Value,
        v2_seq: u64,
        time: u64,
        out: &mut Vec<Shaped>,
    ) -> Result<Value, String> {
        let header = data.get_mut("header").and_then(Value::as_object_mut);
        let prompt = header.and_then(|header| header.remove("system"));
        let prompt = prompt.as_ref().and_then(Value::as_str).unwrap_or_default().to_owned();
        let Some((head, text)) = self.head.clone() else { return Ok(data) };
        if prompt == text {
            return Ok(data);
        }
        let (turn, step) = self.open_step.clone().ok_or("the system prompt changes outside a step")?;
        let replacement = self.system_message(&turn, &step, &prompt, v2_seq, events::REQUEST_HEADER);
        let replacement = Shaped { time, replaces: Some(head), ..replacement };
        let seq = self.emit(replacement, out);
        self.head = Some((seq, prompt));
        Ok(data)
    }

    /// `system/message` with 0.2's migration id for an anchor at `v2_seq` of type `anchor`.
    fn system_message(&self, turn: &Value, step: &Value, text: &str, v2_seq: u64, anchor: &str) -> Shaped {
        let key = json!(["session-format-v2-to-v3", self.session_id, v2_seq, anchor]);
        let id = format!("v2-to-v3-system-{}", crate::fsutil::sha256_hex(key.to_string().as_bytes()));
        let content: Vec<Value> = match text.is_empty() {
            true => Vec::new(),
            false => vec![json!({"type": "text", "text": text})],
        };
        let message = json!({"id": id, "role": "system", "source": {"kind": "system-prompt"}, "content": content});
        Shaped::new(events::SYSTEM_MESSAGE, json!({"turn": turn, "step": step, "message": message}), 0)
    }

    fn tool_result(&self, data: Value, mut source_seqs: Vec<u64>, time: u64) -> Shaped {
        if source_seqs.is_empty() {
            source_seqs.extend(events::answered_call(&data).and_then(|call| self.calls.get(call)));
        }
        let shaped = encode_v4::tool_result(NewEvent::new(events::TOOL_RESULT, &data), data.clone());
        let data = serde_json::from_str(&shaped.data).unwrap_or(data);
        Shaped { source_seqs, ..Shaped::new(events::TOOL_RESULT, data, time) }
    }

    /// A chunk joins the attempt's stream; a finish error closes the attempt.
    fn chunk(&mut self, event: &EventView<'_>, data: Value, time: u64) -> Vec<Shaped> {
        let chunk = data.get("chunk").cloned().unwrap_or(Value::Null);
        if event.packed {
            self.pack(event.at, &chunk, time);
            return Vec::new();
        }
        self.packed = None;
        let failed = chunk["type"] == "finish" && chunk["reason"]["kind"] == "error";
        self.stream.push(json!({"type": "chunk", "time": time, "chunk": chunk}));
        if !failed {
            return Vec::new();
        }
        let stream = std::mem::take(&mut self.stream);
        let attempt = json!({"turn": data["turn"], "step": data["step"], "stream": stream});
        self.v2_seq += 1;
        let mut out = Vec::new();
        self.emit(Shaped::new(events::ASSISTANT_ATTEMPT, attempt, time), &mut out);
        out
    }

    /// A packed row's member joins its row's stream record (one record per row, as 0.2 keeps it).
    fn pack(&mut self, at: Position, chunk: &Value, time: u64) {
        let (row, members) = match chunk["type"].as_str() {
            Some("text-delta") => ("text-chunks", "texts"),
            Some("reasoning-delta") => ("reasoning-chunks", "texts"),
            _ => ("tool-call-chunks", "deltas"),
        };
        let member = match members {
            "texts" => chunk["text"].clone(),
            _ => Value::Object(
                chunk
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(key, _)| *key != "type" && *key != "index")
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
            ),
        };
        match (self.packed, self.stream.last_mut()) {
            (Some((row_at, last_time)), Some(record)) if row_at == at => {
                push_to(record, "dt", Value::from(time.saturating_sub(last_time)));
                push_to(record, members, member);
            }
            _ => {
                let mut record = Map::new();
                record.insert("type".into(), row.into());
                record.insert("time0".into(), time.into());
                record.insert("index".into(), chunk["index"].clone());
                record.insert("dt".into(), Value::Array(Vec::new()));
                record.insert(members.into(), Value::Array(vec![member]));
                self.stream.push(Value::Object(record));
            }
        }
        self.packed = Some((at, time));
    }
}

fn push_to(record: &mut Value, key: &str, value: Value) {
    if let Some(list) = record.get_mut(key).and_then(Value::as_array_mut) {
        list.push(value);
    }
}

fn with_stream(mut data: Value, stream: Vec<Value>) -> Value {
    if let Value::Object(fields) = &mut data {
        fields.insert("stream".into(), Value::Array(stream));
    }
    data
}
