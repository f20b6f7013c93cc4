//! v0→v1's normalisations of what 0.1's early builds wrote, as DeepSeek Harness 0.2 applies them
//! to a v0 log before anything else: a `turn/start` loses its `trigger`, the old `turn/end`
//! reasons take today's shape (`aborted` without a reason is `{kind: "legacy"}`'s, `disposed` is
//! an abort, an `error` carries its `error`), a `request/header` loses its `messagePrefix` (one
//! whose reason is `fallback` is refused), an `llm/retry` chain or a compaction without its id
//! gets the one 0.2 makes (`legacy-retry:<session>:<seq>`, `legacy-compaction:<session>:<seq>`),
//! and a message of the first shapes (a user message without `id` and `role`, an assistant's
//! `content` beside its `provenance`, a tool result's `callId`, `content` and `isError`) becomes
//! today's message under the id `legacy-message:<session>:<seq>`.

use std::collections::HashMap;

use dsh_abi::events;
use serde_json::{json, Value};

/// The normalisation of one v0 log, fed its events in order.
pub struct Legacy {
    session_id: String,
    /// The id of each retry chain (`[turn, step, provider, policyKey]`) seen so far.
    retry_ids: HashMap<String, String>,
    /// The id of the compaction under way.
    compaction: Option<String>,
    /// The message id of each event that carries one, by seq.
    message_ids: HashMap<u64, String>,
}

impl Legacy {
    pub fn new(session_id: &str) -> Legacy {
        Legacy {
            session_id: session_id.to_owned(),
            retry_ids: HashMap::new(),
            compaction: None,
            message_ids: HashMap::new(),
        }
    }

    /// Normalises the `data` of the event of `event_type` at v0 seq `seq` (replacing the surface
    /// from seq `replaces`, if it does), or says why it cannot be migrated.
    pub fn normalise(
        &mut self,
        event_type: &str,
        seq: u64,
        replaces: Option<u64>,
        data: &mut Value,
    ) -> Result<(), String> {
        match event_type {
            events::TURN_START => self.turn_start(seq, data)?,
            events::TURN_END => self.turn_end(seq, data)?,
            events::REQUEST_HEADER => self.request_header(seq, data)?,
            events::LLM_RETRY => self.retry(seq, data),
            _ => {}
        }
        self.compaction(event_type, seq, data);
        self.message(event_type, seq, replaces, data)?;
        let message = if event_type == events::USER_MESSAGE { &*data } else { &data["message"] };
        if let Some(id) = message["id"].as_str() {
            self.message_ids.insert(seq, id.to_owned());
        }
        Ok(())
    }

    fn message_id(&self, seq: u64) -> String {
        format!("legacy-message:{}:{seq}", self.session_id)
    }

    /// A message of the first shapes as today's.
    fn message(&self, event_type: &str, seq: u64, replaces: Option<u64>, data: &mut Value) -> Result<(), String> {
        let Some(fields) = data.as_object_mut().filter(|fields| !fields.contains_key("message")) else { return Ok(()) };
        let has = |key: &str| fields.contains_key(key);
        match event_type {
            events::USER_MESSAGE if !has("id") && !has("role") && has("content") && has("source") => {
                fields.insert("id".into(), self.message_id(seq).into());
                fields.insert("role".into(), "user".into());
            }
            events::ASSISTANT_MESSAGE if has("content") && has("provenance") => {
                let Some(Value::Object(mut source)) = fields.shift_remove("provenance") else {
                    return Err(self.malformed(events::ASSISTANT_MESSAGE, seq));
                };
                let content = fields.shift_remove("content").unwrap_or_default();
                source.insert("kind".into(), "model".into());
                let message =
                    json!({"id": self.message_id(seq), "role": "assistant", "content": content, "source": source});
                fields.insert("message".into(), message);
            }
            events::TOOL_RESULT if has("content") => {
                let holds = |key: &str, is: fn(&Value) -> bool| fields.get(key).is_some_and(is);
                if !holds("callId", Value::is_string) || !holds("isError", Value::is_boolean) {
                    return Err(self.malformed(events::TOOL_RESULT, seq));
                }
                let id = match replaces {
                    None => self.message_id(seq),
                    Some(start) => self
                        .message_ids
                        .get(&start)
                        .cloned()
                        .ok_or_else(|| format!("tool/result {seq} replacement cites a message without identity"))?,
                };
                let call = fields.shift_remove("callId").unwrap_or_default();
                let content = fields.shift_remove("content").unwrap_or_default();
                let is_error = fields.shift_remove("isError").unwrap_or_default();
                let block = json!({"type": "tool-result", "toolCallId": call, "content": content, "isError": is_error});
                let message =
                    json!({"id": id, "role": "user", "content": [block], "source": {"kind": "tool", "callId": call}});
                fields.insert("message".into(), message);
            }
            _ => {}
        }
        Ok(())
    }

