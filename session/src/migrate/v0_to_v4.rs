//! The events of a v0–v3 log as format v4, as DeepSeek Harness 0.2 migrates them along
//! v0→v1→v2→v3→v4 (its steps are described in `tests/fixtures/v4/FORMAT.md`), each generation
//! entering the chain at its own step:
//!
//! - v0→v1 keeps the events (v1 is v0 under another header) but for what 0.1's early builds
//!   wrote, which takes today's shape ([`legacy`](super::legacy));
//! - v1→v2: top-level `assistant/chunk`s and packed chunk rows go into the `stream` of the
//!   `assistant/message` that cites them all, in order (whose `sourceEventSeqs` go), or else of an
//!   `assistant/attempt` of their own, at their last chunk's time: chunks ended by a finish chunk
//!   and another chunk, by `step/end`, `turn/end`, `llm/retry` or `llm/retry-started`, by a
//!   message of another step, or by the log's end. Events read after an answer's last chunk
//!   follow its attempt. Consecutive deltas of one block share a stream record (`text-chunks`,
//!   `reasoning-chunks`, `tool-call-chunks`); a message without chunks gets `stream: []`. dsh's
//!   own v0 attempts (`{turn, step, failure}`) take v4's shape too;
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
    /// The answer being read (before v2).
    pending: Option<Pending>,
    /// The stream the assistant message being shaped takes in.
    folding: Vec<Value>,
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
            pending: None,
            folding: Vec::new(),
            open_turn: None,
            open_step: None,
            queued_next_turn: false,
            head: None,
            cut,
            legacy: Legacy::new(session_id),
            events: 0,
            last_time: created_at,
        }
    }

    /// The v4 events `event` becomes, in order; an error says why it cannot be migrated.
    pub fn take(&mut self, event: &EventView<'_>) -> Result<Vec<Shaped>, String> {
        let origin = self.next_source_seq(event)?;
        let time = event.time.unwrap_or_default() as u64;
        let data: Value = serde_json::from_str(event.data).map_err(|err| format!("its data is not JSON: {err}"))?;
        self.last_time = time;
        if event.event_type == events::ASSISTANT_CHUNK {
            if self.from >= 2 {
                return Err(format!("format v{} has no assistant/chunk events (its streams are embedded)", self.from));
            }
            return self.chunk(event, origin, data, time);
        }
        if self.from <= 1 {
            if event.event_type == events::ASSISTANT_MESSAGE {
                return self.message(event, origin, &data);
            }
            if CLOSE_ATTEMPT.contains(&event.event_type) {
                let mut out = self.finish_attempt()?;
                out.extend(self.place(event, data, time)?);
                return Ok(out);
            }
            if let Some(pending) = &mut self.pending {
                pending.after.push(Held::of(event));
                return Ok(Vec::new());
            }
        }
        self.place(event, data, time)
    }

    /// The seq of the source event, which must be the next one (each member of a packed row
    /// takes one, as `seedLength` counts them); it is counted.
    fn next_source_seq(&mut self, event: &EventView<'_>) -> Result<u64, String> {
        let expected = self.events;
        if event.seq != Some(expected as f64) {
            return Err(crate::structure::misplaced_seq(event.event_type, event.seq, expected as f64));
        }
        self.events += 1;
        Ok(expected)
    }

    /// The v4 events of an event that is not a chunk, once the answer before it is placed.
    fn place(&mut self, event: &EventView<'_>, mut data: Value, time: u64) -> Result<Vec<Shaped>, String> {
        let origin = event.seq.unwrap_or_default() as u64;
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
        let mut out = self.finish_attempt()?;
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
        let next = open.as_u64().and_then(|turn| turn.checked_add(1));
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
            events::ASSISTANT_MESSAGE if folds_chunks => self.folded(data, v2_seq)?,
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

    /// An assistant message before v2 with the chunks it cites taken into its stream.
    fn folded(&mut self, data: Value, v2_seq: u64) -> Result<Value, String> {
        let data = with_stream(data, std::mem::take(&mut self.folding));
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

    /// A chunk (source seq `origin`) joins its answer's stream; one of another step, or after a
    /// finish chunk, places the answer before it as a failed attempt first.
    fn chunk(&mut self, event: &EventView<'_>, origin: u64, data: Value, time: u64) -> Result<Vec<Shaped>, String> {
        let mut out = Vec::new();
        let another =
            |pending: &Pending| pending.terminal || pending.turn != data["turn"] || pending.step != data["step"];
        match &self.pending {
            Some(pending) if another(pending) => out = self.finish_attempt()?,
            Some(_) => out = self.release_held()?,
            None => {}
        }
        let pending = self.pending.get_or_insert_with(|| Pending::new(&data));
        self.cut.whole_attempt(pending.chunks.first().copied().unwrap_or(origin), origin)?;
        let chunk = data.get("chunk").cloned().unwrap_or(Value::Null);
        pending.terminal |= chunk["type"] == "finish";
        pending.chunks.push(origin);
        pending.last = (origin, time);
        match event.packed {
            true => pending.stream.pack(event.at, &chunk, time),
            false => pending.stream.push(chunk, time),
        }
        Ok(out)
    }

    /// v1→v2's assistant message: it takes in the chunks it cites, all of its answer's, in
    /// order; without them its answer is placed before it as a failed attempt.
    fn message(&mut self, event: &EventView<'_>, origin: u64, data: &Value) -> Result<Vec<Shaped>, String> {
        let envelope: Value = serde_json::from_str(event.line).unwrap_or_default();
        let sources = envelope.get("sourceEventSeqs").and_then(Value::as_array);
        let same_step = |pending: &Pending| pending.turn == data["turn"] && pending.step == data["step"];
        let incomplete = || format!("assistant/message {origin} chunk references are not one complete ordered attempt");
        let mut out = Vec::new();
        match (self.pending.take(), sources) {
            (Some(pending), _) if !same_step(&pending) => {
                self.pending = Some(pending);
                out = self.finish_attempt()?;
            }
            (Some(_), None) => {
                return Err(format!("assistant/message {origin} does not cite its complete v1 chunk attempt"));
            }
            (pending, Some(sources)) if sources.is_empty() => {
                self.pending = pending;
                out = self.finish_attempt()?;
            }
            (None, Some(_)) => return Err(incomplete()),
            (Some(pending), Some(sources)) => {
                let cited: Vec<Option<u64>> = sources.iter().map(Value::as_u64).collect();
                if cited != pending.chunks.iter().copied().map(Some).collect::<Vec<_>>() {
                    return Err(incomplete());
                }
                self.cut.whole_attempt(pending.chunks.first().copied().unwrap_or(origin), origin)?;
                for held in &pending.after {
                    out.extend(self.place(&held.view(), held.data()?, held.time())?);
                }
                self.folding = pending.stream.records;
            }
            (None, None) => {}
        }
        let data = data.clone();
        out.extend(self.place(event, data, event.time.unwrap_or_default() as u64)?);
        Ok(out)
    }

    /// The events read after the answer's last chunk, placed where they are (another chunk of
    /// the same answer came).
    fn release_held(&mut self) -> Result<Vec<Shaped>, String> {
        let held = self.pending.as_mut().map(|pending| std::mem::take(&mut pending.after)).unwrap_or_default();
        let mut out = Vec::new();
        for event in &held {
            out.extend(self.place(&event.view(), event.data()?, event.time())?);
        }
        Ok(out)
    }

    /// The answer being read as a failed attempt of its own (`assistant/attempt`, at its last
    /// chunk's time), then the events read after its last chunk.
    fn finish_attempt(&mut self) -> Result<Vec<Shaped>, String> {
        let Some(pending) = self.pending.take() else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let (last, time) = pending.last;
        if self.cut.marker_before(last, events::ASSISTANT_ATTEMPT, None) {
            self.mark_cut(time, &mut out);
        }
        let attempt = json!({"turn": pending.turn, "step": pending.step, "stream": pending.stream.records});
        extensions::refuse_undeclared_blocks(events::ASSISTANT_ATTEMPT, &attempt, self.v2_seq)?;
        self.v2_seq += 1;
        let mut attempt = Shaped::new(events::ASSISTANT_ATTEMPT, attempt, time);
        extensions::namespace_content(events::ASSISTANT_ATTEMPT, &mut attempt.data, self.next_seq)?;
        self.emit(attempt, &mut out);
        for held in &pending.after {
            out.extend(self.place(&held.view(), held.data()?, held.time())?);
        }
        Ok(out)
    }
}

/// The events that end an answer's chunks before v2: what comes after them is not that answer.
const CLOSE_ATTEMPT: [&str; 4] = [events::TURN_END, events::STEP_END, events::LLM_RETRY, events::LLM_RETRY_STARTED];

/// An answer's chunks v1→v2 has read and not placed yet (0.2's pending attempt).
struct Pending {
    turn: Value,
    step: Value,
    stream: Stream,
    /// The source seqs of its chunks, in order.
    chunks: Vec<u64>,
    /// Its last chunk's source seq and time.
    last: (u64, u64),
    /// Whether a finish chunk came: a chunk after it starts another answer.
    terminal: bool,
    /// The events read since its last chunk.
    after: Vec<Held>,
}

impl Pending {
    fn new(data: &Value) -> Pending {
        Pending {
            turn: data["turn"].clone(),
            step: data["step"].clone(),
            stream: Stream::default(),
            chunks: Vec::new(),
            last: (0, 0),
            terminal: false,
            after: Vec::new(),
        }
    }
}

/// An event held back until the answer before it is placed.
struct Held {
    event_type: String,
    seq: Option<f64>,
    time: Option<f64>,
    data: String,
    ignorable: bool,
    line: String,
    at: Position,
}

impl Held {
    fn of(event: &EventView<'_>) -> Held {
        Held {
            event_type: event.event_type.to_owned(),
            seq: event.seq,
            time: event.time,
            data: event.data.to_owned(),
            ignorable: event.ignorable,
            line: event.line.to_owned(),
            at: event.at,
        }
    }

    fn view(&self) -> EventView<'_> {
        EventView {
            event_type: &self.event_type,
            seq: self.seq,
            time: self.time,
            data: &self.data,
            ignorable: self.ignorable,
            packed: false,
            line: &self.line,
            at: self.at,
        }
    }

    fn data(&self) -> Result<Value, String> {
        serde_json::from_str(&self.data).map_err(|err| format!("its data is not JSON: {err}"))
    }

    fn time(&self) -> u64 {
        self.time.unwrap_or_default() as u64
    }
}

