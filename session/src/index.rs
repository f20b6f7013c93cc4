//! The history index plugins query during a call: the last `llm/retry` of every chain (turn,
//! step, provider, policyKey), answered in constant time, plus the session header and the events
//! of the current (or last) turn — all but streamed chunks and failed attempts, whose text has no
//! bound (an always-mode chain against an endless stream would otherwise grow without end). It
//! is fed every event as it is read or appended.

use dsh_abi::events;
use std::hash::BuildHasher;

use dsh_abi::{js, ChainKey, ChainRecord};
use hashbrown::{DefaultHashBuilder, HashTable};
use serde::Deserialize;

#[derive(Debug)]
struct Chain {
    turn: u64,
    step: u64,
    provider: Box<str>,
    policy_key: Box<str>,
    last: ChainRecord,
}

impl Chain {
    fn is(&self, turn: u64, step: u64, provider: &str, policy_key: &str) -> bool {
        self.turn == turn && self.step == step && &*self.provider == provider && &*self.policy_key == policy_key
    }
}

#[derive(Default)]
pub struct HistoryIndex {
    header: String,
    hasher: DefaultHashBuilder,
    chains: HashTable<Chain>,
    turn_events: Vec<String>,
}

impl std::fmt::Debug for HistoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryIndex").field("chains", &self.chains.len()).finish_non_exhaustive()
    }
}

/// The fields of an `llm/retry` record the index needs.
#[derive(Deserialize)]
struct RetryFields<'a> {
    #[serde(rename = "retryId", borrow)]
    retry_id: std::borrow::Cow<'a, str>,
    turn: serde_json::Value,
    step: serde_json::Value,
    #[serde(borrow)]
    provider: std::borrow::Cow<'a, str>,
    #[serde(rename = "policyKey", borrow)]
    policy_key: std::borrow::Cow<'a, str>,
    retry: serde_json::Value,
}

fn chain_hash(hasher: &DefaultHashBuilder, turn: u64, step: u64, provider: &str, policy_key: &str) -> u64 {
    hasher.hash_one((turn, step, provider, policy_key))
}

impl HistoryIndex {
    pub fn new(header: String) -> Self {
        HistoryIndex { header, ..Default::default() }
    }

    pub fn header(&self) -> &str {
        &self.header
    }

    /// The events from the last `turn/start` on, as JSON lines, without streamed chunks and
    /// failed attempts.
    pub fn last_turn_events(&self) -> &[String] {
        &self.turn_events
    }

    pub fn chain_count(&self) -> usize {
        self.chains.len()
    }

    pub fn last_retry(&self, key: ChainKey<'_>) -> Option<&ChainRecord> {
        let (provider, policy_key) = (key.provider.as_str(), key.policy_key.as_str());
        let hash = chain_hash(&self.hasher, key.turn, key.step, provider, policy_key);
        self.chains.find(hash, |chain| chain.is(key.turn, key.step, provider, policy_key)).map(|chain| &chain.last)
    }

    /// Takes in one event: its type, its whole JSON line and its raw `data`.
    pub fn observe(&mut self, event_type: &str, line: &str, data: &str) {
        if event_type == events::TURN_START {
            self.turn_events.clear();
        }
        if !matches!(event_type, events::ASSISTANT_CHUNK | events::ASSISTANT_ATTEMPT) {
            self.turn_events.push(line.to_owned());
        }
        if event_type == events::LLM_RETRY {
            self.index_retry(data);
        }
    }

    fn index_retry(&mut self, data: &str) {
        let Ok(fields) = serde_json::from_str::<RetryFields<'_>>(data) else {
            return;
        };
        let (Some(turn), Some(step), Some(retry)) =
            (js::as_safe_u64(&fields.turn), js::as_safe_u64(&fields.step), js::as_safe_u64(&fields.retry))
        else {
            return;
        };
        let last = ChainRecord { retry_id: fields.retry_id.as_ref().into(), retry };
        let hash = chain_hash(&self.hasher, turn, step, &fields.provider, &fields.policy_key);
        let found = self.chains.find_mut(hash, |chain| chain.is(turn, step, &fields.provider, &fields.policy_key));
        match found {
            Some(chain) => chain.last = last,
            None => {
                let chain = Chain {
                    turn,
                    step,
                    provider: fields.provider.as_ref().into(),
                    policy_key: fields.policy_key.as_ref().into(),
                    last,
                };
                let hasher = &self.hasher;
                self.chains.insert_unique(hash, chain, |chain| {
                    chain_hash(hasher, chain.turn, chain.step, &chain.provider, &chain.policy_key)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key<'a>(turn: u64, step: u64, provider: &'a str, policy_key: &'a str) -> ChainKey<'a> {
        ChainKey { turn, step, provider: provider.into(), policy_key: policy_key.into() }
    }

    fn retry_data(id: &str, turn: u64, step: u64, provider: &str, key: &str, retry: &str) -> String {
        format!(
            r#"{{"retryId":"{id}","turn":{turn},"step":{step},"provider":"{provider}","mode":"normal","policyKey":"{key}","retry":{retry},"maxRetries":5,"delayMs":1,"failure":{{"message":"m","code":"SERVER"}}}}"#
        )
    }

    #[test]
    fn the_last_record_of_a_chain_wins() {
        let mut index = HistoryIndex::default();
        index.observe("llm/retry", "", &retry_data("a", 1, 1, "p", "k", "1"));
        index.observe("llm/retry", "", &retry_data("a", 1, 1, "p", "k", "2.0"));
        assert_eq!(index.last_retry(key(1, 1, "p", "k")), Some(&ChainRecord { retry_id: "a".into(), retry: 2 }));
        assert_eq!(index.chain_count(), 1);
    }

    #[test]
    fn chains_differ_by_turn_step_provider_and_policy_key() {
        let mut index = HistoryIndex::default();
        index.observe("llm/retry", "", &retry_data("a", 1, 1, "p", "k", "1"));
        for other in [key(2, 1, "p", "k"), key(1, 2, "p", "k"), key(1, 1, "q", "k"), key(1, 1, "p", "j")] {
            assert_eq!(index.last_retry(other), None);
        }
    }

    #[test]
    fn turn_events_restart_at_each_turn_start() {
        let mut index = HistoryIndex::default();
        index.observe("turn/start", "one", "{}");
        index.observe("turn/end", "two", "{}");
        index.observe("turn/start", "three", "{}");
        assert_eq!(index.last_turn_events(), ["three".to_owned()]);
    }

    #[test]
    fn records_without_the_chain_fields_are_not_indexed() {
        let mut index = HistoryIndex::default();
        index.observe("llm/retry", "", r#"{"retryId":"a","turn":1}"#);
        index.observe("llm/retry", "", &retry_data("a", 1, 1, "p", "k", "1.5"));
        assert_eq!(index.chain_count(), 0);
    }
}