    fn malformed(&self, event_type: &str, seq: u64) -> String {
        format!("session {} contains malformed pre-react-loop {event_type} at seq {seq}", self.quoted_id())
    }

    fn quoted_id(&self) -> String {
        dsh_abi::js::to_string(&self.session_id)
    }

    fn turn_start(&self, seq: u64, data: &mut Value) -> Result<(), String> {
        let Some(trigger) = data.get("trigger") else { return Ok(()) };
        let turn = data["turn"].as_u64().filter(|turn| *turn >= 1);
        let kind = trigger["kind"].as_str().filter(|kind| !kind.is_empty());
        if turn.is_none() || kind.is_none() || data.as_object().map(|fields| fields.len()) != Some(2) {
            return Err(self.malformed(events::TURN_START, seq));
        }
        *data = json!({"turn": turn});
        Ok(())
    }

    fn turn_end(&self, seq: u64, data: &mut Value) -> Result<(), String> {
        let reason = &data["reason"];
        let current = match reason["kind"].as_str() {
            None => return Err(self.malformed(events::TURN_END, seq)),
            Some("aborted") if reason.get("reason").is_none() => {
                json!({"kind": "aborted", "reason": {"kind": "legacy"}})
            }
            Some("disposed") => json!({"kind": "aborted", "reason": {"kind": "disposed"}}),
            Some("error") if reason.get("error").is_none() => self.legacy_error(seq, reason)?,
            Some(_) => return Ok(()),
        };
        data["reason"] = current;
        Ok(())
    }

    /// An `error` reason of 0.1's first builds (`{kind, step, failure}` or `{kind, step,
    /// message, [code]}`) as `{kind: "error", error}`.
    fn legacy_error(&self, seq: u64, reason: &Value) -> Result<Value, String> {
        if let Some(failure) = reason.get("failure") {
            if !failure["message"].is_string() || !failure["code"].is_string() {
                return Err(self.malformed(events::TURN_END, seq));
            }
            return Ok(json!({"kind": "error", "error": failure}));
        }
        let code = reason.get("code").map(|code| code.as_str().ok_or(()));
        let (Some(message), Ok(code)) = (reason["message"].as_str(), code.transpose()) else {
            return Err(self.malformed(events::TURN_END, seq));
        };
        Ok(json!({"kind": "error", "error": {"message": message, "code": code.unwrap_or("UNKNOWN")}}))
    }

    fn request_header(&self, seq: u64, data: &mut Value) -> Result<(), String> {
        if data["reason"] == "fallback" {
            return Err(format!(
                "session {} contains unsupported request/header reason \"fallback\" at seq {seq}",
                self.quoted_id()
            ));
        }
        let Some(header) = data.get_mut("header").and_then(Value::as_object_mut) else { return Ok(()) };
        match header.get("messagePrefix") {
            None => Ok(()),
            Some(prefix) if prefix.is_array() => {
                header.shift_remove("messagePrefix");
                Ok(())
            }
            Some(_) => Err(format!(
                "session {} contains malformed request/header messagePrefix at seq {seq}",
                self.quoted_id()
            )),
        }
    }

    /// A retry without a `retryId` takes its chain's, or a new one.
    fn retry(&mut self, seq: u64, data: &mut Value) {
        let chain: Vec<String> = ["turn", "step", "provider", "policyKey"]
            .iter()
            .map(|key| data.get(*key).map(dsh_abi::js::to_string).unwrap_or_default())
            .collect();
        let chain = chain.join("\0");
        if let Some(id) = data["retryId"].as_str().filter(|id| !id.is_empty()) {
            self.retry_ids.insert(chain, id.to_owned());
            return;
        }
        let Some(fields) = data.as_object_mut().filter(|fields| !fields.contains_key("retryId")) else { return };
        let id =
            self.retry_ids.get(&chain).cloned().unwrap_or_else(|| format!("legacy-retry:{}:{seq}", self.session_id));
        fields.insert("retryId".into(), id.clone().into());
        self.retry_ids.insert(chain, id);
    }

