//! Format v4's own rules, on top of the turn and step rules every format shares (see
//! [`structure`](super::structure)): the header's exact members, each envelope's members and
//! surface metadata (`surfaceOp`, `sourceEventSeqs`), the payload rules DeepSeek Harness 0.2's
//! reader applies (no `header.system`, developer roles, tool failure metadata), the protected
//! system head, tool lifecycles and retry chains. What 0.1 left to the `llm-retry-invariant`
//! plugin, v4's reader checks itself, and so do these rules. Messages are the reference's.

use std::collections::{HashMap, HashSet};

use dsh_abi::events;
use serde_json::{Map, Value};

use super::vocabulary;

const HEADER_REQUIRED: [&str; 6] = ["type", "version", "id", "createdAt", "isSeeded", "delegationDepth"];
const HEADER_OPTIONAL: [&str; 4] = ["cwd", "parentSession", "origin", "agentPreset"];
const ENVELOPE_MEMBERS: [&str; 7] = ["type", "seq", "time", "data", "ignorable", "surfaceOp", "sourceEventSeqs"];
/// The code of the synthetic result crash repair gives a tool call that never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";

fn is_count(value: &Value) -> bool {
    value.as_f64().is_some_and(|n| dsh_abi::js::is_safe_integer(n) && n >= 0.0) && value.as_f64() != Some(-0.0)
        || value.as_u64().is_some()
}

fn count(value: Option<&Value>) -> Option<u64> {
    value.filter(|value| is_count(value)).and_then(|value| value.as_f64()).map(|n| n as u64)
}

/// What is wrong with a v4 header (the reference reads it member by member and stops at the
/// first; every finding is listed here, in its order).
pub fn header_violations(header: &Map<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    if header.contains_key("sandboxMode") || header.contains_key("approvalPolicy") {
        found.push("session header uses retired policy baseline fields".to_owned());
    }
    let admitted = |key: &str| HEADER_REQUIRED.contains(&key) || HEADER_OPTIONAL.contains(&key);
    if let Some(key) = header.keys().find(|key| !admitted(key)) {
        found.push(format!("format v4 header has unexpected member {}", dsh_abi::js::to_string(key)));
    }
    if let Some(key) = HEADER_REQUIRED.iter().find(|key| !header.contains_key(**key)) {
        found.push(format!("format v4 header lacks required member {}", dsh_abi::js::to_string(key)));
    }
    if !header.get("id").is_some_and(Value::is_string) {
        found.push("format v4 header id must be a string".to_owned());
    }
    for key in ["createdAt", "delegationDepth"] {
        if count(header.get(key)).is_none() {
            found.push(format!("format v4 header {key} must be a non-negative safe integer"));
        }
    }
    if !header.get("isSeeded").is_some_and(Value::is_boolean) {
        found.push("format v4 header isSeeded must be a boolean".to_owned());
    }
    for key in ["cwd", "parentSession", "agentPreset"] {
        if header.get(key).is_some_and(|value| !value.is_string()) {
            found.push(format!("format v4 header {key} must be a string"));
        }
    }
    if header.get("cwd").and_then(Value::as_str).is_some_and(|cwd| !cwd.starts_with('/')) {
        found.push("format v4 header cwd must be absolute".to_owned());
    }
    if header.get("origin").is_some_and(|origin| origin != "subagent") {
        found.push("format v4 header origin must be \"subagent\"".to_owned());
    }
    found
}

/// Where a surface event goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SurfaceOp {
    Append,
    Replace { start: u64, end: u64 },
}

/// A tool call the step's assistant message asked for.
#[derive(Debug, Clone)]
struct Advertised {
    call_id: String,
    name: String,
    arguments: String,
    /// The seq of its `tool/call`, once started.
    started: Option<u64>,
    resolved: bool,
}

/// A retry chain: one per turn, step, provider and policy.
#[derive(Debug, Clone)]
struct Chain {
    retry_id: String,
    retry: u64,
}

/// The state v4's rules keep between events.
#[derive(Debug, Clone, Default)]
pub struct V4Rules {
    /// The seqs of the current surface, in order.
    surface: Vec<u64>,
    system_head: Option<u64>,
    advertised: Vec<Advertised>,
    /// The provider of the last `request/header`.
    provider: Option<String>,
    chains: HashMap<(u64, u64, String, String), Chain>,
    chain_of_id: HashMap<String, (u64, u64, String, String)>,
    /// Scheduled retries (`retryId`, `retry`) and whether they started.
    scheduled: HashMap<(String, u64), bool>,
}

