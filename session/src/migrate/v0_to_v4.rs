//! The events of a v0–v3 log as format v4, as DeepSeek Harness 0.2 migrates them along
//! v0→v1→v2→v3→v4 (its steps are described in `tests/fixtures/v4/FORMAT.md`), each generation
//! entering the chain at its own step:
//!
//! - v0→v1 keeps the events as they are (v1 is v0 under another header);
//! - v1→v2: top-level `assistant/chunk`s and packed chunk rows go into the `stream` of the
//!   `assistant/message` they precede (whose `sourceEventSeqs` go), or of an `assistant/attempt`
//!   where they end in a finish error, at that chunk's time; a message without chunks gets
//!   `stream: []`. dsh's own v0 attempts (`{turn, step, failure}`) take v4's shape too;
//! - v2→v3: the system prompt leaves `request/header` for `system/message` events — an empty head
//!   right after the first `step/start`, replaced where the prompt first shows or changes — with
//!   0.2's generated ids; a surface replacement (a compaction's summary) names its run
//!   `{startSeq, endSeq}`; `tool/code-dispatch*` become `tool/ptc-dispatch*`;
//! - v3→v4: a tool result becomes a `role: "tool"` message citing its call, and a plugin's
//!   message source names its producer's kind;
//! - a turn a new one started while it was open (a crash before 0.2 closed such turns) ends
//!   `interrupted` there, as v1→v2 and v3→v4 close it;
//! - seqs are renumbered densely and the references follow them (`sourceEventSeqs`, replaced
//!   runs, `messageSeqs`, `headerSeq`, `sourceEventSeq`, compactions' shadowed runs).

use std::collections::HashMap;

use dsh_abi::events;
use serde_json::{json, Map, Value};

use crate::encode_v4;
use crate::format::Format;
use crate::new_event::{NewEvent, Replacement};
use crate::reader::{EventView, Position};

/// One v4 event of the migration.
#[derive(Debug)]
pub struct Shaped {
    pub event_type: String,
    pub data: Value,
    pub time: u64,
    pub source_seqs: Vec<u64>,
    /// The run of the surface this event replaces.
    pub replaces: Option<Replacement>,
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

/// The migration of one log, fed its events in order.
pub struct Migration {
    session_id: String,
    /// The generation the log is in, where it enters the chain.
    from: u32,
    /// Seq of the next event in the v2 log (chunks folded, no system messages yet).
    v2_seq: u64,
    next_seq: u64,
    seqs: HashMap<u64, u64>,
    calls: HashMap<String, u64>,
    /// Stream records of the attempt being read.
    stream: Vec<Value>,
    /// The packed row the last stream record came from, and its last member's time.
    packed: Option<(Position, u64)>,
    open_turn: Option<Value>,
    open_step: Option<(Value, Value)>,
    /// The last event queued input for the next turn (0.2's sign of a turn started anew).
    queued_next_turn: bool,
    /// The system head's v4 seq and text.
    head: Option<(u64, String)>,
}

impl Migration {
    /// The migration of session `session_id`'s log of generation `from` (0 to 3).
    pub fn new(session_id: &str, from: u32) -> Migration {
        Migration {
            session_id: session_id.to_owned(),
            from,
            v2_seq: 0,
            next_seq: 0,
            seqs: HashMap::new(),
            calls: HashMap::new(),
            stream: Vec::new(),
            packed: None,
            open_turn: None,
            open_step: None,
            queued_next_turn: false,
            head: None,
        }
    }

