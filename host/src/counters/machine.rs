//! Counters and circuit breakers of every dsh process of the machine:
//! `$DSH_HOME/stores/counters.json` (a breaker is an object under its key, a counter a number).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use dsh_abi::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState};
use dsh_abi::store;
use serde_json::{Map, Value};

use super::CounterStore;
use dsh_session::lock::open_no_follow;

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
        open_no_follow(&self.path, true).map_err(|err| format!("cannot open {}: {err}", self.path.display()))
    }
}

/// The most the machine store's file may hold (a counter takes a few dozen bytes).
pub const MAX_COUNTERS_FILE_BYTES: usize = 16 * 1024 * 1024;

impl MachineStore {
    /// Runs `change` on the counters under the file's lock and writes them back when it says so.
    fn locked<T>(&self, change: impl FnOnce(&mut Map<String, Value>) -> (T, bool)) -> Result<T, String> {
        let mut file = self.file()?;
        file.lock().map_err(|err| format!("cannot lock {}: {err}", self.path.display()))?;
        let mut text = String::new();
        (&mut file)
            .take(MAX_COUNTERS_FILE_BYTES as u64 + 1)
            .read_to_string(&mut text)
            .map_err(|err| format!("cannot read {}: {err}", self.path.display()))?;
        if text.len() > MAX_COUNTERS_FILE_BYTES {
            let limit = dsh_session::fsutil::size_text(MAX_COUNTERS_FILE_BYTES);
            return Err(format!(
                "{} is longer than the {limit} a counters file may hold; fix or delete it",
                self.path.display()
            ));
        }
        let mut counters: Map<String, Value> = match text.trim() {
            "" => Map::new(),
            text => serde_json::from_str(text).map_err(|err| {
                format!("{} is not a JSON object of counters ({err}); fix or delete it", self.path.display())
            })?,
        };
        let (answer, changed) = change(&mut counters);
        if changed {
            let written = dsh_abi::js::to_string(&counters);
            file.seek(SeekFrom::Start(0))
                .and_then(|_| file.set_len(0))
                .and_then(|()| file.write_all(written.as_bytes()))
                .map_err(|err| format!("cannot write {}: {err}", self.path.display()))?;
        }
        Ok(answer)
    }
}

impl MachineStore {
    /// Says that the entry `key` holds something this dsh did not write there.
    fn malformed(&self, key: &str, value: &Value, instead: &str) {
        let shown: String = dsh_abi::js::to_string(value).chars().take(80).collect();
        tracing::warn!("{}: {key:?} holds {shown}, which is not what dsh keeps there; {instead}", self.path.display());
    }
}

impl CounterStore for MachineStore {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        self.locked(|counters| {
            let value = match counters.get(key) {
                None => initial,
                Some(value) => value.as_f64().filter(|value| value.is_finite()).unwrap_or_else(|| {
                    self.malformed(key, value, &format!("starting it again from {}", dsh_abi::js::number(initial)));
                    initial
                }),
            };
            let value = store::clamped(value, delta, floor, ceiling);
            counters.insert(key.to_owned(), Value::from(value));
            (value, true)
        })
    }

    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        self.locked(|entries| {
            let stored = entries.get(key).map(|value| {
                serde_json::from_value(value.clone()).unwrap_or_else(|_| {
                    self.malformed(key, value, "taking the circuit as closed");
                    BreakerState::default()
                })
            });
            let (answer, kept) = store::apply_stored(stored, event, policy, now_ms);
            let state = kept.map(|state| serde_json::to_value(&state).expect("JSON"));
            let changed = entries.get(key) != state.as_ref();
            match state {
                Some(state) if changed => entries.insert(key.to_owned(), state),
                None if changed => entries.remove(key),
                _ => None,
            };
            (answer, changed)
        })
    }

    fn breakers(&self) -> Result<Vec<(String, BreakerState)>, String> {
        self.locked(|entries| {
            let mut listed: Vec<(String, BreakerState)> = entries
                .iter()
                .filter(|(_, value)| value.is_object())
                .filter_map(|(key, value)| Some((key.clone(), serde_json::from_value(value.clone()).ok()?)))
                .collect();
            listed.sort_by(|a, b| a.0.cmp(&b.0));
            (listed, false)
        })
    }

    fn remove_breakers(&self, keys: &[String]) -> Result<usize, String> {
        self.locked(|entries| remove_where(entries, keys, Value::is_object))
    }

    fn list(&self) -> Result<Vec<(String, f64)>, String> {
        self.locked(|counters| {
            let mut listed: Vec<(String, f64)> =
                counters.iter().filter_map(|(key, value)| Some((key.clone(), value.as_f64()?))).collect();
            listed.sort_by(|a, b| a.0.cmp(&b.0));
            (listed, false)
        })
    }

    fn remove(&self, keys: &[String]) -> Result<usize, String> {
        self.locked(|counters| remove_where(counters, keys, Value::is_number))
    }

    fn describe(&self) -> String {
        format!("machine ({})", self.path.display())
    }
}