/// The open turn and step, as the shared rules track them.
#[derive(Debug, Clone, Copy)]
pub struct OpenStep {
    pub turn: Option<u64>,
    pub step: Option<u64>,
}

impl V4Rules {
    /// Checks one event of a v4 log (its whole envelope `line` and its `data`) and takes it in.
    pub fn check(
        &mut self,
        event_type: &str,
        seq: u64,
        line: &str,
        data: &str,
        open: OpenStep,
        violations: &mut dyn FnMut(String),
    ) {
        let envelope: Map<String, Value> = serde_json::from_str(line).unwrap_or_default();
        if let Some(key) = envelope.keys().find(|key| !ENVELOPE_MEMBERS.contains(&key.as_str())) {
            violations(format!("Session event {seq} has unexpected member {}", dsh_abi::js::to_string(key)));
        }
        let known = vocabulary::is_known(super::format::Format::V4, event_type);
        if !known {
            return;
        }
        let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        let op = self.surface_metadata(event_type, seq, &envelope, violations);
        payload_rules(event_type, &data, seq, violations);
        match event_type {
            events::TOOL_CALL => self.tool_call(&data, seq, violations),
            events::TOOL_RESULT => self.tool_result(&envelope, &data, seq, violations),
            events::ASSISTANT_MESSAGE => self.advertise(&data),
            events::STEP_START => self.advertised.clear(),
            events::STEP_END | events::TURN_END => self.unresolved(event_type, seq, violations),
            events::REQUEST_HEADER => {
                self.provider = data.pointer("/header/config/provider").and_then(Value::as_str).map(str::to_owned);
            }
            events::LLM_RETRY => self.retry(&data, open, violations),
            events::LLM_RETRY_STARTED => self.retry_started(&data, open, violations),
            _ => {}
        }
        if let Some(op) = op {
            self.place(event_type, seq, op, &envelope, violations);
        }
    }

    /// `surfaceOp` and `sourceEventSeqs` as the event's type admits them.
    fn surface_metadata(
        &self,
        event_type: &str,
        seq: u64,
        envelope: &Map<String, Value>,
        violations: &mut dyn FnMut(String),
    ) -> Option<SurfaceOp> {
        let quoted = dsh_abi::js::to_string(event_type);
        if !vocabulary::is_surface(super::format::Format::V4, event_type) {
            for key in ["surfaceOp", "sourceEventSeqs"] {
                if envelope.contains_key(key) {
                    violations(format!("session event {quoted} is not surface-eligible and cannot carry {key}"));
                }
            }
            return None;
        }
        if let Some(sources) = envelope.get("sourceEventSeqs") {
            source_rules(event_type, seq, sources, violations);
        }
        let op = match envelope.get("surfaceOp") {
            None => {
                violations(format!("session event {quoted} is surface-eligible and requires a surfaceOp marker"));
                return None;
            }
            Some(Value::String(op)) if op == "append" => SurfaceOp::Append,
            Some(Value::Object(op)) => match replace_op(op) {
                Some(op) => op,
                None => {
                    violations(format!("session event {quoted} carries an invalid replace surfaceOp"));
                    return None;
                }
            },
            Some(_) => {
                violations(format!("session event {quoted} carries an invalid surfaceOp"));
                return None;
            }
        };
        if let SurfaceOp::Replace { start, end } = op {
            if start >= seq || end >= seq {
                violations(format!("surface replace at seq {seq}: startSeq and endSeq must reference earlier events"));
                return None;
            }
        }
        Some(op)
    }
}

fn replace_op(op: &Map<String, Value>) -> Option<SurfaceOp> {
    let exact = op.len() == 3 && op.get("op").and_then(Value::as_str) == Some("replace");
    let (start, end) = (count(op.get("startSeq"))?, count(op.get("endSeq"))?);
    exact.then_some(SurfaceOp::Replace { start, end })
}