    /// A compaction without an id takes one at its start, and its summary, its summary message
    /// and its end take it too.
    fn compaction(&mut self, event_type: &str, seq: u64, data: &mut Value) {
        match event_type {
            events::SESSION_END_SEED => self.compaction = None,
            "compaction/start" => match data.get("compactionId") {
                // A member that is no id is left to the checks after.
                Some(id) => {
                    if let Some(id) = id.as_str().filter(|id| !id.is_empty()) {
                        self.compaction = Some(id.to_owned());
                    }
                }
                None => {
                    let id = format!("legacy-compaction:{}:{seq}", self.session_id);
                    add_member(data, "compactionId", &id);
                    self.compaction = Some(id);
                }
            },
            "compaction/summary" | "compaction/end" => {
                if let Some(id) = &self.compaction {
                    add_member(data, "compactionId", id);
                }
                if event_type == "compaction/end" {
                    self.compaction = None;
                }
            }
            events::USER_MESSAGE => {
                let source =
                    data.get_mut("source").filter(|source| source["kind"] == "plugin" && source["plugin"] == "compact");
                if let (Some(source), Some(id)) = (source, &self.compaction) {
                    add_member(source, "compactionId", id);
                }
            }
            _ => {}
        }
    }
}

/// Adds `key: value` at the end of the object `to` when it has no such member.
fn add_member(to: &mut Value, key: &str, value: &str) {
    if let Some(fields) = to.as_object_mut().filter(|fields| !fields.contains_key(key)) {
        fields.insert(key.into(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalised(event_type: &str, seq: u64, data: Value) -> Result<Value, String> {
        let mut data = data;
        Legacy::new("s").normalise(event_type, seq, None, &mut data)?;
        Ok(data)
    }

    #[test]
    fn a_retry_chain_without_ids_takes_the_id_its_first_retry_is_given() {
        let mut legacy = Legacy::new("s");
        let mut first = json!({"turn": 1, "step": 1, "provider": "p", "policyKey": "k", "retry": 1});
        let mut second = json!({"turn": 1, "step": 1, "provider": "p", "policyKey": "k", "retry": 2});
        let mut other = json!({"turn": 2, "step": 1, "provider": "p", "policyKey": "k", "retry": 1});
        legacy.normalise("llm/retry", 4, None, &mut first).unwrap();
        legacy.normalise("llm/retry", 6, None, &mut second).unwrap();
        legacy.normalise("llm/retry", 9, None, &mut other).unwrap();
        assert_eq!((&first["retryId"], &second["retryId"]), (&json!("legacy-retry:s:4"), &json!("legacy-retry:s:4")));
        assert_eq!(other["retryId"], "legacy-retry:s:9");
        let mut kept = json!({"turn": 2, "step": 1, "provider": "p", "policyKey": "k", "retryId": "r"});
        legacy.normalise("llm/retry", 11, None, &mut kept).unwrap();
        legacy.normalise("llm/retry", 12, None, &mut other).unwrap();
        assert_eq!(
            (&kept["retryId"], &other["retryId"]),
            (&json!("r"), &json!("legacy-retry:s:9")),
            "one with an id keeps it"
        );
    }

    #[test]
    fn old_turn_end_reasons_take_today_s_shape() {
        let end = |reason: Value| {
            normalised("turn/end", 3, json!({"turn": 1, "reason": reason})).map(|data| data["reason"].clone())
        };
        assert_eq!(end(json!({"kind": "aborted"})), Ok(json!({"kind": "aborted", "reason": {"kind": "legacy"}})));
        assert_eq!(end(json!({"kind": "disposed"})), Ok(json!({"kind": "aborted", "reason": {"kind": "disposed"}})));
        let failure = json!({"message": "m", "code": "SERVER", "status": 500});
        assert_eq!(
            end(json!({"kind": "error", "step": 1, "failure": failure})),
            Ok(json!({"kind": "error", "error": failure}))
        );
        assert_eq!(
            end(json!({"kind": "error", "step": 1, "message": "m"})),
            Ok(json!({"kind": "error", "error": {"message": "m", "code": "UNKNOWN"}}))
        );
        assert_eq!(end(json!({"kind": "completed"})), Ok(json!({"kind": "completed"})));
        assert_eq!(
            end(json!({"kind": "error", "step": 1})),
            Err("session \"s\" contains malformed pre-react-loop turn/end at seq 3".to_owned())
        );
    }

    #[test]
    fn a_turn_start_s_trigger_and_a_header_s_message_prefix_go_and_a_fallback_header_is_refused() {
        let start = normalised("turn/start", 0, json!({"turn": 1, "trigger": {"kind": "user"}}));
        assert_eq!(start, Ok(json!({"turn": 1})));
        let refused = normalised("turn/start", 0, json!({"turn": 0, "trigger": {"kind": "user"}})).unwrap_err();
        assert_eq!(refused, "session \"s\" contains malformed pre-react-loop turn/start at seq 0");
        let header =
            normalised("request/header", 2, json!({"header": {"config": {}, "messagePrefix": [], "tools": []}}));
        assert_eq!(header, Ok(json!({"header": {"config": {}, "tools": []}})));
        let refused = normalised("request/header", 2, json!({"header": {}, "reason": "fallback"})).unwrap_err();
        assert_eq!(refused, "session \"s\" contains unsupported request/header reason \"fallback\" at seq 2");
    }

    #[test]
    fn messages_of_the_first_shapes_become_today_s_under_legacy_ids() {
        let mut legacy = Legacy::new("s");
        let mut user = json!({"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}});
        legacy.normalise("user/message", 2, None, &mut user).unwrap();
        assert_eq!(
            user,
            json!({"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}, "id": "legacy-message:s:2", "role": "user"})
        );
        let mut answer = json!({"turn": 1, "step": 1, "content": [], "provenance": {"provider": "p"}, "usage": {}});
        legacy.normalise("assistant/message", 3, None, &mut answer).unwrap();
        let message = json!({"id": "legacy-message:s:3", "role": "assistant", "content": [], "source": {"provider": "p", "kind": "model"}});
        assert_eq!(answer, json!({"turn": 1, "step": 1, "usage": {}, "message": message}));
        let mut result = json!({"turn": 1, "step": 1, "callId": "c", "content": [], "isError": false});
        legacy.normalise("tool/result", 5, None, &mut result).unwrap();
        assert_eq!(result["message"]["id"], "legacy-message:s:5");
        assert_eq!(
            result["message"]["content"],
            json!([{"type": "tool-result", "toolCallId": "c", "content": [], "isError": false}])
        );
        let mut replacing = json!({"turn": 1, "step": 1, "callId": "c", "content": [], "isError": true});
        legacy.normalise("tool/result", 7, Some(5), &mut replacing).unwrap();
        assert_eq!(replacing["message"]["id"], "legacy-message:s:5", "a replacement keeps the replaced message's id");
        let refused =
            legacy.normalise("tool/result", 8, Some(4), &mut json!({"callId": "c", "content": [], "isError": true}));
        assert_eq!(refused, Err("tool/result 8 replacement cites a message without identity".to_owned()));
    }

    #[test]
    fn a_first_shape_message_without_an_object_provenance_or_a_string_call_id_is_refused_as_malformed() {
        for provenance in [json!("p"), json!(["p"]), json!(null)] {
            let refused = normalised("assistant/message", 3, json!({"content": [], "provenance": provenance}));
            assert_eq!(
                refused,
                Err("session \"s\" contains malformed pre-react-loop assistant/message at seq 3".to_owned())
            );
        }
        let malformed = Err("session \"s\" contains malformed pre-react-loop tool/result at seq 5".to_owned());
        for result in [
            json!({"content": [], "isError": false}),
            json!({"callId": 7, "content": [], "isError": false}),
            json!({"callId": "c", "content": []}),
            json!({"callId": "c", "content": [], "isError": "no"}),
        ] {
            assert_eq!(normalised("tool/result", 5, result.clone()), malformed, "{result}");
        }
    }
}
