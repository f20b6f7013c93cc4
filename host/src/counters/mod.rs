//! Shared counters a plugin row adds to through its host context (`counter_add`): the store its
//! config names — `memory` (this process, [`memory`]), `machine` (every dsh process of the
//! machine: a small state file under the home, updated under an OS lock, [`machine`]) or
//! `redis://HOST:PORT` (a fleet: one atomic script per update, [`redis`]). Each update is one
//! step: add, clamp to `[floor, ceiling]` (a ceiling below the floor is the floor), return the new
//! value; a counter never touched starts at its `initial` value. The maths of both updates is
//! [`dsh_abi::store`]'s (which the author kit's fake host uses too; in Redis, scripts that follow
//! it). A store that cannot answer within its deadline fails the update, and the row's
//! `onStoreError` decides.
//!
//! The same stores keep circuit breakers (`breaker`): each event is applied to a circuit's state
//! in one atomic step, with [`dsh_abi::breaker::apply`]'s maths (in Redis, a script that follows
//! it), so every process sharing a store sees one circuit.

pub mod machine;
pub mod memory;
pub mod redis;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_abi::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState};
use dsh_abi::config::Kind;
use serde_json::Value;

pub use machine::MachineStore;
pub use memory::MemoryStore;
pub use redis::RedisStore;

/// One atomic update of a shared counter.
pub trait CounterStore: Send + Sync {
    /// Adds `delta` to `key` (starting from `initial`), clamps to `[floor, ceiling]`, returns the
    /// new value; `Err` says why the store could not be reached.
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String>;
    /// Applies `event` at `now_ms` to the circuit breaker `key`, atomically.
    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String>;
    /// Every circuit breaker of the store and its state, sorted by key.
    fn breakers(&self) -> Result<Vec<(String, BreakerState)>, String>;
    /// Forgets the circuits `keys` (each is closed again); returns how many existed.
    fn remove_breakers(&self, keys: &[String]) -> Result<usize, String>;
    /// Every counter of the store and its value, sorted by key.
    fn list(&self) -> Result<Vec<(String, f64)>, String>;
    /// Forgets `keys`, so each starts again from its row's initial value at its next update;
    /// returns how many existed.
    fn remove(&self, keys: &[String]) -> Result<usize, String>;
    /// `memory`, `machine ($DSH_HOME/…)`, `redis://…` (credentials redacted), for messages.
    fn describe(&self) -> String;
    /// Whether an update may wait on I/O (a file lock, a socket).
    fn may_wait(&self) -> bool {
        true
    }
    /// A turn starts: a store that failed during the last one is tried again (until it fails
    /// again, a store that failed answers at once, so it costs one deadline per turn).
    fn begin_turn(&self) {}
}

/// Where a row's counters are, from its config's `store` (`None`: memory).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StoreSpec {
    Memory,
    Machine,
    Redis(String),
}

impl StoreSpec {
    /// The store a row names (`None`: memory), in the grammar of [`Kind::CounterStore`].
    pub fn parse(value: Option<&Value>) -> Result<StoreSpec, String> {
        let Some(value) = value else { return Ok(StoreSpec::Memory) };
        match value.as_str().filter(|_| Kind::CounterStore.admits(value)) {
            Some("memory") => Ok(StoreSpec::Memory),
            Some("machine") => Ok(StoreSpec::Machine),
            Some(url) => Ok(StoreSpec::Redis(url.to_owned())),
            None => Err(format!("must be {}, got {value}", Kind::CounterStore.describe())),
        }
    }
}

/// Which counters the rows of an assembly use. Cloning shares the stores: a profile reloaded
/// inside `dsh chat` keeps the budgets it had.
#[derive(Clone)]
pub enum Stores {
    /// The stores the rows name, under the home at this root.
    Configured(Arc<Registry>),
    /// One fresh memory store for every row: `config explain` and `session replay` never touch
    /// a real budget.
    Scratch(Arc<MemoryStore>),
}

/// The stores a process opened, each once: `memory`, `machine`, one per Redis URL.
pub struct Registry {
    root: PathBuf,
    memory: Arc<MemoryStore>,
    shared: Mutex<HashMap<String, Arc<dyn CounterStore>>>,
}

impl Stores {
    /// The stores under the home at `root`, none opened yet.
    pub fn at(root: &std::path::Path) -> Stores {
        Stores::Configured(Arc::new(Registry {
            root: root.to_owned(),
            memory: Arc::default(),
            shared: Mutex::default(),
        }))
    }

    pub fn scratch() -> Stores {
        Stores::Scratch(Arc::default())
    }

    /// Tells every store opened so far that a turn starts ([`CounterStore::begin_turn`]).
    pub fn begin_turn(&self) {
        if let Stores::Configured(registry) = self {
            registry.shared.lock().expect("not poisoned").values().for_each(|store| store.begin_turn());
        }
    }

    /// The store for `spec`: shared by every row of the registry that names it. `Err` holds the
    /// store to use anyway (it reconnects at each update) and why it cannot be reached now.
    pub fn open(&self, spec: &StoreSpec) -> Result<Arc<dyn CounterStore>, (Arc<dyn CounterStore>, String)> {
        let registry = match self {
            Stores::Scratch(store) => return Ok(store.clone()),
            Stores::Configured(registry) => registry,
        };
        let name = match spec {
            StoreSpec::Memory => return Ok(registry.memory.clone()),
            StoreSpec::Machine => format!("machine:{}", registry.root.display()),
            StoreSpec::Redis(url) => url.clone(),
        };
        if let Some(store) = registry.shared.lock().expect("not poisoned").get(&name) {
            return Ok(store.clone());
        }
        let (store, problem): (Arc<dyn CounterStore>, Option<String>) = match spec {
            StoreSpec::Machine => match MachineStore::open(&registry.root) {
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
            registry.shared.lock().expect("not poisoned").insert(name, store.clone());
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

    fn breaker(&self, _: &str, _: BreakerEvent, _: &BreakerPolicy, _: f64) -> Result<BreakerAnswer, String> {
        Err(self.0.clone())
    }

    fn breakers(&self) -> Result<Vec<(String, BreakerState)>, String> {
        Err(self.0.clone())
    }

    fn remove_breakers(&self, _: &[String]) -> Result<usize, String> {
        Err(self.0.clone())
    }

    fn list(&self) -> Result<Vec<(String, f64)>, String> {
        Err(self.0.clone())
    }

    fn remove(&self, _: &[String]) -> Result<usize, String> {
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
        let counters = Stores::at(&std::env::temp_dir());
        let Err((store, why)) = counters.open(&StoreSpec::Redis("redis://127.0.0.1:1".into())) else {
            panic!("port 1 answered")
        };
        assert!(why.contains("cannot reach redis://127.0.0.1:1"), "{why}");
        assert!(store.add("k", 1.0, 0.0, 0.0, 1.0).is_err());
    }
}
