//! The session structure rules, checked on every event (when a log is read, on append, and by
//! `dsh session verify`).
//!
//! Integrity rules — what DeepSeek Harness's loader refuses a log for, and what dsh will not write
//! after:
//!
//! - the header is `{"type":"session","version":0,"id":…,"createdAt":…,"delegationDepth":…}`;
//! - `seq` is contiguous from 0 and `time` is a whole number of milliseconds that never goes
//!   backwards;
//! - every event type is known, or marked `"ignorable":true`.
//!
//! Structure rules:
//!
//! - `turn/start` only when no turn is open, numbered next; `turn/end` only for the open turn,
//!   with no step open;
//! - `step/start` inside the open turn with no step open, numbered next within the turn;
//!   `step/end` closes the open step;
//! - chunks, attempts, assistant messages, tool calls, tasks, resolutions and results name the
//!   open turn and step; a `tool/result` answers a pending tool call of the step;
//! - `request/header` and `request/context` only inside an open turn;
//! - a `route/switch` (a failover hop) names the open turn and step and another route than the
//!   one it leaves; the step's next request goes out only after a `request/header` naming that
//!   route.
//!
//! Only the events these rules concern are parsed, and only the fields they need.

use dsh_abi::events;
use std::collections::HashSet;

use dsh_abi::events::tool_call_ids;
use dsh_abi::js;
use dsh_abi::js_value::JsValue;
use serde::Deserialize;
use serde_json::Value;

use super::format::Format;
use super::reader::EventView;
use super::rules_v4::{self, OpenStep, V4Rules};
use super::vocabulary;

/// Which kind of rule an event breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The log is not a readable sequence of known events: refused for writing.
    Integrity,
    /// Turns, steps and tool calls do not balance.
    Structure,
}

/// What is wrong with a header line (integrity rules); empty when it is sound. The format is the
/// one the header names ([`Format::of_header`]).
pub fn header_violations(header: &str) -> Vec<String> {
    let value = JsValue::parse(header);
    let Some(fields) = value.as_ref().filter(|value| matches!(value, JsValue::Object(_))).and_then(JsValue::fields)
    else {
        return vec!["the header is not a JSON object".to_owned()];
    };
    if fields.get("type").as_str() != Some("session") {
        return vec!["the first line is not a session header ({\"type\":\"session\",…})".to_owned()];
    }
    match Format::of_header(header) {
        Err(unknown) => vec![unknown.to_string()],
        Ok(Format::V4) => rules_v4::header_violations(&serde_json::from_str(header).unwrap_or_default()),
        Ok(Format::V0) => v0_header_violations(&fields),
    }
}

fn v0_header_violations(fields: &dsh_abi::js_value::Fields<'_>) -> Vec<String> {
    let mut found = Vec::new();
    let version = fields.get("version");
    if !version.strict_equals(&JsValue::Number(0.0)) {
        found.push(format!("session header version must be 0, got {}", version.display()));
    }
    if fields.get("id").as_str().is_none() {
        found.push("session header id must be a string".to_owned());
    }
    let non_negative = |key: &str| fields.get(key).safe_integer().is_some_and(|n| n >= 0.0);
    if !non_negative("createdAt") {
        found.push("session header createdAt must be a non-negative safe integer".to_owned());
    }
    if !non_negative("delegationDepth") {
        found.push("session header delegationDepth must be a non-negative safe integer".to_owned());
    }
    found
}

/// An event as the rules and the gate see it.
#[derive(Debug, Clone, Copy)]
pub struct GateEvent<'a> {
    pub event_type: &'a str,
    pub seq: Option<f64>,
    pub time: Option<f64>,
    pub data: &'a str,
    pub ignorable: bool,
    /// The whole envelope, for the rules of a format that reads more of it than the above.
    pub line: &'a str,
}

impl<'a> From<&EventView<'a>> for GateEvent<'a> {
    fn from(event: &EventView<'a>) -> Self {
        GateEvent {
            event_type: event.event_type,
            seq: event.seq,
            time: event.time,
            data: event.data,
            ignorable: event.ignorable,
            line: event.line,
        }
    }
}

#[derive(Debug, Clone)]
pub struct StructureRules {
    format: Format,
    /// Format v4's own rules, for a v4 log.
    v4: Option<Box<V4Rules>>,
    next_seq: f64,
    last_time: Option<f64>,
    last_turn: f64,
    open_turn: Option<f64>,
    last_step: f64,
    open_step: Option<f64>,
    pending_calls: HashSet<String>,
    /// The route a `route/switch` of the open step moved to, until a `request/header` names it.
    pending_switch: Option<String>,
}