/// The seqs `sourceEventSeqs` names, in its storage form (a run of three or more written as a
/// `[start, end]` pair).
fn decode_sources(value: &Value, seq: u64) -> Result<Vec<u64>, String> {
    let Some(entries) = value.as_array() else { return Err("sourceEventSeqs must be an array".to_owned()) };
    let mut output = Vec::new();
    let mut has_range = false;
    let room = |output: &Vec<u64>| seq.saturating_sub(output.len() as u64);
    for entry in entries {
        if entry.is_number() {
            if room(&output) == 0 {
                return Err("sourceEventSeqs exceeds its event seq".to_owned());
            }
            output.push(count(Some(entry)).ok_or("sourceEventSeqs member must be a non-negative safe integer")?);
            continue;
        }
        let pair = entry.as_array().filter(|pair| pair.len() == 2);
        let Some(pair) = pair else { return Err("sourceEventSeqs range must be a [start, end] pair".to_owned()) };
        let start = count(pair.first()).ok_or("sourceEventSeqs range start must be a non-negative safe integer")?;
        let end = count(pair.get(1)).ok_or("sourceEventSeqs range end must be a non-negative safe integer")?;
        if end < start || end - start + 1 > room(&output) {
            return Err("sourceEventSeqs range exceeds its event seq".to_owned());
        }
        output.extend(start..=end);
        has_range = true;
    }
    if has_range && output.windows(2).any(|pair| pair[1] <= pair[0]) {
        return Err("sourceEventSeqs ranges must be strictly increasing".to_owned());
    }
    Ok(output)
}

fn source_rules(event_type: &str, seq: u64, sources: &Value, violations: &mut dyn FnMut(String)) {
    if event_type == events::ASSISTANT_MESSAGE {
        violations("assistant/message embeds its source stream and cannot carry sourceEventSeqs".to_owned());
        return;
    }
    let sources = match decode_sources(sources, seq) {
        Ok(sources) => sources,
        Err(message) => return violations(message),
    };
    if sources.is_empty() {
        return violations("sourceEventSeqs must not be empty".to_owned());
    }
    if sources.iter().collect::<HashSet<_>>().len() != sources.len() {
        return violations("sourceEventSeqs must not contain duplicates".to_owned());
    }
    if let Some(later) = sources.iter().find(|source| **source >= seq) {
        violations(format!("sourceEventSeqs must reference earlier events: {later} >= current seq {seq}"));
    }
}

/// The payload rules v4's reader applies to every event of these types.
fn payload_rules(event_type: &str, data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
    let subject = format!("session event {seq} ({event_type})");
    match event_type {
        events::REQUEST_HEADER => {
            let Some(header) = data.get("header").and_then(Value::as_object) else {
                return violations(format!("{subject} header must be an object"));
            };
            if header.contains_key("system") {
                violations(format!("{subject} must omit header.system; use system/message"));
            }
            if header.get("tools").and_then(Value::as_array).is_some_and(Vec::is_empty) {
                violations(format!("{subject} must omit empty tools"));
            }
            if header.get("adapterDefaults").and_then(Value::as_object).is_some_and(Map::is_empty) {
                violations(format!("{subject} must omit empty adapterDefaults"));
            }
        }
        events::TOOL_RESULT
            if data.get("error").is_some() && data.pointer("/message/isError") != Some(&Value::Bool(true)) =>
        {
            violations(format!("{subject} error requires message.isError === true"));
        }
        _ => {}
    }
    if vocabulary::is_surface(super::format::Format::V4, event_type) {
        developer_rules(event_type, data, &subject, violations);
    }
}

fn developer_rules(event_type: &str, data: &Value, subject: &str, violations: &mut dyn FnMut(String)) {
    let message = if event_type == events::USER_MESSAGE { Some(data) } else { data.get("message") };
    let Some(message) = message.filter(|message| message.is_object()) else { return };
    let developer = message.get("role").and_then(Value::as_str) == Some("developer");
    if (event_type == events::DEVELOPER_MESSAGE) != developer {
        violations(format!("{subject} developer/message and developer role must occur together"));
    }
    let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
    let change_kind =
        |block: &&Value| matches!(block.get("type").and_then(Value::as_str), Some("tool-addition" | "tool-removal"));
    let changes: Vec<&Value> = blocks.filter(change_kind).collect();
    if !developer && !changes.is_empty() {
        violations(format!("{subject} tool-change blocks require developer role"));
    }
    if event_type != events::DEVELOPER_MESSAGE {
        return;
    }
    let mut additions = false;
    for block in changes {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
        if block.get("toolName").and_then(Value::as_str).is_none_or(str::is_empty) {
            violations(format!("{subject} {kind} requires a nonempty toolName"));
        }
        if kind == "tool-addition" {
            additions = true;
            if block.get("tool").is_some() {
                violations(format!("{subject} tool-addition must omit inline tool definitions"));
            }
        }
    }
    let header_seq = data.get("headerSeq");
    if (additions && count(header_seq).is_none()) || (!additions && header_seq.is_some()) {
        violations(format!("{subject} requires headerSeq exactly when tool additions are present"));
    }
}

