//! Format v4's own rules, on top of the turn and step rules every format shares (see
//! [`structure`](super::structure)), as DeepSeek Harness 0.2.1-rc.2's reader applies them when it
//! opens a log: the header's exact members; each row's members and `sourceEventSeqs` storage
//! form ([`surface`]); the payload rules of its row admission, adoption and restore
//! ([`payload`]); the surface fold with its protected system head ([`surface`]); tool lifecycles
//! and retry chains ([`lifecycle`]); a fork's inherited cut ([`seed`]). What 0.1 left to the `llm-retry-invariant` plugin, v4's reader
//! checks itself, and so do these rules, on open, on append and in `verify`. Messages are the
//! reference's own.

mod fields;
mod lifecycle;
mod payload;
mod seed;
mod surface;
pub(crate) use seed::UNMARKED_SEEDED;

use dsh_abi::events;
use serde_json::{Map, Value};

use super::format::Format;
use super::vocabulary;
use fields::{count, text};
use lifecycle::{Advertised, Retries};
use surface::Surface;

pub use fields::OpenStep;
pub use lifecycle::{NOT_STARTED_TEXT, TOOL_NOT_STARTED};

const HEADER_REQUIRED: [&str; 6] = ["type", "version", "id", "createdAt", "isSeeded", "delegationDepth"];
const HEADER_OPTIONAL: [&str; 4] = ["cwd", "parentSession", "origin", "agentPreset"];
const ENVELOPE_MEMBERS: [&str; 7] = ["type", "seq", "time", "data", "ignorable", "surfaceOp", "sourceEventSeqs"];

/// What is wrong with a v4 header. The reference names a shape failure only as "first line is not
/// a session header"; these name the member.
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
    let object = Value::Object(header.clone());
    if text(&object, "id").is_none() {
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
    if text(&object, "cwd").is_some_and(|cwd| !cwd.starts_with('/')) {
        found.push("format v4 header cwd must be absolute".to_owned());
    }
    if header.get("origin").is_some_and(|origin| origin != "subagent") {
        found.push("format v4 header origin must be \"subagent\"".to_owned());
    }
    found
}

/// The state v4's rules keep between events.
#[derive(Debug, Clone, Default)]
pub struct V4Rules {
    surface: Surface,
    /// The calls the open turn's assistant messages advertised and that have no result yet.
    advertised: Vec<Advertised>,
    retries: Retries,
    /// Whether the last event is a `session/end-seed`.
    last_was_end_seed: bool,
    inherited_marker: seed::InheritedMarkerRule,
}

impl V4Rules {
    /// The rules for a log whose header says `isSeeded: seeded`.
    pub fn for_header(seeded: bool) -> Self {
        V4Rules { inherited_marker: seed::InheritedMarkerRule { seeded, marked: false }, ..V4Rules::default() }
    }

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
            violations(format!("released v2 row {seq} has unexpected field {key}"));
        }
        let sources = surface::sources(&envelope, seq, violations);
        if !vocabulary::is_known(Format::V4, event_type) {
            return;
        }
        let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        self.last_was_end_seed = event_type == events::SESSION_END_SEED;
        if self.last_was_end_seed {
            self.inherited_marker.end_seed(&data, violations);
        }
        payload::admission(event_type, &data, seq, violations);
        let placed = self.surface.fold(event_type, seq, &envelope, &sources, violations);
        self.lifecycle(event_type, seq, &envelope, &data, open, violations);
        payload::adoption(event_type, &data, seq, violations);
        surface::metadata(event_type, &envelope, &sources, violations);
        payload::restore(event_type, &data, seq, violations);
        if placed {
            self.surface.placed(seq, &data);
        }
    }

    fn lifecycle(
        &mut self,
        event_type: &str,
        seq: u64,
        envelope: &Map<String, Value>,
        data: &Value,
        open: OpenStep,
        violations: &mut dyn FnMut(String),
    ) {
        match event_type {
            events::TURN_START => self.advertised.clear(),
            events::ASSISTANT_MESSAGE => lifecycle::advertise(&mut self.advertised, data, violations),
            events::TOOL_CALL => lifecycle::start(&mut self.advertised, data, seq, violations),
            events::TOOL_RESULT if envelope.get("surfaceOp") == Some(&Value::from("append")) => {
                lifecycle::resolve(&mut self.advertised, envelope, data, violations);
            }
            events::STEP_END | events::TURN_END => {
                lifecycle::unresolved(&self.advertised, event_type, violations);
                // Reported once: the calls do not outlive their step.
                self.advertised.clear();
            }
            events::REQUEST_HEADER => self.retries.request_header(data),
            events::LLM_RETRY => self.retries.retry(data, open, violations),
            events::LLM_RETRY_STARTED => self.retries.started(data, violations),
            _ => {}
        }
    }

    /// What only the whole log shows, once it is read: a seeded header without its inherited
    /// marker.
    pub fn finish(&self, violations: &mut dyn FnMut(String)) {
        self.inherited_marker.finish(violations);
    }

    /// The protected system head's seq and text, once the log has one.
    pub fn system_head(&self) -> Option<(u64, &str)> {
        self.surface.head()
    }

    /// Whether nothing is on the surface yet (a system head may still be appended).
    pub fn surface_is_empty(&self) -> bool {
        self.surface.is_empty()
    }

    /// Whether the last event marks where a restored history ends (`session/end-seed`).
    pub fn ends_with_seed(&self) -> bool {
        self.last_was_end_seed
    }

    /// The seq of the `tool/call` that started an unresolved call; `None` when the call was
    /// advertised but never started.
    pub fn started_call(&self, call_id: &str) -> Option<u64> {
        self.advertised.iter().find(|call| call.call_id == call_id)?.started
    }
}