#[derive(Deserialize)]
struct Hop {
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
}

#[derive(Deserialize)]
struct TurnStep {
    #[serde(default)]
    turn: Option<f64>,
    #[serde(default)]
    step: Option<f64>,
}

#[derive(Deserialize)]
struct ToolEvent {
    #[serde(default, rename = "callId")]
    call_id: Option<String>,
}

#[derive(Deserialize)]
struct AssistantMessage {
    #[serde(default)]
    message: Option<Value>,
}

fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "undefined".to_owned(), js::number)
}

impl StructureRules {
    /// The rules for a log of `format`, before its first event.
    pub fn new(format: Format) -> Self {
        StructureRules {
            format,
            v4: (format == Format::V4).then(Box::default),
            next_seq: 0.0,
            last_time: None,
            last_turn: 0.0,
            open_turn: None,
            last_step: 0.0,
            open_step: None,
            pending_calls: HashSet::new(),
            pending_switch: None,
        }
    }

    /// The rules for the log whose header line is `header` (its format, and for v4 whether it is
    /// a fork).
    pub fn for_header(header: &str) -> Self {
        let format = Format::of_header(header).unwrap_or(Format::V0);
        let mut rules = StructureRules::new(format);
        if format == Format::V4 {
            let header: Value = serde_json::from_str(header).unwrap_or_default();
            let seeded = header.get("isSeeded") == Some(&Value::Bool(true));
            rules.v4 = Some(Box::new(V4Rules::for_header(seeded)));
        }
        rules
    }

    /// What only the whole log shows, once every event is checked (a v4 fork without its
    /// inherited marker); reported as about the header.
    pub fn finish(&self, violations: &mut dyn FnMut(Rule, String)) {
        if let Some(v4) = self.v4.as_deref() {
            v4.finish(&mut |message| violations(Rule::Structure, message));
        }
    }

    /// The format of the log these rules check.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Format v4's own rules' state, for a v4 log.
    pub fn v4(&self) -> Option<&V4Rules> {
        self.v4.as_deref()
    }

