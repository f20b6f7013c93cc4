//! Shared counters a plugin row adds to through its host context (`counter_add`): the store its
//! config names — `memory` (this process), `machine` (every dsh process of the machine: a small
//! state file under the home, updated under an OS lock) or `redis://HOST:PORT` (a fleet: one
//! atomic script per update). Each update is one step: add, clamp to `[floor, ceiling]`, return
//! the new value; a counter never touched starts at its `initial` value.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};

/// How long a Redis store may take to connect or answer before the update fails.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// One atomic update of a shared counter.
pub trait CounterStore: Send + Sync {
    /// Adds `delta` to `key` (starting from `initial`), clamps to `[floor, ceiling]`, returns the
    /// new value; `Err` says why the store could not be reached.
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String>;
    /// `memory`, `machine ($DSH_HOME/…)`, `redis://…`, for messages.
    fn describe(&self) -> String;
}

fn clamped(value: f64, delta: f64, floor: f64, ceiling: f64) -> f64 {
    (value + delta).clamp(floor, ceiling.max(floor))
}

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

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}

/// Counters of every dsh process of the machine: a JSON object in `counters.json`, read and
/// rewritten under an exclusive `flock` of the file itself. Not fsynced: a crash may lose the
/// last updates of a budget, never corrupt a session.
pub struct MachineStore {
    path: PathBuf,
}

impl MachineStore {
    /// The store of the home at `root` (`$DSH_HOME/stores/counters.json`), created if missing.
    pub fn open(root: &Path) -> Result<MachineStore, String> {
        let dir = root.join("stores");
        std::fs::create_dir_all(&dir).map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        let store = MachineStore { path: dir.join("counters.json") };
        store.file()?;
        Ok(store)
    }

    fn file(&self) -> Result<File, String> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|err| format!("cannot open {}: {err}", self.path.display()))
    }
}

impl CounterStore for MachineStore {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        let mut file = self.file()?;
        file.lock().map_err(|err| format!("cannot lock {}: {err}", self.path.display()))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(|err| format!("cannot read {}: {err}", self.path.display()))?;
        let mut counters: Map<String, Value> = serde_json::from_str(&text).unwrap_or_default();
        let value = counters.get(key).and_then(Value::as_f64).unwrap_or(initial);
        let value = clamped(value, delta, floor, ceiling);
        counters.insert(key.to_owned(), Value::from(value));
        let written = serde_json::to_string(&counters).expect("a JSON object");
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.set_len(0))
            .and_then(|()| file.write_all(written.as_bytes()))
            .map_err(|err| format!("cannot write {}: {err}", self.path.display()))?;
        Ok(value)
    }

    fn describe(&self) -> String {
        format!("machine ({})", self.path.display())
    }
}

/// Counters of a fleet, in Redis (`dsh:counter:<key>`), each update one server-side script.
pub struct RedisStore {
    url: String,
    client: redis::Client,
    connection: Mutex<Option<redis::Connection>>,
}

const ADD_SCRIPT: &str = r"
local value = tonumber(redis.call('GET', KEYS[1]) or ARGV[2])
value = value + tonumber(ARGV[1])
local floor, ceiling = tonumber(ARGV[3]), tonumber(ARGV[4])
if value < floor then value = floor end
if value > ceiling then value = ceiling end
redis.call('SET', KEYS[1], tostring(value))
return tostring(value)
";

impl RedisStore {
    /// A store at `url` (`redis://HOST:PORT[/DB]`); it connects at its first update.
    pub fn new(url: &str) -> Result<RedisStore, String> {
        let client = redis::Client::open(url).map_err(|err| format!("{url} is not a Redis URL: {err}"))?;
        Ok(RedisStore { url: url.to_owned(), client, connection: Mutex::new(None) })
    }

    fn connect(&self) -> Result<redis::Connection, String> {
        let connection = self
            .client
            .get_connection_with_timeout(REDIS_TIMEOUT)
            .map_err(|err| format!("cannot reach {}: {err}", self.url))?;
        connection
            .set_read_timeout(Some(REDIS_TIMEOUT))
            .and_then(|()| connection.set_write_timeout(Some(REDIS_TIMEOUT)))
            .map_err(|err| format!("{}: {err}", self.url))?;
        Ok(connection)
    }

    /// Whether the server answers (`PING`).
    pub fn ping(&self) -> Result<(), String> {
        let mut connection = self.connect()?;
        redis::cmd("PING").query::<String>(&mut connection).map_err(|err| format!("{}: {err}", self.url))?;
        *self.connection.lock().map_err(|_| "poisoned".to_owned())? = Some(connection);
        Ok(())
    }
}

impl CounterStore for RedisStore {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        let mut slot = self.connection.lock().map_err(|_| "the Redis store is poisoned".to_owned())?;
        let connection = match slot.as_mut() {
            Some(connection) => connection,
            None => slot.insert(self.connect()?),
        };
        let result: redis::RedisResult<String> = redis::Script::new(ADD_SCRIPT)
            .key(format!("dsh:counter:{key}"))
            .arg(delta)
            .arg(initial)
            .arg(floor)
            .arg(ceiling)
            .invoke(connection);
        match result {
            Ok(value) => value.parse().map_err(|_| format!("{} answered {value:?}, not a number", self.url)),
            Err(err) => {
                *slot = None;
                Err(format!("{}: {err}", self.url))
            }
        }
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
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
    fn an_update_adds_clamps_and_starts_from_the_initial_value() {
        let store = MemoryStore::default();
        assert_eq!(store.add("k", -1.0, 10.0, 0.0, 10.0), Ok(9.0));
        assert_eq!(store.add("k", 5.0, 10.0, 0.0, 10.0), Ok(10.0));
        assert_eq!(store.add("k", -50.0, 10.0, 0.0, 10.0), Ok(0.0));
    }

    #[test]
    fn two_machine_stores_of_one_home_share_their_counters() {
        let home = tempfile::tempdir().unwrap();
        let (one, two) = (MachineStore::open(home.path()).unwrap(), MachineStore::open(home.path()).unwrap());
        assert_eq!(one.add("relay", -1.0, 10.0, 0.0, 10.0), Ok(9.0));
        assert_eq!(two.add("relay", -1.0, 10.0, 0.0, 10.0), Ok(8.0));
        assert_eq!(one.add("other", 0.0, 3.0, 0.0, 10.0), Ok(3.0));
    }

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