#[cfg(test)]
mod tests {
    use super::surface::decode_sources;
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
            prop_assert_eq!(decode_sources(&encode(&seqs), event_seq), Ok(seqs.clone()));
            prop_assert!(decode_sources(&encode(&seqs), event_seq - 1).is_err(), "one seq short of its last source");
        }
    }

    #[test]
    fn a_range_past_its_event_or_going_back_is_refused() {
        let decode = |text: &str, seq| decode_sources(&serde_json::from_str(text).unwrap(), seq);
        assert_eq!(decode("[[3,5],1]", 9), Err("sourceEventSeqs ranges must be strictly increasing"));
        assert_eq!(decode("[[3,12]]", 9), Err("sourceEventSeqs range exceeds its event seq"));
        assert_eq!(decode("[[3]]", 9), Err("sourceEventSeqs range must be a [start, end] pair"));
        assert_eq!(decode("[-1]", 9), Err("sourceEventSeqs member must be a non-negative safe integer"));
        assert_eq!(decode("[4,4]", 9), Err("sourceEventSeqs ranges must contain unique earlier seqs"));
        assert_eq!(decode("[14,3]", 20), Ok(vec![14, 3]), "a plain list may be unsorted");
    }

    fn message(role: &str) -> String {
        format!(
            r#"{{"turn":1,"step":1,"message":{{"id":"m","role":"{role}","content":[],"source":{{"kind":"system-prompt"}}}}}}"#
        )
    }

    fn run(events: &[(&str, &str)]) -> Vec<String> {
        let mut rules = V4Rules::default();
        let mut found = Vec::new();
        for (seq, (event_type, extra)) in events.iter().enumerate() {
            let data = match *event_type {
                "user/message" => r#"{"id":"u","role":"user","content":[],"source":{"kind":"user"}}"#.to_owned(),
                kind => message(kind.split('/').next().unwrap()),
            };
            let line = format!(r#"{{"type":"{event_type}","seq":{seq},"time":1,"data":{data}{extra}}}"#);
            let open = OpenStep { turn: Some(1), step: Some(1), last_step: 1 };
            rules.check(event_type, seq as u64, &line, &data, open, &mut |m| found.push(m));
        }
        found
    }

    const APPEND: &str = r#","surfaceOp":"append""#;

    #[test]
    fn only_a_system_prompt_replaces_the_system_head_and_only_exactly_it() {
        let replace_head = r#","sourceEventSeqs":[0],"surfaceOp":{"op":"replace","startSeq":0,"endSeq":0}"#;
        assert!(
            run(&[("system/message", APPEND), ("user/message", APPEND), ("system/message", replace_head)]).is_empty()
        );
        assert_eq!(
            run(&[("system/message", APPEND), ("user/message", APPEND), ("user/message", replace_head)]),
            ["surface replacement cannot shadow the protected system head"]
        );
        let head_and_more = r#","sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","startSeq":0,"endSeq":1}"#;
        assert_eq!(
            run(&[("system/message", APPEND), ("user/message", APPEND), ("system/message", head_and_more)]),
            ["surface replacement cannot shadow the protected system head"]
        );
        let uncited = r#","sourceEventSeqs":[1],"surfaceOp":{"op":"replace","startSeq":1,"endSeq":2}"#;
        let events =
            [("system/message", APPEND), ("user/message", APPEND), ("user/message", APPEND), ("user/message", uncited)];
        assert_eq!(run(&events), ["replacement sourceEventSeqs omit a shadowed surface node"]);
        assert_eq!(
            run(&[("user/message", APPEND), ("system/message", APPEND)]),
            ["system/message requires a protected first surface head"]
        );
    }

    #[test]
    fn surface_metadata_belongs_to_surface_events_only() {
        assert_eq!(
            run(&[("turn/start", APPEND)]),
            ["session event \"turn/start\" is not surface-eligible and cannot carry surfaceOp"]
        );
        assert_eq!(
            run(&[("user/message", r#","extra":1,"surfaceOp":"append""#)]),
            ["released v2 row 0 has unexpected field extra"]
        );
        assert_eq!(run(&[("user/message", "")]), ["user/message surfaceOp requires an object"]);
    }

    /// The findings of a log whose header says `isSeeded: seeded`, holding `session/end-seed`s of
    /// these `data`, once read whole; each with the seq it was found at (`None`: the whole log).
    fn seed_findings(seeded: bool, markers: &[&str]) -> Vec<(Option<u64>, String)> {
        let mut rules = V4Rules::for_header(seeded);
        let mut found = Vec::new();
        let open = OpenStep { turn: None, step: None, last_step: 0 };
        for (seq, data) in markers.iter().enumerate() {
            let line = format!(r#"{{"type":"session/end-seed","seq":{seq},"time":1,"data":{data}}}"#);
            let seq = seq as u64;
            rules.check("session/end-seed", seq, &line, data, open, &mut |m| found.push((Some(seq), m)));
        }
        rules.finish(&mut |m| found.push((None, m)));
        found
    }

    #[test]
    fn a_seeded_log_needs_an_inherited_end_seed_marker_and_only_a_true_inherited_is_one() {
        let unmarked = [(None, seed::UNMARKED_SEEDED.to_owned())];
        assert_eq!(seed_findings(true, &[]), unmarked);
        assert_eq!(seed_findings(true, &["{}"]), unmarked);
        assert_eq!(seed_findings(true, &[r#"{"inherited":"true"}"#, r#"{"inherited":1}"#]), unmarked);
        assert_eq!(seed_findings(true, &[r#"{"inherited":false}"#]), unmarked);
        assert!(seed_findings(true, &[r#"{"inherited":true}"#]).is_empty());
        assert!(seed_findings(true, &[r#"{"inherited":true}"#, "{}", r#"{"inherited":true}"#]).is_empty());
    }

    #[test]
    fn an_unseeded_log_with_an_inherited_marker_is_refused_at_its_first_marker_once() {
        assert!(seed_findings(false, &[]).is_empty());
        assert!(seed_findings(false, &["{}", r#"{"inherited":false}"#]).is_empty(), "a restore's own marker");
        assert_eq!(
            seed_findings(false, &["{}", r#"{"inherited":true}"#, r#"{"inherited":true}"#]),
            [(Some(1), seed::MARKED_UNSEEDED.to_owned())]
        );
    }

    #[test]
    fn a_retry_chain_counts_up_by_one_under_one_retry_id() {
        let retry = |id: &str, retry: u64| {
            format!(r#"{{"retryId":"{id}","turn":1,"step":1,"provider":"p","policyKey":"k","retry":{retry}}}"#)
        };
        let mut rules = Retries::default();
        rules.request_header(&serde_json::json!({"header": {"config": {"provider": "p"}}}));
        let open = OpenStep { turn: Some(1), step: None, last_step: 1 };
        let mut found = Vec::new();
        for data in [retry("a", 1), retry("a", 2), retry("b", 3), retry("a", 4), retry("a", 3)] {
            rules.retry(&serde_json::from_str(&data).unwrap(), open, &mut |m| found.push(m));
        }
        assert_eq!(
            found,
            ["llm/retry must keep one retryId per policy chain", "llm/retry skips its policy attempt sequence"]
        );
        let started = |retry: u64| serde_json::json!({"retryId": "a", "turn": 1, "step": 1, "retry": retry});
        for data in [started(1), started(1), started(9)] {
            rules.started(&data, &mut |m| found.push(m));
        }
        assert_eq!(
            found[2..],
            ["llm/retry-started repeats one scheduled attempt", "llm/retry-started pairs no prior scheduled attempt"]
        );
    }
}