impl V4Rules {
    /// Takes a surface event onto the surface: appended, or in place of the range it replaces,
    /// which must be on the surface, must not shadow the protected system head unless it is a
    /// system prompt replacing exactly it, and must be cited in `sourceEventSeqs`.
    fn place(
        &mut self,
        event_type: &str,
        seq: u64,
        op: SurfaceOp,
        envelope: &Map<String, Value>,
        violations: &mut dyn FnMut(String),
    ) {
        let system = event_type == events::SYSTEM_MESSAGE;
        let SurfaceOp::Replace { start, end } = op else {
            if system && !self.surface.is_empty() && self.system_head.is_none() {
                violations("system/message requires a protected first surface head".to_owned());
            }
            if system && self.surface.is_empty() {
                self.system_head = Some(seq);
            }
            self.surface.push(seq);
            return;
        };
        let head = self.system_head;
        let touches_head = head.is_some() && (Some(start) == head || Some(end) == head);
        if touches_head && !system {
            violations("surface replacement cannot shadow the protected system head".to_owned());
        } else if touches_head && (Some(start) != head || Some(end) != head) {
            violations("system/message must replace exactly the current system head".to_owned());
        }
        let (Some(from), Some(to)) = (self.position(start), self.position(end)) else {
            return violations(format!(
                "surface replace at seq {seq}: startSeq and endSeq must be on the current surface"
            ));
        };
        if from > to {
            return violations(format!("surface replace at seq {seq}: startSeq must not come after endSeq"));
        }
        let cited = envelope.get("sourceEventSeqs").and_then(|sources| decode_sources(sources, seq).ok());
        let cited: HashSet<u64> = cited.unwrap_or_default().into_iter().collect();
        let missing: Vec<String> =
            self.surface[from..=to].iter().filter(|shadowed| !cited.contains(shadowed)).map(u64::to_string).collect();
        if !missing.is_empty() {
            violations(format!(
                "surface replace: sourceEventSeqs must include every shadowed surface node; missing {}",
                missing.join(", ")
            ));
        }
        if touches_head && system {
            self.system_head = Some(seq);
        }
        self.surface.splice(from..=to, [seq]);
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.surface.iter().position(|on| *on == seq)
    }

    fn advertise(&mut self, data: &Value) {
        let message = data.get("message").unwrap_or(&Value::Null);
        self.advertised.extend(events::tool_calls(message).map(|block| Advertised {
            call_id: events::call_id(block).unwrap_or_default().to_owned(),
            name: block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: block.get("arguments").and_then(Value::as_str).unwrap_or_default().to_owned(),
            started: None,
            resolved: false,
        }));
    }

    /// A `tool/call` starts exactly one advertised call, with its name and raw arguments.
    fn tool_call(&mut self, data: &Value, seq: u64, violations: &mut dyn FnMut(String)) {
        let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or_default();
        let (call_id, name, arguments) = (text("callId"), text("name"), text("arguments"));
        let matching: Vec<usize> = (0..self.advertised.len())
            .filter(|index| {
                let call = &self.advertised[*index];
                call.call_id == call_id && call.name == name && call.arguments == arguments
            })
            .collect();
        match matching[..] {
            [index] if self.advertised[index].started.is_none() => self.advertised[index].started = Some(seq),
            [_] => violations(format!("tool/call {seq} starts call {} a second time", dsh_abi::js::to_string(call_id))),
            _ => violations(format!(
                "tool/call {seq} does not match exactly one advertised tool call (callId {}, name {})",
                dsh_abi::js::to_string(call_id),
                dsh_abi::js::to_string(name)
            )),
        }
    }

