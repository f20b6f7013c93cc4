//! The `llm/retry` record an executor schedules, with the keys in the order the TypeScript
//! reference writes them: `retryId, turn, step, provider, mode, policyKey, retry, maxRetries?,
//! delayMs, failure, headRetries?`. Normal-mode records carry `maxRetries`; always-mode records
//! must not; `headRetries` is the relay executor's bounded head.

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::js;
use crate::types::{Failure, RequestErrorPayload, RetryDecision};

/// A policy key as an executor keeps it: the text chains are looked up by, and that text as a JSON
/// string, escaped once (a key is mostly quotes, and every record carries it).
#[derive(Debug, Clone)]
pub struct PolicyKey {
    text: String,
    json: Box<RawValue>,
}

impl PolicyKey {
    pub fn new(text: impl Into<String>) -> PolicyKey {
        let text = text.into();
        let json = RawValue::from_string(js::to_string(&text)).expect("a serialised string is valid JSON");
        PolicyKey { text, json }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for PolicyKey {
    fn eq(&self, other: &PolicyKey) -> bool {
        self.text == other.text
    }
}

impl Serialize for PolicyKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

#[derive(Debug, Clone)]
pub struct RetryRecord<'a> {
    pub retry_id: &'a str,
    pub turn: u64,
    pub step: u64,
    pub provider: &'a str,
    /// `normal` or `always`.
    pub mode: &'static str,
    pub policy_key: &'a PolicyKey,
    pub retry: u64,
    pub max_retries: Option<u64>,
    pub delay_ms: f64,
    pub failure: &'a Failure,
    pub head_retries: Option<usize>,
}

/// Room for a record's keys, numbers and short strings, besides its policy key and message.
const RECORD_TEXT: usize = 256;

impl<'a> RetryRecord<'a> {
    /// A record for the failure of `payload`, without the optional keys.
    pub fn new(
        payload: &'a RequestErrorPayload,
        retry_id: &'a str,
        mode: &'static str,
        policy_key: &'a PolicyKey,
        retry: u64,
        delay_ms: f64,
    ) -> Self {
        RetryRecord {
            retry_id,
            turn: payload.turn,
            step: payload.step,
            provider: payload.provider.as_str(),
            mode,
            policy_key,
            retry,
            max_retries: None,
            delay_ms,
            failure: &payload.failure,
            head_retries: None,
        }
    }

    /// The decision that schedules this record: wait `delayMs`, append the record as written.
    pub fn decision(&self) -> RetryDecision {
        RetryDecision { delay_ms: self.delay_ms, record: self.to_json().into() }
    }

    /// The record as one line of JSON, keys in the reference's order.
    pub fn to_json(&self) -> String {
        let capacity = RECORD_TEXT + self.policy_key.json.get().len() + self.failure.message.len();
        js::write_object(capacity, |record| {
            record.text("retryId", self.retry_id).unsigned("turn", self.turn).unsigned("step", self.step);
            record.text("provider", self.provider).text("mode", self.mode);
            record.raw("policyKey", &self.policy_key.json).unsigned("retry", self.retry);
            if let Some(max_retries) = self.max_retries {
                record.unsigned("maxRetries", max_retries);
            }
            record.number("delayMs", self.delay_ms).object("failure", |failure| {
                for (key, value) in self.failure.fields() {
                    failure.field(key, value);
                }
            });
            if let Some(head_retries) = self.head_retries {
                record.unsigned("headRetries", head_retries as u64);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_key_escaped_once_serialises_as_its_text_would(text in "\\PC{0,40}") {
            let key = PolicyKey::new(text.clone());
            prop_assert_eq!(key.as_str(), text.as_str());
            prop_assert_eq!(js::to_string(&key), js::to_string(&text));
        }

        #[test]
        fn a_record_is_written_as_serde_json_writes_its_fields_in_order(
            text in "[\u{0}-\u{7f}é😀]{0,30}",
            numbers in (any::<u64>(), any::<u64>(), any::<u64>(), any::<f64>(), any::<u32>(), any::<f64>()),
            optional in any::<(bool, bool, bool, bool, bool)>(),
        ) {
            let (turn, step, retry, delay_ms, status, hint) = numbers;
            let mut failure = Failure::new(text.clone(), text.clone());
            failure.status = optional.0.then_some(status).into();
            failure.provider_retry_after_ms = optional.1.then_some(hint).into();
            failure.request_id = optional.2.then(|| text.as_str().into()).into();
            let key = PolicyKey::new(text.clone());
            let payload = RequestErrorPayload::new(turn, step, &text, failure.clone(), None);
            let mut record = RetryRecord::new(&payload, &text, "normal", &key, retry, delay_ms);
            record.max_retries = optional.3.then_some(retry);
            record.head_retries = optional.4.then_some(3);
            let mut expected = serde_json::json!({
                "retryId": text, "turn": turn, "step": step, "provider": text, "mode": "normal",
                "policyKey": text, "retry": retry,
            });
            let fields = expected.as_object_mut().unwrap();
            if optional.3 {
                fields.insert("maxRetries".into(), retry.into());
            }
            fields.insert("delayMs".into(), serde_json::to_value(delay_ms).unwrap());
            fields.insert("failure".into(), serde_json::to_value(&failure).unwrap());
            if optional.4 {
                fields.insert("headRetries".into(), 3.into());
            }
            prop_assert_eq!(record.to_json(), js::to_string(&expected));
        }
    }
}