    /// The turn currently open, if any.
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn.map(|turn| turn as u64)
    }

    /// The step currently open, if any.
    pub fn open_step(&self) -> Option<u64> {
        self.open_step.map(|step| step as u64)
    }

    /// The number of the last turn started.
    pub fn last_turn(&self) -> u64 {
        self.last_turn as u64
    }

    /// The seq the next event must have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq as u64
    }

    /// The latest event time seen.
    pub fn last_time(&self) -> Option<f64> {
        self.last_time
    }

    /// Tool calls of the open step that have no result yet.
    pub fn pending_calls(&self) -> impl Iterator<Item = &str> {
        self.pending_calls.iter().map(String::as_str)
    }

    /// Checks one event and takes it in; every broken rule is reported to `violations`. An
    /// ignorable event of an unknown type only counts for seq and time.
    pub fn check(&mut self, event: &GateEvent<'_>, violations: &mut dyn FnMut(Rule, String)) {
        let GateEvent { seq, time, event_type, data, ignorable, .. } = *event;
        let position = self.next_seq as u64;
        let mut integrity = |message: String| violations(Rule::Integrity, message);
        match seq {
            Some(seq) if seq == self.next_seq => self.next_seq += 1.0,
            Some(seq) if is_seq(seq) => {
                integrity(misplaced_seq(event_type, Some(seq), self.next_seq));
                self.next_seq = seq + 1.0;
            }
            Some(_) | None => {
                integrity(misplaced_seq(event_type, seq, self.next_seq));
                self.next_seq += 1.0;
            }
        }
        match (time, self.last_time) {
            (Some(time), _) if !js::is_safe_integer(time) => {
                integrity(format!("{event_type} time {} is not a whole number of milliseconds", js::number(time)));
            }
            // 0.2.1-rc.2's reader takes a v4 log whose clock stepped back; rc.8's refuses it.
            (Some(time), Some(last)) if time < last && self.format == Format::V0 => {
                integrity(format!("time {} goes back from {}", js::number(time), js::number(last)));
            }
            (Some(time), _) => self.last_time = Some(time),
            (None, _) => integrity(format!("{event_type} has no numeric time")),
        }
        let known = vocabulary::is_known(self.format, event_type);
        if !known && !ignorable {
            integrity(format!(
                "event type {} is unknown and not marked ignorable (a log written by a newer harness?)",
                js::to_string(event_type)
            ));
        }
        if !known {
            return;
        }
        let violations = &mut |message: String| violations(Rule::Structure, message);
        if let Some(v4) = self.v4.as_mut() {
            let open = OpenStep {
                turn: self.open_turn.map(|turn| turn as u64),
                step: self.open_step.map(|step| step as u64),
                last_step: self.last_step as u64,
            };
            v4.check(event_type, position, event.line, data, open, violations);
        }
        match event_type {
            events::TURN_START => self.turn_start(data, violations),
            events::TURN_END => self.turn_end(data, violations),
            events::STEP_START => self.step_start(data, violations),
            events::STEP_END => self.step_end(data, violations),
            events::ASSISTANT_CHUNK
            | events::ASSISTANT_ATTEMPT
            | events::ASSISTANT_MESSAGE
            | events::TOOL_CALL
            | events::TOOL_RESULT
            | events::LLM_FIRST_TOKEN
            | events::TOOL_TASK
            | events::TOOL_RESOLUTION => self.in_step(event_type, data, violations),
            events::ROUTE_SWITCH => self.route_switch(data, violations),
            events::REQUEST_HEADER | events::REQUEST_CONTEXT if self.open_turn.is_none() => {
                violations(format!("{event_type} outside an open turn"));
            }
            events::REQUEST_HEADER => self.request_header(data, violations),
            _ => {}
        }
    }

    fn route_switch(&mut self, data: &str, violations: &mut dyn FnMut(String)) {
        self.in_step(events::ROUTE_SWITCH, data, violations);
        let Hop { from, to } = serde_json::from_str(data).unwrap_or(Hop { from: None, to: None });
        match (from, to) {
            (Some(from), Some(to)) if from != to && !to.is_empty() => self.pending_switch = Some(to),
            (_, to) => violations(format!(
                "route/switch must name the route it leaves (from) and another it moves to (to), got to {}",
                to.map_or_else(|| "undefined".to_owned(), |to| js::to_string(&to))
            )),
        }
    }

    fn request_header(&mut self, data: &str, violations: &mut dyn FnMut(String)) {
        let Some(to) = self.pending_switch.take() else { return };
        let header: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        let provider = header.pointer("/header/config/provider").and_then(Value::as_str);
        if provider != Some(to.as_str()) {
            violations(format!(
                "request/header after a route/switch to {} names provider {}",
                js::to_string(&to),
                provider.map_or_else(|| "undefined".to_owned(), js::to_string)
            ));
        }
    }

    fn turn_step(data: &str) -> TurnStep {
        serde_json::from_str(data).unwrap_or(TurnStep { turn: None, step: None })
    }

    fn turn_start(&mut self, data: &str, violations: &mut dyn FnMut(String)) {
        let turn = Self::turn_step(data).turn;
        if let Some(open) = self.open_turn {
            violations(format!("turn/start for turn {} while turn {} is open", number(turn), js::number(open)));
        }
        let expected = self.last_turn + 1.0;
        if turn != Some(expected) {
            violations(format!("turn/start numbers turn {}, expected {}", number(turn), js::number(expected)));
        }
        let turn = turn.unwrap_or(expected);
        self.open_turn = Some(turn);
        self.last_turn = turn;
        self.last_step = 0.0;
        self.open_step = None;
        self.pending_calls.clear();
    }

    fn turn_end(&mut self, data: &str, violations: &mut dyn FnMut(String)) {
        let turn = Self::turn_step(data).turn;
        match self.open_turn {
            None => violations(format!("turn/end for turn {} with no open turn", number(turn))),
            Some(open) if turn != Some(open) => {
                violations(format!("turn/end names turn {}, but the open turn is {}", number(turn), js::number(open)))
            }
            Some(_) => {}
        }
        if let Some(step) = self.open_step {
            violations(format!("turn/end while step {} is open", js::number(step)));
        }
        self.open_turn = None;
        self.open_step = None;
        self.pending_calls.clear();
    }

    fn step_start(&mut self, data: &str, violations: &mut dyn FnMut(String)) {
        let TurnStep { turn, step } = Self::turn_step(data);
        match self.open_turn {
            None => violations("step/start outside an open turn".to_owned()),
            Some(open) if turn != Some(open) => {
                violations(format!("step/start names turn {}, but the open turn is {}", number(turn), js::number(open)))
            }
            Some(_) => {}
        }
        if let Some(open) = self.open_step {
            violations(format!("step/start while step {} is open", js::number(open)));
        }
        let expected = self.last_step + 1.0;
        if step != Some(expected) {
            violations(format!("step/start numbers step {}, expected {}", number(step), js::number(expected)));
        }
        let step = step.unwrap_or(expected);
        self.open_step = Some(step);
        self.last_step = step;
        self.pending_calls.clear();
    }

    fn step_end(&mut self, data: &str, violations: &mut dyn FnMut(String)) {
        let TurnStep { turn, step } = Self::turn_step(data);
        match (self.open_turn, self.open_step) {
            (_, None) => violations("step/end with no open step".to_owned()),
            (open_turn, Some(open_step)) if turn != open_turn || step != Some(open_step) => violations(format!(
                "step/end names turn/step {}/{}, but the open step is {}/{}",
                number(turn),
                number(step),
                number(open_turn),
                js::number(open_step)
            )),
            _ => {}
        }
        self.open_step = None;
        self.pending_calls.clear();
        self.pending_switch = None;
    }

    fn in_step(&mut self, event_type: &str, data: &str, violations: &mut dyn FnMut(String)) {
        let TurnStep { turn, step } = Self::turn_step(data);
        match (self.open_turn, self.open_step) {
            (_, None) => violations(format!("{event_type} outside an open step")),
            (open_turn, Some(open_step)) if turn != open_turn || step != Some(open_step) => violations(format!(
                "{event_type} names turn/step {}/{}, but the open step is {}/{}",
                number(turn),
                number(step),
                number(open_turn),
                js::number(open_step)
            )),
            _ => {}
        }
        match event_type {
            events::TOOL_CALL => {
                if let Some(call_id) = serde_json::from_str::<ToolEvent>(data).ok().and_then(|event| event.call_id) {
                    self.pending_calls.insert(call_id);
                }
            }
            events::ASSISTANT_MESSAGE => {
                if let Some(message) =
                    serde_json::from_str::<AssistantMessage>(data).ok().and_then(|event| event.message)
                {
                    self.pending_calls.extend(tool_call_ids(&message).map(str::to_owned));
                }
            }
            events::TOOL_RESULT => {
                let event = serde_json::from_str::<Value>(data).ok();
                let call_id = event.as_ref().and_then(events::answered_call).map(str::to_owned);
                match call_id {
                    Some(call_id) if self.pending_calls.remove(&call_id) => {}
                    // v4's own rules judge a result against the calls the step advertised.
                    _ if self.format == Format::V4 => {}
                    Some(call_id) => violations(format!(
                        "tool/result answers no pending tool call of the step (callId {})",
                        js::to_string(&call_id)
                    )),
                    None => violations("tool/result has no callId".to_owned()),
                }
            }
            _ => {}
        }
        if let Some(to) = self.pending_switch.as_ref().filter(|_| event_type != events::ROUTE_SWITCH) {
            violations(format!(
                "{event_type} after a route/switch to {} with no request/header naming it",
                js::to_string(to)
            ));
            self.pending_switch = None;
        }
    }
}