    /// A `tool/result` resolves a started call, citing its `tool/call`; a call that never started
    /// is resolved only by crash repair's `TOOL_NOT_STARTED` result.
    fn tool_result(
        &mut self,
        envelope: &Map<String, Value>,
        data: &Value,
        seq: u64,
        violations: &mut dyn FnMut(String),
    ) {
        let call_id = events::answered_call(data).unwrap_or_default().to_owned();
        let quoted = dsh_abi::js::to_string(&call_id);
        let Some(call) = self.advertised.iter_mut().find(|call| call.call_id == call_id && !call.resolved) else {
            return violations(format!("tool/result {seq} answers no unresolved advertised call {quoted}"));
        };
        call.resolved = true;
        match call.started {
            Some(started) => {
                let cited = envelope.get("sourceEventSeqs").and_then(|sources| decode_sources(sources, seq).ok());
                if !cited.unwrap_or_default().contains(&started) {
                    violations(format!("tool/result {seq} must cite its tool/call {started} in sourceEventSeqs"));
                }
            }
            None if is_not_started_repair(envelope, data, &call_id, seq) => {}
            None => violations(format!(
                "tool/result {seq} answers call {quoted}, which never started, and is not the {TOOL_NOT_STARTED} repair"
            )),
        }
    }

    fn unresolved(&self, event_type: &str, seq: u64, violations: &mut dyn FnMut(String)) {
        if let Some(call) = self.advertised.iter().find(|call| !call.resolved) {
            violations(format!(
                "{event_type} {seq} leaves tool call {} unresolved",
                dsh_abi::js::to_string(&call.call_id)
            ));
        }
    }
}

/// Crash repair's result for a call that never started: error `ToolNotStartedError`
/// `TOOL_NOT_STARTED`, no `sourceEventSeqs`, and the message id `interrupted-tool-result-<callId>-<seq>`.
fn is_not_started_repair(envelope: &Map<String, Value>, data: &Value, call_id: &str, seq: u64) -> bool {
    let error = data.get("error");
    error.and_then(|error| error.get("code")).and_then(Value::as_str) == Some(TOOL_NOT_STARTED)
        && error.and_then(|error| error.get("name")).and_then(Value::as_str) == Some("ToolNotStartedError")
        && !envelope.contains_key("sourceEventSeqs")
        && data.pointer("/message/id").and_then(Value::as_str)
            == Some(&format!("interrupted-tool-result-{call_id}-{seq}"))
}

impl V4Rules {
    /// An `llm/retry` continues its chain: the open turn, step and request's provider, `retry` one
    /// more than the chain's last, one `retryId` per chain.
    fn retry(&mut self, data: &Value, open: OpenStep, violations: &mut dyn FnMut(String)) {
        let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (retry_id, provider, policy) = (text("retryId"), text("provider"), text("policyKey"));
        let (turn, step, retry) = (count(data.get("turn")), count(data.get("step")), count(data.get("retry")));
        if (turn, step) != (open.turn, open.step) || turn.is_none() {
            return violations("llm/retry does not match the open turn and step".to_owned());
        }
        if self.provider.as_deref() != Some(provider.as_str()) {
            return violations(format!(
                "llm/retry provider {} does not match the open request/header",
                dsh_abi::js::to_string(&provider)
            ));
        }
        let key = (turn.unwrap_or(0), step.unwrap_or(0), provider, policy);
        let prior = self.chains.get(&key).map_or(0, |chain| chain.retry);
        if retry != Some(prior + 1) {
            return violations(format!("llm/retry retry must be {} in its chain", prior + 1));
        }
        match (self.chains.get(&key), self.chain_of_id.get(&retry_id)) {
            (Some(chain), _) if chain.retry_id != retry_id => {
                return violations("llm/retry changes the retryId of its chain".to_owned());
            }
            (None, Some(_)) => return violations("llm/retry reuses the retryId of another chain".to_owned()),
            _ => {}
        }
        self.chain_of_id.insert(retry_id.clone(), key.clone());
        self.scheduled.insert((retry_id.clone(), prior + 1), false);
        self.chains.insert(key, Chain { retry_id, retry: prior + 1 });
    }

