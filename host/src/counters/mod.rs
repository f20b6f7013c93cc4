//! Shared counters a plugin row adds to through its host context (`counter_add`): the store its
//! config names — `memory` (this process, [`memory`]), `machine` (every dsh process of the
//! machine: a small state file under the home, updated under an OS lock, [`machine`]) or
//! `redis://HOST:PORT` (a fleet: one atomic script per update, [`redis`]). Each update is one
//! step: add, clamp to `[floor, ceiling]`, return the new value; a counter never touched starts at
//! its `initial` value. A store that cannot answer within its deadline fails the update, and the
//! row's `onStoreError` decides.

pub mod machine;
pub mod memory;
pub mod redis;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

pub use machine::MachineStore;
pub use memory::MemoryStore;
pub use redis::RedisStore;

/// One atomic update of a shared counter.
pub trait CounterStore: Send + Sync {
    /// Adds `delta` to `key` (starting from `initial`), clamps to `[floor, ceiling]`, returns the
    /// new value; `Err` says why the store could not be reached.
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String>;
    /// `memory`, `machine ($DSH_HOME/…)`, `redis://…` (credentials redacted), for messages.
    fn describe(&self) -> String;
}

fn clamped(value: f64, delta: f64, floor: f64, ceiling: f64) -> f64 {
    (value + delta).clamp(floor, ceiling.max(floor))
}

/// Where a row's counters are, from its config's `store` (`None`: memory).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StoreSpec {
    Memory,
    Machine,
    Redis(String),
}

impl StoreSpec {
    pub fn parse(value: Option<&Value>) -> Result<StoreSpec, String> {
        match value {
            None => Ok(StoreSpec::Memory),
            Some(Value::String(text)) if text == "memory" => Ok(StoreSpec::Memory),
            Some(Value::String(text)) if text == "machine" => Ok(StoreSpec::Machine),
            Some(Value::String(text)) if text.starts_with("redis://") || text.starts_with("rediss://") => {
                Ok(StoreSpec::Redis(text.clone()))
            }
            Some(other) => Err(format!("must be \"memory\", \"machine\" or a redis://HOST:PORT URL, got {other}")),
        }
    }
}

/// Which counters the rows of an assembly use.
#[derive(Clone)]
pub enum Counters {
    /// The stores their configs name, under the home at this root.
    Configured(PathBuf),
    /// One fresh memory store for every row: `config explain` and `session replay` never touch
    /// a real budget.
    Scratch(Arc<MemoryStore>),
}

impl Counters {
    pub fn scratch() -> Counters {
        Counters::Scratch(Arc::default())
    }

    /// The store for `spec`: shared by every row of the process that names it. `Err` holds the
    /// store to use anyway (it reconnects at each update) and why it cannot be reached now.
    pub fn open(&self, spec: &StoreSpec) -> Result<Arc<dyn CounterStore>, (Arc<dyn CounterStore>, String)> {
        static MEMORY: OnceLock<Arc<MemoryStore>> = OnceLock::new();
        static SHARED: OnceLock<Mutex<HashMap<String, Arc<dyn CounterStore>>>> = OnceLock::new();
        let root = match self {
            Counters::Scratch(store) => return Ok(store.clone()),
            Counters::Configured(root) => root,
        };
        let name = match spec {
            StoreSpec::Memory => return Ok(MEMORY.get_or_init(Arc::default).clone()),
            StoreSpec::Machine => format!("machine:{}", root.display()),
            StoreSpec::Redis(url) => url.clone(),
        };
        let shared = SHARED.get_or_init(Mutex::default);
        if let Some(store) = shared.lock().expect("not poisoned").get(&name) {
            return Ok(store.clone());
        }
        let (store, problem): (Arc<dyn CounterStore>, Option<String>) = match spec {
            StoreSpec::Machine => match MachineStore::open(root) {
                Ok(store) => (Arc::new(store), None),
                Err(why) => (Arc::new(Unreachable(why.clone())), Some(why)),
            },
            StoreSpec::Redis(url) => match RedisStore::new(url) {
                Ok(store) => {
                    let problem = store.ping().err();
                    (Arc::new(store), problem)
                }
                Err(why) => (Arc::new(Unreachable(why.clone())), Some(why)),
            },
            StoreSpec::Memory => unreachable!("returned above"),
        };
        if problem.is_none() {
            shared.lock().expect("not poisoned").insert(name, store.clone());
        }
        match problem {
            None => Ok(store),
            Some(why) => Err((store, why)),
        }
    }
}

/// A store that can never be reached (its configuration cannot work).
struct Unreachable(String);

impl CounterStore for Unreachable {
    fn add(&self, _: &str, _: f64, _: f64, _: f64, _: f64) -> Result<f64, String> {
        Err(self.0.clone())
    }

    fn describe(&self) -> String {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_spec_is_memory_machine_or_a_redis_url() {
        assert_eq!(StoreSpec::parse(None), Ok(StoreSpec::Memory));
        assert_eq!(StoreSpec::parse(Some(&Value::from("machine"))), Ok(StoreSpec::Machine));
        assert_eq!(
            StoreSpec::parse(Some(&Value::from("redis://127.0.0.1:6379"))),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379".into()))
        );
        assert!(StoreSpec::parse(Some(&Value::from("disk"))).is_err());
    }

    #[test]
    fn an_unreachable_redis_is_said_at_open_and_still_usable_later() {
        let counters = Counters::Configured(std::env::temp_dir());
        let Err((store, why)) = counters.open(&StoreSpec::Redis("redis://127.0.0.1:1".into())) else {
            panic!("port 1 answered")
        };
        assert!(why.contains("cannot reach redis://127.0.0.1:1"), "{why}");
        assert!(store.add("k", 1.0, 0.0, 0.0, 1.0).is_err());
    }
}