/// Removes those of `keys` whose value is of the kind `is_kind` tells (a counter, or a circuit);
/// how many, and whether the file changed.
fn remove_where(entries: &mut Map<String, Value>, keys: &[String], is_kind: fn(&Value) -> bool) -> (usize, bool) {
    let removed = keys
        .iter()
        .filter(|key| entries.get(key.as_str()).is_some_and(is_kind) && entries.remove(key.as_str()).is_some())
        .count();
    (removed, removed > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_of_the_wrong_type_starts_again_from_its_initial_value() {
        let dir = tempfile::tempdir().unwrap();
        let store = MachineStore::open(dir.path()).unwrap();
        std::fs::write(&store.path, r#"{"budget": "ten", "other": 3}"#).unwrap();
        assert_eq!(store.add("budget", -1.0, 10.0, 0.0, 10.0).unwrap(), 9.0);
        assert_eq!(
            std::fs::read_to_string(&store.path).unwrap(),
            r#"{"budget":9,"other":3}"#,
            "integers as JSON.stringify writes them"
        );
    }

    #[test]
    fn two_machine_stores_of_one_home_share_their_counters() {
        let home = tempfile::tempdir().unwrap();
        let (one, two) = (MachineStore::open(home.path()).unwrap(), MachineStore::open(home.path()).unwrap());
        assert_eq!(one.add("relay", -1.0, 10.0, 0.0, 10.0), Ok(9.0));
        assert_eq!(two.add("relay", -1.0, 10.0, 0.0, 10.0), Ok(8.0));
        assert_eq!(one.add("other", 0.0, 3.0, 0.0, 10.0), Ok(3.0));
        assert_eq!(two.list(), Ok(vec![("other".into(), 3.0), ("relay".into(), 8.0)]));
        assert_eq!(two.remove(&["relay".into()]), Ok(1));
        assert_eq!(one.list(), Ok(vec![("other".into(), 3.0)]));
    }

    #[test]
    fn a_corrupt_counters_file_fails_the_update_and_is_left_as_it_was() {
        let home = tempfile::tempdir().unwrap();
        let store = MachineStore::open(home.path()).unwrap();
        std::fs::write(&store.path, "{\"relay\": 3").unwrap();
        let err = store.add("relay", -1.0, 10.0, 0.0, 10.0).unwrap_err();
        assert!(err.contains("is not a JSON object of counters"), "{err}");
        assert_eq!(std::fs::read_to_string(&store.path).unwrap(), "{\"relay\": 3");
    }

    #[test]
    fn a_counters_file_replaced_by_a_link_is_never_written_through() {
        let home = tempfile::tempdir().unwrap();
        let store = MachineStore::open(home.path()).unwrap();
        let target = home.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        std::fs::remove_file(&store.path).unwrap();
        std::os::unix::fs::symlink(&target, &store.path).unwrap();
        let err = store.add("relay", -1.0, 10.0, 0.0, 10.0).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }
}
