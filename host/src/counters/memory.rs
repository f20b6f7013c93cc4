//! Counters of one process.

use std::collections::HashMap;
use std::sync::Mutex;

use dsh_abi::breaker::{self, BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState};

use super::{clamped, CounterStore};

/// Counters and circuit breakers of one process.
#[derive(Default)]
pub struct MemoryStore {
    counters: Mutex<HashMap<String, f64>>,
    breakers: Mutex<HashMap<String, BreakerState>>,
}

impl MemoryStore {
    /// Forgets every counter (a scratch store, between two questions).
    pub fn clear(&self) {
        if let Ok(mut counters) = self.counters.lock() {
            counters.clear();
        }
        if let Ok(mut breakers) = self.breakers.lock() {
            breakers.clear();
        }
    }
}

impl CounterStore for MemoryStore {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        let mut counters = self.counters.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        let value = counters.entry(key.to_owned()).or_insert(initial);
        *value = clamped(*value, delta, floor, ceiling);
        Ok(*value)
    }

    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        let mut breakers = self.breakers.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        let state = breakers.entry(key.to_owned()).or_default();
        let answer = breaker::apply(state, event, policy, now_ms);
        if *state == BreakerState::default() {
            breakers.remove(key);
        }
        Ok(answer)
    }

    fn breakers(&self) -> Result<Vec<(String, BreakerState)>, String> {
        let breakers = self.breakers.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        let mut listed: Vec<(String, BreakerState)> =
            breakers.iter().map(|(key, state)| (key.clone(), state.clone())).collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(listed)
    }

    fn remove_breakers(&self, keys: &[String]) -> Result<usize, String> {
        let mut breakers = self.breakers.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        Ok(keys.iter().filter(|key| breakers.remove(key.as_str()).is_some()).count())
    }

    fn list(&self) -> Result<Vec<(String, f64)>, String> {
        let counters = self.counters.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        let mut listed: Vec<(String, f64)> = counters.iter().map(|(key, value)| (key.clone(), *value)).collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(listed)
    }

    fn remove(&self, keys: &[String]) -> Result<usize, String> {
        let mut counters = self.counters.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        Ok(keys.iter().filter(|key| counters.remove(key.as_str()).is_some()).count())
    }

    fn may_wait(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_adds_clamps_and_starts_from_the_initial_value() {
        let store = MemoryStore::default();
        assert_eq!(store.add("k", -1.0, 10.0, 0.0, 10.0), Ok(9.0));
        assert_eq!(store.add("k", 5.0, 10.0, 0.0, 10.0), Ok(10.0));
        assert_eq!(store.add("k", -50.0, 10.0, 0.0, 10.0), Ok(0.0));
    }

    #[test]
    fn a_removed_counter_starts_again_from_its_initial_value() {
        let store = MemoryStore::default();
        store.add("b", -1.0, 10.0, 0.0, 10.0).unwrap();
        store.add("a", -3.0, 10.0, 0.0, 10.0).unwrap();
        assert_eq!(store.list(), Ok(vec![("a".into(), 7.0), ("b".into(), 9.0)]));
        assert_eq!(store.remove(&["a".into(), "never".into()]), Ok(1));
        assert_eq!(store.add("a", -1.0, 10.0, 0.0, 10.0), Ok(9.0));
    }
}
