//! Counters of one process.

use std::collections::HashMap;
use std::sync::Mutex;

use dsh_abi::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState};
use dsh_abi::store;

use super::CounterStore;

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
        Ok(store::add_in(&mut counters, key, delta, initial, floor, ceiling))
    }

    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        let mut breakers = self.breakers.lock().map_err(|_| "the memory store is poisoned".to_owned())?;
        Ok(store::apply_in(&mut breakers, key, event, policy, now_ms))
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
    fn a_ceiling_below_the_floor_is_the_floor_and_a_closed_circuit_is_no_entry() {
        let store = MemoryStore::default();
        assert_eq!(store.add("k", 1.0, 5.0, 3.0, 1.0), Ok(3.0));
        let policy = BreakerPolicy { failures: 1, window_ms: 1_000.0, cooldown_ms: 100.0 };
        store.breaker("route", BreakerEvent::Failure, &policy, 0.0).unwrap();
        store.breaker("route", BreakerEvent::Admit, &policy, 100.0).unwrap();
        store.breaker("route", BreakerEvent::Success, &policy, 101.0).unwrap();
        assert_eq!(store.breakers(), Ok(vec![]));
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
