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

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryRecord<'a> {
    pub retry_id: &'a str,
    pub turn: u64,
    pub step: u64,
    pub provider: &'a str,
    /// `normal` or `always`.
    pub mode: &'static str,
    pub policy_key: &'a PolicyKey,
    pub retry: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u64>,
    pub delay_ms: f64,
    pub failure: &'a Failure,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_retries: Option<usize>,
}

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
        RetryDecision { delay_ms: self.delay_ms, record: js::to_string(self).into() }
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
    }
}
