//! The events of a v0–v3 log as format v4, as DeepSeek Harness 0.2 migrates them along
//! v0→v1→v2→v3→v4 (its steps are described in `tests/fixtures/v4/FORMAT.md`), each generation
//! entering the chain at its own step:
//!
//! - v0→v1 keeps the events (v1 is v0 under another header) but for what 0.1's early builds
//!   wrote, which takes today's shape ([`legacy`](super::legacy));
//! - v1→v2: top-level `assistant/chunk`s and packed chunk rows go into the `stream` of the
//!   `assistant/message` they precede (whose `sourceEventSeqs` go), or of an `assistant/attempt`
//!   where they end in a finish error, at that chunk's time; a message without chunks gets
//!   `stream: []`. dsh's own v0 attempts (`{turn, step, failure}`) take v4's shape too;
//! - v1→v2 also marks a fork's inherited cut ([`seed`](super::seed));
//! - v2→v3: the system prompt leaves `request/header` for `system/message` events — an empty head
//!   right after the first `step/start`, replaced where the prompt first shows or changes — with
//!   0.2's generated ids; a surface replacement (a compaction's summary) names its run
//!   `{startSeq, endSeq}`; `tool/code-dispatch*` become `tool/ptc-dispatch*`;
//! - v3→v4: a tool result becomes a `role: "tool"` message citing its call, a plugin's message
//!   source names its producer's kind, and what v3 does not know is namespaced `plugin:…`
//!   ([`extensions`](super::extensions));
//! - a turn a new one started while it was open (a crash before 0.2 closed such turns) ends
//!   `interrupted` there, as v1→v2 and v3→v4 close it;
//! - seqs are renumbered densely and the references follow them (`sourceEventSeqs`, replaced
//!   runs, `messageSeqs`, `headerSeq`, `sourceEventSeq`, compactions' shadowed runs).

use std::collections::HashMap;

use dsh_abi::events;
use serde_json::{json, Map, Value};

use super::extensions;
use super::legacy::Legacy;
use super::seed::{self, InheritedCut};
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
    /// A forked session's inherited cut.
    cut: InheritedCut,
    /// v0→v1's normalisations (of a v0 log).
    legacy: Legacy,
    /// The source seq of the first chunk of the attempt being read.
    stream_first: Option<u64>,
    /// How many source events were read (packed members each count), and the last one's time.
    events: u64,
    last_time: u64,
}