    /// The v4 events `event` becomes, in order; an error says why it cannot be migrated.
    pub fn take(&mut self, event: &EventView<'_>) -> Result<Vec<Shaped>, String> {
        let time = event.time.unwrap_or_default() as u64;
        let data: Value = serde_json::from_str(event.data).map_err(|err| format!("its data is not JSON: {err}"))?;
        if event.event_type == events::ASSISTANT_CHUNK {
            if self.from >= 2 {
                return Err(format!("format v{} has no assistant/chunk events (its streams are embedded)", self.from));
            }
            return Ok(self.chunk(event, data, time));
        }
        let envelope: Value = serde_json::from_str(event.line).unwrap_or_default();
        let mut out = Vec::new();
        self.close_interrupted_turn(event.event_type, &data, time, &mut out);
        let v2_seq = self.v2_seq;
        let own = self.own_event(event, data, &envelope, time, &mut out)?;
        let seq = self.emit(own, &mut out);
        if let Some(old) = event.seq {
            self.seqs.insert(old as u64, seq);
        }
        if event.event_type == events::STEP_START && self.head.is_none() && self.from <= 2 {
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

    /// A `turn/start` of the next turn after input queued for it, while a turn is open with no
    /// step: 0.2 ends the open turn `interrupted` first, at the new turn's time.
    fn close_interrupted_turn(&mut self, event_type: &str, data: &Value, time: u64, out: &mut Vec<Shaped>) {
        let queued = std::mem::replace(
            &mut self.queued_next_turn,
            event_type == events::AGENT_INBOX_SPLICED
                && data["target"] == "next-turn"
                && data["inserted"].as_array().is_some_and(|inserted| !inserted.is_empty()),
        );
        let Some(open) = self.open_turn.clone() else { return };
        let next = open.as_u64().map(|turn| turn + 1);
        if event_type != events::TURN_START || self.open_step.is_some() || !queued || data["turn"].as_u64() != next {
            return;
        }
        let end = json!({"turn": open, "reason": {"kind": "interrupted"}});
        self.emit(Shaped::new(events::TURN_END, end, time), out);
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
        self.remap_references(&mut data)?;
        let v2_seq = self.v2_seq;
        self.v2_seq += 1;
        let event_type = event.event_type.replace("tool/code-dispatch", "tool/ptc-dispatch");
        // Before v2 an assistant message cites its chunks, which its stream takes in.
        let folds_chunks = event.event_type == events::ASSISTANT_MESSAGE && self.from <= 1;
        let mut source_seqs = if folds_chunks { Vec::new() } else { self.cited(envelope)? };
        let replaces = self.replaced(envelope)?;
        self.follow_turns(event.event_type, &data);
        let data = match event.event_type {
            events::REQUEST_HEADER if self.from <= 2 => self.request_header(data, v2_seq, time, out)?,
            events::ASSISTANT_MESSAGE if folds_chunks => with_stream(data, std::mem::take(&mut self.stream)),
            events::ASSISTANT_ATTEMPT if self.from <= 1 => encode_v4::attempt(&data, time),
            events::TOOL_RESULT => lift_tool_result(data),
            _ => data,
        };
        if event.event_type == events::TOOL_RESULT && source_seqs.is_empty() {
            source_seqs.extend(events::answered_call(&data).and_then(|call| self.calls.get(call)));
        }
        let data = encode_v4::with_producer_sources(event.event_type, data);
        let dsh_only = crate::vocabulary::DSH_ONLY_V4_TYPES.contains(&event.event_type);
        let ignorable = (event.ignorable || dsh_only) && !crate::vocabulary::is_known(Format::V4, &event_type);
        Ok(Shaped { source_seqs, replaces, ignorable, ..Shaped::new(&event_type, data, time) })
    }

    fn follow_turns(&mut self, event_type: &str, data: &Value) {
        match event_type {
            events::TURN_START => {
                self.open_turn = Some(data["turn"].clone());
                self.open_step = None;
            }
            events::TURN_END => {
                self.open_turn = None;
                self.open_step = None;
            }
            events::STEP_START => self.open_step = Some((data["turn"].clone(), data["step"].clone())),
            events::STEP_END => self.open_step = None,
            _ => {}
        }
    }

    /// The v4 seq of the source's `seq`.
    fn renumbered(&self, seq: &Value) -> Result<u64, String> {
        let old = seq.as_u64().ok_or_else(|| format!("{seq} is not a seq"))?;
        self.seqs.get(&old).copied().ok_or_else(|| format!("it cites seq {old}, which no earlier event has"))
    }

    /// The v4 seqs of the events the line cites (a `[start, end]` pair stands for its run).
    fn cited(&self, envelope: &Value) -> Result<Vec<u64>, String> {
        let mut cited = Vec::new();
        for entry in envelope.get("sourceEventSeqs").and_then(Value::as_array).into_iter().flatten() {
            match entry.as_array().map(Vec::as_slice) {
                Some([start, end]) => {
                    let (start, end) = (start.as_u64().unwrap_or(u64::MAX), end.as_u64().unwrap_or(0));
                    for seq in start..=end {
                        cited.push(self.renumbered(&Value::from(seq))?);
                    }
                }
                _ => cited.push(self.renumbered(entry)?),
            }
        }
        Ok(cited)
    }

    /// The run a replacing surface event takes the place of, renumbered: `{op, start, end}`
    /// before v3, `{op, startSeq, endSeq}` from v3 on.
    fn replaced(&self, envelope: &Value) -> Result<Option<Replacement>, String> {
        let Some(op) = envelope.get("surfaceOp").filter(|op| *op != "append") else { return Ok(None) };
        let (start, end) = if self.from <= 2 { ("start", "end") } else { ("startSeq", "endSeq") };
        if op["op"] != "replace" || op.as_object().map(Map::len) != Some(3) {
            return Err(format!("its surfaceOp {op} is not {{op: \"replace\", {start}, {end}}}"));
        }
        let keys: Vec<&String> = envelope.as_object().map(|fields| fields.keys().collect()).unwrap_or_default();
        let op_first =
            keys.iter().position(|key| *key == "surfaceOp") < keys.iter().position(|key| *key == "sourceEventSeqs");
        Ok(Some(Replacement { start: self.renumbered(&op[start])?, end: self.renumbered(&op[end])?, op_first }))
    }

    fn remap_references(&self, data: &mut Value) -> Result<(), String> {
        for key in ["messageSeqs", "shadowedSeqs"] {
            if let Some(seqs) = data.get_mut(key).and_then(Value::as_array_mut) {
                for seq in seqs.iter_mut() {
                    *seq = self.renumbered(seq)?.into();
                }
            }
        }
        if let Some(range) = data.get_mut("shadowedRange").and_then(Value::as_object_mut) {
            for key in ["start", "end"] {
                if let Some(seq) = range.get_mut(key) {
                    *seq = self.renumbered(seq)?.into();
                }
            }
        }
        for key in ["headerSeq", "sourceEventSeq"] {
            if let Some(seq) = data.get_mut(key) {
                *seq = self.renumbered(seq)?.into();
            }
        }
        Ok(())
    }

    /// The header without `system` (and without the empty `tools` and `adapterDefaults` v3
    /// leaves out); a `system/message` replacing the head before it when the prompt differs
    /// from the head's.
    fn request_header(
        &mut self,
        mut data: Value,
        v2_seq: u64,
        time: u64,
        out: &mut Vec<Shaped>,
    ) -> Result<Value, String> {
        let header = data.get_mut("header").and_then(Value::as_object_mut);
        let prompt = header.and_then(|header| {
            header.retain(|key, value| match key.as_str() {
                "tools" => value.as_array().is_none_or(|tools| !tools.is_empty()),
                "adapterDefaults" => value.as_object().is_none_or(|defaults| !defaults.is_empty()),
                _ => true,
            });
            header.remove("system")
        });
        let prompt = prompt.as_ref().and_then(Value::as_str).unwrap_or_default().to_owned();
        let Some((head, text)) = self.head.clone() else { return Ok(data) };
        if prompt == text {
            return Ok(data);
        }
        let (turn, step) = self.open_step.clone().ok_or("the system prompt changes outside a step")?;
        let replacement = self.system_message(&turn, &step, &prompt, v2_seq, events::REQUEST_HEADER);
        let replacement = Shaped { time, replaces: Some(Replacement::head(head)), ..replacement };
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

/// v3→v4's tool result: the `tool-result` wrapper of a user message lifted into a `role: "tool"`
/// message (`role, source, toolCallId, content, [isError], id`), the event's other members kept
/// in their order; a result already in v4's shape stays as it is.
fn lift_tool_result(mut data: Value) -> Value {
    let Some(message) = data.get("message").filter(|message| message["role"] == "user") else { return data };
    let wrapper = &message["content"][0];
    let mut lifted = Map::new();
    lifted.insert("role".into(), "tool".into());
    lifted.insert("source".into(), message["source"].clone());
    lifted.insert("toolCallId".into(), wrapper["toolCallId"].clone());
    lifted.insert("content".into(), wrapper["content"].clone());
    if let Some(is_error) = wrapper.get("isError") {
        lifted.insert("isError".into(), is_error.clone());
    }
    lifted.insert("id".into(), message["id"].clone());
    data["message"] = Value::Object(lifted);
    data
}
