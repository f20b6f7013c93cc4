//! From a composed profile to the parts that run: every enabled row resolved to a built-in
//! service (agent, provider routes) or a plugin library, every config validated — built-in ones by
//! the host, plugin ones by their plugin — and every problem collected with the file, row id and
//! key path it concerns, so `dsh config check` can report them all in one run.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

use super::catalog::{self, RowPackage};
use super::loader::{InstantiateFailure, PluginLibrary};
use super::RowInstance;
use crate::agent::config::{parse_agent, AgentConfig};
use crate::llm::config::{parse_mock, parse_openai, ProviderConfig};
use crate::profile::patch::Composition;
use crate::profile::Profile;

/// An enabled row served by a plugin library.
#[derive(Debug, Clone)]
pub struct PluginRow {
    pub row_id: String,
    pub package: String,
    pub library: PathBuf,
    pub config: Value,
    /// The layer that set the row's config (for messages).
    pub config_layer: String,
}

/// Every enabled row, resolved.
#[derive(Debug, Default)]
pub struct Resolution {
    pub agent: Option<AgentConfig>,
    pub providers: Vec<ProviderConfig>,
    /// In composed row order (the waterfall order).
    pub plugins: Vec<PluginRow>,
    /// Rows whose package or library cannot be found.
    pub unresolved: Vec<String>,
    /// Invalid rows and configs of built-in services.
    pub problems: Vec<String>,
}

/// A plugin row whose library is open (and, when asked, instantiated).
pub struct LoadedPlugin {
    pub row: PluginRow,
    pub library: PluginLibrary,
    pub instance: Option<RowInstance>,
}

/// The layer to name in a message about row `row_id`.
fn layer_of<'a>(composition: &'a Composition, row_id: &str) -> &'a str {
    composition.config_layer(row_id).unwrap_or("cordis.yml")
}

/// `<file>: row "<id>": <message>`.
fn row_problem(layer: &str, row_id: &str, message: &str) -> String {
    format!("{layer}: row \"{row_id}\": {message}")
}

/// Resolves every enabled row of `composition`: built-in configs are validated here, plugin rows
/// are matched to their libraries (not opened).
pub fn resolve(profile: &Profile, composition: &Composition) -> Resolution {
    let mut resolution = Resolution::default();
    let mut agents = Vec::new();
    let mut routes: Vec<(String, String)> = Vec::new();
    for (position, row) in composition.enabled_rows().into_iter().enumerate() {
        let Some(row_id) = row.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) else {
            resolution.problems.push(format!("enabled row {} has no id", position + 1));
            continue;
        };
        let layer = layer_of(composition, row_id).to_owned();
        let Some(package) = row.get("name").and_then(Value::as_str).filter(|name| !name.is_empty()) else {
            resolution.problems.push(row_problem(
                &layer,
                row_id,
                "the row has no name (the package or service that serves it)",
            ));
            continue;
        };
        let config = row.get("config").cloned().unwrap_or(Value::Null);
        let mut report = |errors: Vec<String>| {
            for error in errors {
                resolution.problems.push(row_problem(&layer, row_id, &error));
            }
        };
        match catalog::resolve_row_package(profile, row_id, package) {
            Ok(RowPackage::BuiltIn("agent")) => match parse_agent(row_id, &config) {
                Ok(agent) => agents.push(agent),
                Err(errors) => report(errors),
            },
            Ok(RowPackage::BuiltIn(service)) => {
                if let Some(route) = config.get("provider").and_then(Value::as_str) {
                    routes.push((route.to_owned(), row_id.to_owned()));
                }
                let parsed =
                    if service == "llm-mock" { parse_mock(row_id, &config) } else { parse_openai(row_id, &config) };
                match parsed {
                    Ok(provider) => resolution.providers.push(provider),
                    Err(errors) => report(errors),
                }
            }
            Ok(RowPackage::Library { package, path }) => resolution.plugins.push(PluginRow {
                row_id: row_id.to_owned(),
                package,
                library: path,
                config,
                config_layer: layer,
            }),
            Err(err) => resolution.unresolved.push(err.to_string()),
        }
    }
    check_routes(composition, &mut resolution, agents, &routes);
    resolution
}

/// Cross-row rules: one agent row, whose route is served by exactly one provider row. `routes`
/// holds the route of every enabled provider row, valid or not, so one bad provider config does
/// not also show up as a missing route.
fn check_routes(
    composition: &Composition,
    resolution: &mut Resolution,
    mut agents: Vec<AgentConfig>,
    routes: &[(String, String)],
) {
    let mut served: HashMap<&str, &str> = HashMap::new();
    for (route, row_id) in routes {
        if let Some(first) = served.insert(route, row_id) {
            let layer = layer_of(composition, row_id);
            resolution.problems.push(row_problem(
                layer,
                row_id,
                &format!("config.provider: route \"{route}\" is already served by row \"{first}\""),
            ));
        }
    }
    if agents.len() > 1 {
        let ids: Vec<&str> = agents.iter().map(|agent| agent.row_id.as_str()).collect();
        resolution.problems.push(format!("several enabled agent rows ({}); disable all but one", ids.join(", ")));
    }
    let agent = agents.drain(..).next();
    if let Some(agent) = &agent {
        if !served.contains_key(agent.provider.as_str()) {
            let layer = layer_of(composition, &agent.row_id);
            let mut routes: Vec<&str> = served.keys().copied().collect();
            routes.sort();
            resolution.problems.push(row_problem(
                layer,
                &agent.row_id,
                &format!(
                    "config.provider: no enabled provider row serves route \"{}\" (routes: {})",
                    agent.provider,
                    if routes.is_empty() { "none".to_owned() } else { routes.join(", ") }
                ),
            ));
        }
    }
    resolution.agent = agent;
}

/// Opens the library of every plugin row (each file once) and, with `instantiate`, builds each
/// row's instance from its config. Returns the rows that loaded and every problem.
pub fn load_plugins(plugins: &[PluginRow], instantiate: bool) -> (Vec<LoadedPlugin>, Vec<String>) {
    let mut libraries: HashMap<PathBuf, PluginLibrary> = HashMap::new();
    let mut loaded = Vec::new();
    let mut problems = Vec::new();
    for row in plugins {
        let library = match libraries.get(&row.library) {
            Some(library) => library.clone(),
            None => match PluginLibrary::load(&row.library) {
                Ok(library) => {
                    libraries.insert(row.library.clone(), library.clone());
                    library
                }
                Err(err) => {
                    problems.push(format!("row \"{}\": {err}", row.row_id));
                    continue;
                }
            },
        };
        if library.manifest.name.as_str() != row.package {
            problems.push(format!(
                "row \"{}\": library {} is plugin \"{}\", not \"{}\"",
                row.row_id,
                row.library.display(),
                library.manifest.name,
                row.package
            ));
            continue;
        }
        let instance = if instantiate {
            match library.instantiate(&row.row_id, &row.config) {
                Ok(instance) => Some(instance),
                Err(InstantiateFailure::Config(errors)) => {
                    for error in errors {
                        let path =
                            if error.path.is_empty() { "config".to_owned() } else { format!("config.{}", error.path) };
                        problems.push(row_problem(
                            &row.config_layer,
                            &row.row_id,
                            &format!("{path}: {}", error.message),
                        ));
                    }
                    continue;
                }
                Err(InstantiateFailure::Failed(message)) => {
                    problems.push(row_problem(&row.config_layer, &row.row_id, &message));
                    continue;
                }
            }
        } else {
            None
        };
        loaded.push(LoadedPlugin { row: row.clone(), library, instance });
    }
    (loaded, problems)
}
