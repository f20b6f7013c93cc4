//! `dsh config counters`: the shared counters and circuits of the stores a profile's rows keep
//! them in (a retry budget's tokens, a failover row's circuit breakers), listed or reset. The keys
//! belong to the rows that write them; the host shows and matches them as they are, by prefix,
//! without reading meaning into them.

use std::path::PathBuf;

use clap::Args;
use dsh_abi::breaker::{BreakerState, Phase};
use dsh_abi::config::COUNTER_STORE_KEY;
use dsh_abi::Hooks;
use serde_json::{json, Value};

use super::exit::{Exit, Outcome, EXIT_CONFIG, EXIT_FAILED};
use super::shown::plural;
use crate::agent::assembly as rows;
use crate::counters::{StoreSpec, Stores};
use crate::profile::{Home, LayerScope};

#[derive(Debug, Args)]
pub struct CountersArgs {
    /// Only the counters whose key starts with one of these (e.g. `retry-budget:route:relay`).
    #[arg(value_name = "KEY_PREFIX")]
    prefixes: Vec<String>,
    /// Forget the counters and circuits shown, in every store the profile's rows name, so each
    /// starts again from its row's initial value (a full budget, a closed circuit). Without a
    /// prefix: all of those stores', including other profiles' in a shared machine or Redis store.
    #[arg(long)]
    reset: bool,
    /// Print a JSON array of stores `{store, rows, counters: {KEY: value}, circuits: {KEY:
    /// {phase, openUntil, probeUntil, failures}}, reset, error}`.
    #[arg(long)]
    json: bool,
}

/// A store the profile's rows keep counters in, and those rows.
struct StoreUse {
    spec: StoreSpec,
    rows: Vec<String>,
}

/// What one store showed (or why it could not).
struct StoreReport {
    store: String,
    /// A `memory` store: it lives in each process, so nothing shows from outside.
    in_process: bool,
    rows: Vec<String>,
    counters: Vec<(String, f64)>,
    circuits: Vec<(String, BreakerState)>,
    reset: Option<usize>,
    error: Option<String>,
}

pub fn run(home: &Home, profile: &str, patches: &[PathBuf], args: &CountersArgs) -> Outcome {
    let uses = stores_of(home, profile, patches)?;
    let counters = Stores::at(home.root());
    let reports: Vec<StoreReport> = uses.iter().map(|used| report(&counters, used, args)).collect();
    let failed = reports.iter().any(|report| report.error.is_some());
    if args.json {
        let stores: Vec<Value> = reports.iter().map(StoreReport::to_json).collect();
        out_raw!("{}", dsh_abi::js::to_string_pretty(&stores))?;
    } else if reports.is_empty() {
        out!("profile {profile}: no enabled row keeps shared counters (retry-budget and route-failover do)")?;
    } else {
        for report in &reports {
            report.print()?;
        }
    }
    Exit::unless(!failed, EXIT_FAILED)
}

/// The stores the enabled rows with counters name, each once, in row order.
fn stores_of(home: &Home, profile_name: &str, patches: &[PathBuf]) -> Result<Vec<StoreUse>, Exit> {
    let (profile, composition) = super::globals::compose(home, profile_name, patches, LayerScope::All)?;
    let resolution = rows::resolve(&profile, &composition);
    let loaded = rows::load_plugins(&resolution.plugins, false, &Stores::scratch());
    let mut uses: Vec<StoreUse> = Vec::new();
    for plugin in loaded.plugins.iter().filter(|plugin| plugin.library.manifest.hooks.contains(Hooks::COUNTERS)) {
        let spec = StoreSpec::parse(plugin.row.config.get(COUNTER_STORE_KEY)).map_err(|why| {
            say!("dsh: row \"{}\": config.{COUNTER_STORE_KEY}: {why}", plugin.row.row_id);
            Exit::reported(EXIT_CONFIG)
        })?;
        match uses.iter_mut().find(|used| used.spec == spec) {
            Some(used) => used.rows.push(plugin.row.row_id.clone()),
            None => uses.push(StoreUse { spec, rows: vec![plugin.row.row_id.clone()] }),
        }
    }
    Ok(uses)
}

