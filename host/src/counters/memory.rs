//! Counters of one process.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{clamped, CounterStore};

/// Counters of one process.
#[derive(Default)]
pub struct MemoryStore {
    counters: Mutex<HashMap<String, f64>>,
}

impl MemoryStore {
    /// Forgets every counter (a scratch store, between two questions).
    pub fn clear(&self) {
        if let Ok(mut counters) = self.counters.lock() {
            counters.clear();
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
}