    /// An `llm/retry-started` starts one scheduled retry, once.
    fn retry_started(&mut self, data: &Value, open: OpenStep, violations: &mut dyn FnMut(String)) {
        let retry_id = data.get("retryId").and_then(Value::as_str).unwrap_or_default().to_owned();
        let retry = count(data.get("retry")).unwrap_or(0);
        if (count(data.get("turn")), count(data.get("step"))) != (open.turn, open.step) {
            return violations("llm/retry-started does not match the open turn and step".to_owned());
        }
        match self.scheduled.get_mut(&(retry_id, retry)) {
            Some(started @ false) => *started = true,
            Some(true) => violations(format!("llm/retry-started starts retry {retry} a second time")),
            None => violations(format!("llm/retry-started names no scheduled retry {retry}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The storage form DeepSeek Harness writes: a run of three or more as a `[start, end]` pair.
    fn encode(seqs: &[u64]) -> Value {
        let mut out = Vec::new();
        let mut index = 0;
        while index < seqs.len() {
            let mut end = index;
            while end + 1 < seqs.len() && seqs[end + 1] == seqs[end] + 1 {
                end += 1;
            }
            match end - index {
                0 | 1 => out.extend(seqs[index..=end].iter().map(|seq| Value::from(*seq))),
                _ => out.push(serde_json::json!([seqs[index], seqs[end]])),
            }
            index = end + 1;
        }
        Value::Array(out)
    }

    proptest! {
        #[test]
        fn sources_in_storage_form_decode_to_the_seqs_they_name(
            seqs in proptest::collection::btree_set(0u64..200, 1..40),
        ) {
            let seqs: Vec<u64> = seqs.into_iter().collect();
            let event_seq = seqs.last().unwrap() + 1;
            prop_assert_eq!(decode_sources(&encode(&seqs), event_seq), Ok(seqs));
        }
    }

    #[test]
    fn a_range_past_its_event_or_going_back_is_refused() {
        let decode = |text: &str, seq| decode_sources(&serde_json::from_str(text).unwrap(), seq);
        assert_eq!(decode("[[3,5],1]", 9), Err("sourceEventSeqs ranges must be strictly increasing".into()));
        assert_eq!(decode("[[3,12]]", 9), Err("sourceEventSeqs range exceeds its event seq".into()));
        assert_eq!(decode("[[3]]", 9), Err("sourceEventSeqs range must be a [start, end] pair".into()));
        assert_eq!(decode("[-1]", 9), Err("sourceEventSeqs member must be a non-negative safe integer".into()));
    }

    fn run(events: &[(&str, &str)]) -> Vec<String> {
        let mut rules = V4Rules::default();
        let mut found = Vec::new();
        for (seq, (event_type, extra)) in events.iter().enumerate() {
            let line = format!(r#"{{"type":"{event_type}","seq":{seq},"time":1,"data":{{"turn":1,"step":1}}{extra}}}"#);
            let open = OpenStep { turn: Some(1), step: Some(1) };
            rules.check(event_type, seq as u64, &line, r#"{"turn":1,"step":1}"#, open, &mut |m| found.push(m));
        }
        found
    }

    #[test]
    fn only_a_system_prompt_replaces_the_system_head_and_only_exactly_it() {
        let append = r#","surfaceOp":"append""#;
        let replace_head = r#","sourceEventSeqs":[0],"surfaceOp":{"op":"replace","startSeq":0,"endSeq":0}"#;
        assert!(
            run(&[("system/message", append), ("user/message", append), ("system/message", replace_head)]).is_empty()
        );
        assert_eq!(
            run(&[("system/message", append), ("user/message", append), ("user/message", replace_head)]),
            ["surface replacement cannot shadow the protected system head"]
        );
        let head_and_more = r#","sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","startSeq":0,"endSeq":1}"#;
        assert_eq!(
            run(&[("system/message", append), ("user/message", append), ("system/message", head_and_more)]),
            ["system/message must replace exactly the current system head"]
        );
        let uncited = r#","sourceEventSeqs":[1],"surfaceOp":{"op":"replace","startSeq":1,"endSeq":2}"#;
        assert_eq!(
            run(&[
                ("system/message", append),
                ("user/message", append),
                ("user/message", append),
                ("user/message", uncited)
            ]),
            ["surface replace: sourceEventSeqs must include every shadowed surface node; missing 2"]
        );
    }

    #[test]
    fn surface_metadata_belongs_to_surface_events_only() {
        assert_eq!(
            run(&[("turn/start", r#","surfaceOp":"append""#)]),
            ["session event \"turn/start\" is not surface-eligible and cannot carry surfaceOp"]
        );
        assert_eq!(
            run(&[("user/message", r#","extra":1,"surfaceOp":"append""#)]),
            ["Session event 0 has unexpected member \"extra\""]
        );
    }
}