fn report(counters: &Stores, used: &StoreUse, args: &CountersArgs) -> StoreReport {
    let store = match counters.open(&used.spec) {
        Ok(store) => store,
        Err((store, why)) => return StoreReport::failed(store.describe(), used, why),
    };
    let matches = |key: &str| args.prefixes.is_empty() || args.prefixes.iter().any(|prefix| key.starts_with(prefix));
    let listed = store.list().and_then(|listed| Ok((listed, store.breakers()?)));
    let (listed, circuits) = match listed {
        Ok((listed, circuits)) => (
            listed.into_iter().filter(|(key, _)| matches(key)).collect::<Vec<_>>(),
            circuits.into_iter().filter(|(key, _)| matches(key)).collect::<Vec<_>>(),
        ),
        Err(why) => return StoreReport::failed(store.describe(), used, why),
    };
    let reset = match args.reset {
        false => None,
        true => match store
            .remove(&keys(&listed))
            .and_then(|counted| Ok(counted + store.remove_breakers(&keys(&circuits))?))
        {
            Ok(removed) => Some(removed),
            Err(why) => return StoreReport::failed(store.describe(), used, why),
        },
    };
    let in_process = used.spec == StoreSpec::Memory;
    let rows = used.rows.clone();
    StoreReport { store: store.describe(), in_process, rows, counters: listed, circuits, reset, error: None }
}

fn keys<T>(found: &[(String, T)]) -> Vec<String> {
    found.iter().map(|(key, _)| key.clone()).collect()
}

/// A circuit as a user reads it: `open until 2026-12-02T00:12:30Z`, `closed (1 failure in the
/// window)`, `half-open (probe taken until …)`.
fn circuit_text(state: &BreakerState, now_ms: f64) -> String {
    let at = |ms: f64| {
        jiff::Timestamp::from_second((ms / 1000.0).ceil() as i64).map_or_else(|_| ms.to_string(), |at| at.to_string())
    };
    match state.phase(now_ms) {
        Phase::Closed => {
            format!("closed ({} failure{} in the window)", state.failures.len(), plural(state.failures.len()))
        }
        Phase::Open => format!("open until {}", at(state.open_until)),
        Phase::HalfOpen if state.probe_until > now_ms => {
            format!("half-open (probe taken until {})", at(state.probe_until))
        }
        Phase::HalfOpen => "half-open (the next request is the probe)".to_owned(),
    }
}

impl StoreReport {
    fn failed(store: String, used: &StoreUse, why: String) -> StoreReport {
        let in_process = used.spec == StoreSpec::Memory;
        let rows = used.rows.clone();
        let (counters, circuits) = (Vec::new(), Vec::new());
        StoreReport { store, in_process, rows, counters, circuits, reset: None, error: Some(why) }
    }

    fn print(&self) -> Outcome {
        out!("{}, used by {}:", self.store, self.rows.join(", "))?;
        if let Some(why) = &self.error {
            say!("dsh: {}: {why}", self.store);
            return Ok(());
        }
        if self.in_process {
            out!("  each dsh process keeps its own memory counters, and they end with it")?;
            return Ok(());
        }
        if self.counters.is_empty() && self.circuits.is_empty() {
            out!("  no counters{}", if self.reset.is_some() { "; nothing to reset" } else { "" })?;
        }
        let keys = self.counters.iter().map(|(key, _)| key).chain(self.circuits.iter().map(|(key, _)| key));
        let width = keys.map(String::len).max().unwrap_or(0);
        for (key, value) in &self.counters {
            out!("  {key:<width$}  {}", dsh_abi::js::number(*value))?;
        }
        let now = crate::context::epoch_ms() as f64;
        for (key, state) in &self.circuits {
            out!("  {key:<width$}  {}", circuit_text(state, now))?;
        }
        if let Some(removed) = self.reset.filter(|_| !self.counters.is_empty() || !self.circuits.is_empty()) {
            out!(
                "  reset {removed} counter{}: each starts again from its row's initial value (a circuit closed)",
                plural(removed)
            )?;
        }
        Ok(())
    }

    fn to_json(&self) -> Value {
        let counters: serde_json::Map<String, Value> =
            self.counters.iter().map(|(key, value)| (key.clone(), json!(value))).collect();
        let now = crate::context::epoch_ms() as f64;
        let circuits: serde_json::Map<String, Value> = self
            .circuits
            .iter()
            .map(|(key, state)| {
                let phase = state.phase(now).as_str();
                let circuit = json!({"phase": phase, "openUntil": state.open_until, "probeUntil": state.probe_until, "failures": state.failures});
                (key.clone(), circuit)
            })
            .collect();
        json!({
            "store": self.store,
            "rows": self.rows,
            "counters": counters,
            "circuits": circuits,
            "reset": self.reset,
            "error": self.error,
        })
    }
}