/// An answer's stream records as 0.2 compacts them: consecutive deltas of one block (text,
/// reasoning, one tool call's arguments) share a record, whether they came one per event or
/// packed; other chunks are records of their own.
#[derive(Default)]
struct Stream {
    records: Vec<Value>,
    /// The packed row the last record's members came from.
    row: Option<Position>,
    /// The time of the last delta taken into the last record.
    last_time: u64,
}

impl Stream {
    /// A chunk that came as an event of its own.
    fn push(&mut self, chunk: Value, time: u64) {
        self.row = None;
        let compact = match chunk["type"].as_str() {
            Some("text-delta") => Some(("text-chunks", "texts", chunk["text"].clone())),
            Some("reasoning-delta") => Some(("reasoning-chunks", "texts", chunk["text"].clone())),
            Some("tool-call-delta")
                if chunk["id"].as_str().is_some_and(|id| !id.is_empty()) && chunk.get("name") != Some(&json!("")) =>
            {
                Some(("tool-call-chunks", "args", chunk["argumentsDelta"].clone()))
            }
            _ => None,
        };
        let Some((kind, members, member)) = compact else {
            self.records.push(json!({"type": "chunk", "time": time, "chunk": chunk}));
            return;
        };
        if !self.extends(kind, &chunk, time) {
            let mut record = Map::new();
            record.insert("type".into(), kind.into());
            record.insert("time0".into(), time.into());
            record.insert("index".into(), chunk["index"].clone());
            record.insert("dt".into(), Value::Array(Vec::new()));
            if kind == "tool-call-chunks" {
                record.insert("id".into(), chunk["id"].clone());
                if let Some(name) = chunk.get("name") {
                    record.insert("name".into(), name.clone());
                }
            }
            record.insert(members.into(), Value::Array(vec![member]));
            self.records.push(Value::Object(record));
        } else if let Some(record) = self.records.last_mut() {
            push_to(record, "dt", Value::from(time - self.last_time));
            push_to(record, members, member);
        }
        self.last_time = time;
    }

    /// Whether a delta of `kind` for `chunk`'s block, at `time`, joins the last record.
    fn extends(&self, kind: &str, chunk: &Value, time: u64) -> bool {
        let Some(last) = self.records.last() else { return false };
        let same_call =
            kind != "tool-call-chunks" || (last["id"] == chunk["id"] && last.get("name") == chunk.get("name"));
        last["type"] == kind && last["index"] == chunk["index"] && same_call && time >= self.last_time
    }

    /// A packed row's member joins its row's stream record; a row of text or reasoning joins the
    /// record of the same block before it.
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
        let joins = self.row == Some(at) || (members == "texts" && self.extends(row, chunk, time));
        match self.records.last_mut() {
            Some(record) if joins => {
                push_to(record, "dt", Value::from(time.saturating_sub(self.last_time)));
                push_to(record, members, member);
            }
            _ => {
                let mut record = Map::new();
                record.insert("type".into(), row.into());
                record.insert("time0".into(), time.into());
                record.insert("index".into(), chunk["index"].clone());
                record.insert("dt".into(), Value::Array(Vec::new()));
                record.insert(members.into(), Value::Array(vec![member]));
                self.records.push(Value::Object(record));
            }
        }
        self.row = Some(at);
        self.last_time = time;
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