/// Whether `seq` can be an event's seq (a non-negative safe integer).
fn is_seq(seq: f64) -> bool {
    js::is_safe_integer(seq) && seq >= 0.0
}

/// The integrity rule's words for an event (of `event_type`) whose seq is `seq` where
/// `expected` was due.
pub(crate) fn misplaced_seq(event_type: &str, seq: Option<f64>, expected: f64) -> String {
    match seq.filter(|seq| is_seq(*seq)) {
        Some(seq) => format!("seq {} where {} was expected", js::number(seq), js::number(expected)),
        None => format!("{event_type} has no whole-number seq (expected {})", js::number(expected)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(
        seq: Option<f64>,
        time: Option<f64>,
        event_type: &'a str,
        data: &'a str,
        ignorable: bool,
    ) -> GateEvent<'a> {
        GateEvent { event_type, seq, time, data, ignorable, line: "" }
    }

    fn check(events: &[(&str, &str)]) -> Vec<(usize, String)> {
        let mut rules = StructureRules::new(Format::V0);
        let mut found = Vec::new();
        for (seq, (event_type, data)) in events.iter().enumerate() {
            rules.check(
                &event(Some(seq as f64), Some(1000.0 + seq as f64), event_type, data, false),
                &mut |_, message| found.push((seq, message)),
            );
        }
        found
    }

    #[test]
    fn a_balanced_log_has_no_violations() {
        assert!(check(&[
            ("turn/start", r#"{"turn":1}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            ("request/header", r#"{"header":{"config":{"provider":"p"}}}"#),
            ("assistant/message", r#"{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"tool-call","callId":"c1","name":"x","arguments":"{}"}]}}"#),
            ("tool/result", r#"{"turn":1,"step":1,"message":{"source":{"callId":"c1"}}}"#),
            ("step/end", r#"{"turn":1,"step":1}"#),
            ("step/start", r#"{"turn":1,"step":2}"#),
            ("step/end", r#"{"turn":1,"step":2}"#),
            ("turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#),
            ("turn/start", r#"{"turn":2}"#),
        ])
        .is_empty());
    }

    #[test]
    fn a_failover_hop_is_followed_by_a_header_naming_its_route() {
        let hop =
            r#"{"turn":1,"step":1,"from":"p","to":"b","code":"SERVER","row":"route-failover","reason":"p: SERVER"}"#;
        let opening = [
            ("turn/start", r#"{"turn":1}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            ("assistant/attempt", r#"{"turn":1,"step":1,"failure":{"code":"SERVER"}}"#),
            ("route/switch", hop),
        ];
        let named =
            |provider: &str| format!(r#"{{"header":{{"config":{{"provider":"{provider}"}}}},"reason":"change"}}"#);
        let good = named("b");
        let mut events = opening.to_vec();
        events.extend([("request/header", good.as_str()), ("step/end", r#"{"turn":1,"step":1}"#)]);
        assert_eq!(check(&events), []);
        let wrong = named("p");
        let mut events = opening.to_vec();
        events.push(("request/header", wrong.as_str()));
        assert_eq!(check(&events), [(4, "request/header after a route/switch to \"b\" names provider \"p\"".into())]);
        let mut events = opening.to_vec();
        events.push(("assistant/attempt", r#"{"turn":1,"step":1,"failure":{"code":"SERVER"}}"#));
        assert_eq!(
            check(&events),
            [(4, "assistant/attempt after a route/switch to \"b\" with no request/header naming it".into())]
        );
        let mut events = opening.to_vec();
        events.extend([
            ("step/end", r#"{"turn":1,"step":1}"#),
            ("turn/end", r#"{"turn":1,"reason":{"kind":"interrupted"}}"#),
        ]);
        assert_eq!(check(&events), [], "a crash between the hop and its header is repaired like any other");
    }

    #[test]
    fn turns_and_steps_must_balance_and_count_up() {
        let found = check(&[
            ("step/start", r#"{"turn":1,"step":1}"#),
            ("turn/start", r#"{"turn":2}"#),
            ("step/start", r#"{"turn":2,"step":1}"#),
            ("turn/end", r#"{"turn":2}"#),
            ("step/end", r#"{"turn":2,"step":1}"#),
        ]);
        let messages: Vec<&str> = found.iter().map(|(_, message)| message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "step/start outside an open turn",
                "turn/start numbers turn 2, expected 1",
                "turn/end while step 1 is open",
                "step/end with no open step",
            ]
        );
    }

    #[test]
    fn step_events_must_name_the_open_step_and_results_answer_calls() {
        let found = check(&[
            ("turn/start", r#"{"turn":1}"#),
            ("assistant/chunk", r#"{"turn":1,"step":1,"chunk":{}}"#),
            ("step/start", r#"{"turn":1,"step":1}"#),
            ("assistant/attempt", r#"{"turn":1,"step":2,"failure":{}}"#),
            ("tool/result", r#"{"turn":1,"step":1,"callId":"nope"}"#),
        ]);
        assert_eq!(
            found,
            [
                (1, "assistant/chunk outside an open step".to_owned()),
                (3, "assistant/attempt names turn/step 1/2, but the open step is 1/1".to_owned()),
                (4, "tool/result answers no pending tool call of the step (callId \"nope\")".to_owned()),
            ]
        );
    }

    #[test]
    fn seq_gaps_and_time_going_back_are_reported_once() {
        let mut rules = StructureRules::new(Format::V0);
        let mut found = Vec::new();
        for (seq, time) in [(0.0, 10.0), (2.0, 9.0), (3.0, 11.0)] {
            rules.check(&event(Some(seq), Some(time), "x", "{}", true), &mut |rule, message| {
                found.push((rule, message))
            });
        }
        assert_eq!(
            found,
            [
                (Rule::Integrity, "seq 2 where 1 was expected".to_owned()),
                (Rule::Integrity, "time 9 goes back from 10".to_owned())
            ]
        );
    }

    #[test]
    fn a_v4_log_whose_clock_steps_back_is_sound_as_the_v4_reader_holds() {
        let mut rules = StructureRules::new(Format::V4);
        let mut found = Vec::new();
        for (seq, time) in [(0.0, 10.0), (1.0, 9.0), (2.0, 11.0)] {
            rules.check(&event(Some(seq), Some(time), "x", "{}", true), &mut |rule, message| {
                found.push((rule, message))
            });
        }
        assert_eq!(found, []);
    }

    #[test]
    fn a_v4_header_saying_it_is_seeded_is_held_to_its_inherited_marker_once_the_log_is_read() {
        let header = |seeded: bool| {
            format!(
                r#"{{"type":"session","version":4,"id":"s","createdAt":1,"isSeeded":{seeded},"delegationDepth":0}}"#
            )
        };
        let finished = |rules: &StructureRules| {
            let mut found = Vec::new();
            rules.finish(&mut |rule, message| found.push((rule, message)));
            found
        };
        let lacking = (Rule::Structure, "released v2 seeded Session lacks an inherited end-seed marker".to_owned());
        assert_eq!(finished(&StructureRules::for_header(&header(true))), [lacking]);
        assert_eq!(finished(&StructureRules::for_header(&header(false))), []);
        let v0 = r#"{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0,"isSeeded":true}"#;
        assert_eq!(finished(&StructureRules::for_header(v0)), [], "v0 has no such rule");
        let mut marked = StructureRules::for_header(&header(true));
        let marker = r#"{"type":"session/end-seed","seq":0,"time":1,"data":{"inherited":true}}"#;
        let event = GateEvent {
            line: marker,
            ..event(Some(0.0), Some(1.0), "session/end-seed", r#"{"inherited":true}"#, false)
        };
        marked.check(&event, &mut |_, message| panic!("{message}"));
        assert_eq!(finished(&marked), []);
    }

    #[test]
    fn an_unknown_required_event_and_a_fractional_time_break_integrity() {
        let mut rules = StructureRules::new(Format::V0);
        let mut found = Vec::new();
        let mut report = |rule: Rule, message: String| found.push((rule, message));
        rules.check(&event(Some(0.0), Some(1.0), "future/thing", "{}", false), &mut report);
        rules.check(&event(Some(1.0), Some(2.0), "future/other", "{}", true), &mut report);
        rules.check(&event(Some(2.0), Some(2.5), "compaction/start", "{}", false), &mut report);
        assert_eq!(
            found,
            [
                (
                    Rule::Integrity,
                    "event type \"future/thing\" is unknown and not marked ignorable (a log written by a newer harness?)"
                        .to_owned()
                ),
                (Rule::Integrity, "compaction/start time 2.5 is not a whole number of milliseconds".to_owned()),
            ]
        );
    }

    #[test]
    fn a_header_is_held_to_the_rules_of_the_format_it_names() {
        assert!(header_violations(r#"{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}"#)
            .is_empty());
        assert_eq!(
            header_violations(r#"{"type":"session","version":"0","id":"s","createdAt":1}"#),
            [
                "session header version must be 0, got 0",
                "session header delegationDepth must be a non-negative safe integer"
            ]
        );
        let between = header_violations(r#"{"type":"session","version":2,"id":"s","createdAt":1}"#);
        assert!(between[0].contains("session format v2, which is read through its migration to v4"), "{between:?}");
        assert_eq!(
            header_violations(r#"{"type":"session","version":4,"id":"s","createdAt":1,"delegationDepth":0}"#),
            ["format v4 header lacks required member \"isSeeded\"", "format v4 header isSeeded must be a boolean"]
        );
        assert_eq!(
            header_violations(
                r#"{"type":"session","version":4,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0,"sandboxMode":"x"}"#
            ),
            [
                "session header uses retired policy baseline fields",
                "format v4 header has unexpected member \"sandboxMode\""
            ]
        );
    }

    #[test]
    fn headers_belong_inside_a_turn() {
        assert_eq!(check(&[("request/header", "{}")]), [(0, "request/header outside an open turn".to_owned())]);
    }
}