impl Migration {
    /// The migration of session `session_id`'s log of generation `from` (0 to 3), created at
    /// `created_at`, with its inherited cut.
    pub fn new(session_id: &str, from: u32, created_at: u64, cut: InheritedCut) -> Migration {
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
            cut,
            legacy: Legacy::new(session_id),
            stream_first: None,
            events: 0,
            last_time: created_at,
        }
    }

    /// The v4 events `event` becomes, in order; an error says why it cannot be migrated.
    pub fn take(&mut self, event: &EventView<'_>) -> Result<Vec<Shaped>, String> {
        let time = event.time.unwrap_or_default() as u64;
        let mut data: Value = serde_json::from_str(event.data).map_err(|err| format!("its data is not JSON: {err}"))?;
        let origin = event.seq.unwrap_or_default() as u64;
        (self.events, self.last_time) = (self.events.max(origin + 1), time);
        if event.event_type == events::ASSISTANT_CHUNK {
            if self.from >= 2 {
                return Err(format!("format v{} has no assistant/chunk events (its streams are embedded)", self.from));
            }
            return self.chunk(event, origin, data, time);
        }
        let envelope: Value = serde_json::from_str(event.line).unwrap_or_default();
        if self.from == 0 {
            let replaces = envelope["surfaceOp"]["start"].as_u64().filter(|_| envelope["surfaceOp"]["op"] == "replace");
            self.legacy.normalise(event.event_type, origin, replaces, &mut data)?;
        }
        let mut out = Vec::new();
        let end_seed = event.event_type == events::SESSION_END_SEED;
        if end_seed {
            self.cut.end_seed(&data)?;
        }
        if self.cut.marker_before(origin, event.event_type, end_seed.then_some(&mut data)) {
            self.mark_cut(time, &mut out);
        }
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

    /// The v4 events that close the log: the inherited cut's marker, when the log holds only
    /// inherited events.
    pub fn finish(&mut self) -> Result<Vec<Shaped>, String> {
        let mut out = Vec::new();
        if self.cut.finish(self.events)? {
            self.mark_cut(self.last_time, &mut out);
        }
        Ok(out)
    }

    /// The inherited cut's `session/end-seed` marker (an event of v1→v2, so of the v2 log too).
    fn mark_cut(&mut self, time: u64, out: &mut Vec<Shaped>) {
        self.v2_seq += 1;
        self.emit(Shaped::new(events::SESSION_END_SEED, seed::marker_data(), time), out);
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
        // Before v2 it is v1→v2 that closes the turn, so the v2 log holds it too.
        if self.from <= 1 {
            self.v2_seq += 1;
        }
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
        if self.from == 3 {
            let origin = event.seq.unwrap_or_default() as u64;
            if let Some(opaque) = extensions::opaque_type(event.event_type, event.ignorable, origin)? {
                return Ok(Shaped { ignorable: true, ..Shaped::new(&opaque, data, time) });
            }
        }
        self.remap_references(&mut data)?;
        let v2_seq = self.v2_seq;
        self.v2_seq += 1;
        if self.from <= 2 {
            extensions::refuse_undeclared_blocks(event.event_type, &data, v2_seq)?;
        }
        let event_type = event.event_type.replace("tool/code-dispatch", "tool/ptc-dispatch");
        // Before v2 an assistant message cites its chunks, which its stream takes in.
        let folds_chunks = event.event_type == events::ASSISTANT_MESSAGE && self.from <= 1;
        let mut source_seqs = if folds_chunks { Vec::new() } else { self.cited(envelope)? };
        let replaces = self.replaced(envelope)?;
        self.follow_turns(event.event_type, &data);
        let data = match event.event_type {
            events::REQUEST_HEADER if self.from <= 2 => self.request_header(data, v2_seq, time, out)?,
            events::ASSISTANT_MESSAGE if folds_chunks => self.folded(event, data, v2_seq)?,
            events::ASSISTANT_ATTEMPT if self.from <= 1 => encode_v4::attempt(&data, time),
            "agent-preset/selected" if self.from <= 2 && data["agentPreset"] == "code" => {
                let mut renamed = data;
                renamed["agentPreset"] = "ptc".into();
                renamed
            }
            events::TOOL_RESULT => lift_tool_result(data, self.next_seq)?,
            _ => data,
        };
        let mut data = encode_v4::with_producer_sources(event.event_type, data);
        if event.event_type == events::TOOL_RESULT && source_seqs.is_empty() {
            source_seqs.extend(events::answered_call(&data).and_then(|call| self.calls.get(call)));
        }
        extensions::namespace_content(&event_type, &mut data, self.next_seq)?;
        let dsh_only = crate::vocabulary::DSH_ONLY_V4_TYPES.contains(&event.event_type);
        let ignorable = (event.ignorable || dsh_only) && !crate::vocabulary::is_known(Format::V4, &event_type);
        Ok(Shaped { source_seqs, replaces, ignorable, ..Shaped::new(&event_type, data, time) })
    }

    /// An assistant message before v2 with the chunks it cites taken into its stream, which the
    /// inherited cut may not divide.
    fn folded(&mut self, event: &EventView<'_>, data: Value, v2_seq: u64) -> Result<Value, String> {
        if let Some(first) = self.stream_first.take() {
            self.cut.whole_attempt(first, event.seq.unwrap_or_default() as u64)?;
        }
        let data = with_stream(data, std::mem::take(&mut self.stream));
        extensions::refuse_undeclared_blocks(events::ASSISTANT_MESSAGE, &data, v2_seq)?;
        Ok(data)
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

    /// A chunk (source seq `origin`) joins the attempt's stream; a finish error closes the
    /// attempt.
    fn chunk(&mut self, event: &EventView<'_>, origin: u64, data: Value, time: u64) -> Result<Vec<Shaped>, String> {
        let first = *self.stream_first.get_or_insert(origin);
        self.cut.whole_attempt(first, origin)?;
        let chunk = data.get("chunk").cloned().unwrap_or(Value::Null);
        if event.packed {
            self.pack(event.at, &chunk, time);
            return Ok(Vec::new());
        }
        self.packed = None;
        let failed = chunk["type"] == "finish" && chunk["reason"]["kind"] == "error";
        self.stream.push(json!({"type": "chunk", "time": time, "chunk": chunk}));
        if !failed {
            return Ok(Vec::new());
        }
        self.stream_first = None;
        let stream = std::mem::take(&mut self.stream);
        let attempt = json!({"turn": data["turn"], "step": data["step"], "stream": stream});
        let mut out = Vec::new();
        if self.cut.marker_before(origin, events::ASSISTANT_ATTEMPT, None) {
            self.mark_cut(time, &mut out);
        }
        extensions::refuse_undeclared_blocks(events::ASSISTANT_ATTEMPT, &attempt, self.v2_seq)?;
        self.v2_seq += 1;
        let mut attempt = Shaped::new(events::ASSISTANT_ATTEMPT, attempt, time);
        extensions::namespace_content(events::ASSISTANT_ATTEMPT, &mut attempt.data, self.next_seq)?;
        self.emit(attempt, &mut out);
        Ok(out)
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
/// message (`role, source, toolCallId, content, [isError], id`, then what the message and the
/// wrapper carried beyond their own members, as `plugin:message:<key>` and
/// `plugin:result:<key>`), the event's other members kept in their order; a result already in
/// v4's shape stays as it is. `seq` is the event's v4 seq.
fn lift_tool_result(mut data: Value, seq: u64) -> Result<Value, String> {
    let Some(message) = data.get("message").filter(|message| message["role"] == "user") else { return Ok(data) };
    let subject = format!("format v3 tool/result at seq {seq}");
    let call = message["source"]["callId"].as_str().filter(|call| !call.is_empty());
    let wrapper = match message["content"].as_array().map(Vec::as_slice) {
        Some([wrapper]) => wrapper,
        _ => &Value::Null,
    };
    let id = message["id"].as_str().filter(|id| !id.is_empty());
    let matches = wrapper["type"] == "tool-result" && call.is_some() && wrapper["toolCallId"].as_str() == call;
    if id.is_none() || message["source"]["kind"] != "tool" || !matches {
        return Err(format!("{subject} requires exactly one tool-result wrapper matching its tool source"));
    }
    if wrapper.get("isError").is_some_and(|is_error| !is_error.is_boolean()) {
        return Err(format!("{subject} tool-result isError must be boolean"));
    }
    let content =
        wrapper["content"].as_array().ok_or_else(|| format!("{subject} tool-result content must be an array"))?;
    if content.iter().any(|block| block["type"] == "tool-result") {
        return Err(format!("{subject} contains a nested tool-result unsupported by this converter"));
    }
    let mut lifted = Map::new();
    lifted.insert("role".into(), "tool".into());
    lifted.insert("source".into(), message["source"].clone());
    lifted.insert("toolCallId".into(), wrapper["toolCallId"].clone());
    lifted.insert("content".into(), wrapper["content"].clone());
    if let Some(is_error) = wrapper.get("isError") {
        lifted.insert("isError".into(), is_error.clone());
    }
    lifted.insert("id".into(), message["id"].clone());
    lifted.extend(extensions::extension_members(message, &["id", "role", "source", "content"], "message"));
    lifted.extend(extensions::extension_members(wrapper, &["type", "toolCallId", "content", "isError"], "result"));
    data["message"] = Value::Object(lifted);
    Ok(data)
}
