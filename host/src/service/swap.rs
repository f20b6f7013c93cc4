//! Live swap: before each turn a session's profile, layers and manifest are read again; when the
//! composition changed, the agent's rows are rebuilt (libraries already open stay open), and one
//! note says what changed — `profile web: relay-retry now handles request errors; llm-retry
//! disabled`. The session's checkers stay the ones it opened with.

use serde_json::Value;

use crate::agent::assembly::Assembly;
use crate::agent::target::Resolved;
use crate::agent::turn::Agent;
use crate::profile::patch::Composition;
use crate::profile::{Home, Profile};

/// What a profile composed to, as far as running it is concerned: the rows and the installed
/// packages (a reinstalled library changes the manifest, not the rows).
#[derive(PartialEq)]
pub(super) struct Snapshot {
    rows: Vec<Value>,
    packages: Value,
}

impl Snapshot {
    pub(super) fn of(profile: &Profile, composition: &Composition) -> Snapshot {
        let packages = serde_json::to_value(&profile.manifest.packages).unwrap_or(Value::Null);
        Snapshot { rows: composition.rows.clone(), packages }
    }
}

/// Re-reads `target`'s profile; when it changed, rebuilds the agent's rows and notes what
/// changed. A profile that no longer composes or builds keeps the rows the session had, and
/// says why. `true`: the rows were rebuilt.
pub(super) async fn swap_if_changed(
    (home, verbose): (&Home, bool),
    note: &(dyn Fn(&str) + Sync),
    target: &Resolved,
    agent: &mut Agent,
    current: &mut Snapshot,
) -> bool {
    let profile_name = &target.profile;
    let (profile, composition) = match target.compose(home) {
        Ok(composed) => composed,
        Err(err) => {
            note(&format!("profile {profile_name} no longer composes ({err:#}); keeping its previous rows"));
            return false;
        }
    };
    let next = Snapshot::of(&profile, &composition);
    if next == *current {
        return false;
    }
    for warning in &composition.warnings {
        note(&warning.to_string());
    }
    let counters = agent.assembly.counters.clone();
    agent.view.servers_starting(&composition.enabled_ids_of("mcp"));
    let built = Assembly::build(home, &profile, &composition, verbose, &counters).await;
    agent.view.servers_started();
    match built {
        Ok(assembly) => {
            note(&format!("profile {profile_name}: {}", assembly.change_since(&agent.assembly, &composition.rows)));
            agent.assembly = assembly;
            *current = next;
            true
        }
        Err(problems) => {
            for problem in problems {
                note(&problem.to_string());
            }
            note(&format!("profile {profile_name} changed but cannot run; keeping its previous rows"));
            false
        }
    }
}
