//! The `llm/retry` record an executor schedules, with the keys in the order the TypeScript
//! reference writes them: `retryId, turn, step, provider, mode, policyKey, retry, maxRetries?,
//! delayMs, failure, headRetries?`. Normal-mode records carry `maxRetries`; always-mode records
//! must not; `headRetries` is the relay executor's bounded head.

use serde::Serialize;

use crate::js;
use crate::types::{Failure, RequestErrorPayload, RetryDecision};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryRecord<'a> {
    pub retry_id: &'a str,
    pub turn: u64,
    pub step: u64,
    pub provider: &'a str,
    /// `normal` or `always`.
    pub mode: &'static str,
    pub policy_key: &'a str,
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
        policy_key: &'a str,
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
