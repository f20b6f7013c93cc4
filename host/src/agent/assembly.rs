//! From a composed profile to the parts that run: every enabled row resolved to a built-in
//! service (agent, provider routes) or a plugin library, every config validated — built-in ones by
//! the host, plugin ones by their plugin — and every problem collected with the file, row id and
//! key path it concerns, so `dsh config check` can report them all in one run; then the
//! [`Assembly`]: routes ready to send, plugin rows sorted by hook, the in-process mock servers.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use dsh_abi::config::{COUNTER_STORE_KEY, ROUTES_KEY};
use dsh_abi::{ConfigError, Hooks};
use serde_json::Value;

use super::config::{parse_agent, AgentConfig};
use super::route::Route;
use crate::llm::config::{parse_mock, parse_openai, Endpoint, ProviderConfig};
use crate::llm::mock::{MockLog, MockServer};
use crate::llm::openai::OpenAiAdapter;
use crate::migration;
use crate::plugin::catalog::{self, RowPackage};
use crate::plugin::loader::{InstantiateFailure, PluginLibrary};
use crate::plugin::RowInstance;
use crate::problem::Problem;
use crate::profile::patch::Composition;
use crate::profile::{Home, Profile};
use crate::tools::config::{parse_mcp, McpConfig};
use crate::tools::Tools;
use dsh_session::gate::RowChecker;

use crate::counters::{StoreSpec, Stores};

/// An enabled row served by a plugin library.
#[derive(Debug, Clone)]
pub struct PluginRow {
    pub row_id: String,
    pub package: String,
    pub library: PathBuf,
    pub config: Value,
    /// The layer that set the row's config (for messages).
    pub config_layer: String,
    /// The profile the row belongs to (for the way out when its library is refused).
    pub profile: String,
    /// For a package installed in the profile: the library's hash recorded at install, checked
    /// before the library is opened.
    pub installed_sha256: Option<String>,
}

/// Every enabled row, resolved.
#[derive(Debug, Default)]
pub struct Resolution {
    pub agent: Option<AgentConfig>,
    pub providers: Vec<ProviderConfig>,
    /// The MCP servers of the `mcp` rows, in row order.
    pub servers: Vec<McpConfig>,
    /// In composed row order (the waterfall order).
    pub plugins: Vec<PluginRow>,
    /// Rows whose package or library cannot be found.
    pub unresolved: Vec<Problem>,
    /// Invalid rows and configs of built-in services.
    pub problems: Vec<Problem>,
    /// The route of every enabled provider row, valid or not.
    pub route_names: Vec<String>,
}

/// A profile's rows resolved and loaded, with every problem that keeps it from running.
pub struct Checked {
    /// The rows; its `unresolved` and `problems` are moved into [`Checked::problems`].
    pub resolution: Resolution,
    pub plugins: Vec<LoadedPlugin>,
    pub problems: Vec<Problem>,
    /// Counter stores that cannot be reached now (see [`Loaded::store_problems`]).
    pub store_problems: Vec<Problem>,
}

/// Resolves and loads every enabled row and finds what keeps the profile from running: the one
/// path runs, `config check` and `plugin add` take, so they cannot disagree.
pub fn check(profile: &Profile, composition: &Composition, counters: &Stores) -> Checked {
    let mut resolution = resolve(profile, composition);
    let Loaded { plugins, problems: load_problems, store_problems } = load_plugins(&resolution.plugins, true, counters);
    let named_routes = route_problems(&plugins, &resolution.route_names);
    let mut problems: Vec<Problem> = std::mem::take(&mut resolution.unresolved)
        .into_iter()
        .chain(std::mem::take(&mut resolution.problems))
        .chain(load_problems)
        .chain(named_routes)
        .collect();
    if resolution.agent.is_none() && composition.enabled_ids_of("agent").is_empty() {
        problems.push(Problem::general("no enabled agent row: the base bundle dsh-base inserts one (id \"agent\")"));
    }
    Checked { resolution, plugins, problems, store_problems }
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

/// What to name in a message about the config key at `path` (`maxSteps`, `breaker.failures`) of
/// row `row_id`.
fn layer_of_key<'a>(composition: &'a Composition, row_id: &str, path: &str) -> &'a str {
    let key = path.split(['.', '[']).next().unwrap_or_default();
    composition.key_layer(row_id, key).unwrap_or("cordis.yml")
}

/// Resolves every enabled row of `composition`: built-in configs are validated here, plugin rows
/// are matched to their libraries (not opened).
pub fn resolve(profile: &Profile, composition: &Composition) -> Resolution {
    let mut resolution = Resolution::default();
    let mut agents = Vec::new();
    let mut routes: Vec<(String, String)> = Vec::new();
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for (position, (row, origin)) in composition.enabled_rows_with_origin().into_iter().enumerate() {
        if let Some(config) = row.get("config") {
            dsh_session::redact::learn_inline(config);
        }
        let Some((row_id, package)) = identified(composition, (row, origin), position, &mut seen, &mut resolution)
        else {
            continue;
        };
        let config = row.get("config").cloned().unwrap_or(Value::Null);
        let resolved = resolve_row(profile, composition, (row_id, package), config, &mut resolution);
        match resolved {
            Some(Resolved::Agent(agent)) => agents.push(agent),
            Some(Resolved::Route(route)) => routes.push((route, row_id.to_owned())),
            None => {}
        }
    }
    check_routes(composition, &mut resolution, agents, &routes);
    resolution.route_names = routes.into_iter().map(|(route, _)| route).collect();
    resolution
}

/// What a row adds to the checks made once every row is read.
enum Resolved {
    Agent(AgentConfig),
    /// A provider row serving this route.
    Route(String),
}

/// The row's id and package name, once it has both and its id is not taken; else a problem.
fn identified<'a>(
    composition: &Composition,
    (row, origin): (&'a serde_json::Map<String, Value>, &'a str),
    position: usize,
    seen: &mut HashMap<&'a str, &'a str>,
    resolution: &mut Resolution,
) -> Option<(&'a str, &'a str)> {
    let Some(row_id) = row.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) else {
        resolution.problems.push(Problem::general(format!("enabled row {} has no id", position + 1)));
        return None;
    };
    if let Some(first) = seen.insert(row_id, origin) {
        let message = format!(
            "another enabled row has this id (inserted by {first}); row ids must be unique: give one of them \
             another id, or disable it"
        );
        resolution.problems.push(Problem::row(Some(origin), row_id, message));
        return None;
    }
    let Some(package) = row.get("name").and_then(Value::as_str).filter(|name| !name.is_empty()) else {
        let layer = layer_of(composition, row_id);
        let message = "the row has no name (the package or service that serves it)";
        resolution.problems.push(Problem::row(Some(layer), row_id, message));
        return None;
    };
    Some((row_id, package))
}

/// One identified row: a built-in row's config parsed into `resolution` (its problems too), a
/// plugin row matched to its library.
fn resolve_row(
    profile: &Profile,
    composition: &Composition,
    (row_id, package): (&str, &str),
    config: Value,
    resolution: &mut Resolution,
) -> Option<Resolved> {
    let mut report = |errors: Vec<ConfigError>| {
        let problem =
            |error: &ConfigError| Problem::config(Some(layer_of_key(composition, row_id, &error.path)), row_id, error);
        resolution.problems.extend(errors.iter().map(problem));
    };
    match catalog::resolve_row_package(profile, row_id, package) {
        Ok(RowPackage::BuiltIn("agent")) => {
            return parse_agent(row_id, &config).map_err(report).ok().map(Resolved::Agent)
        }
        Ok(RowPackage::BuiltIn("mcp")) => match parse_mcp(row_id, &config) {
            Ok(server) => resolution.servers.push(server),
            Err(errors) => report(errors),
        },
        Ok(RowPackage::BuiltIn(service)) => {
            let route = config.get("provider").and_then(Value::as_str).map(|route| Resolved::Route(route.to_owned()));
            let parsed =
                if service == "llm-mock" { parse_mock(row_id, &config) } else { parse_openai(row_id, &config) };
            match parsed {
                Ok(provider) => resolution.providers.push(provider),
                Err(errors) => report(errors),
            }
            return route;
        }
        Ok(RowPackage::Library { package, path, installed_sha256 }) => resolution.plugins.push(PluginRow {
            row_id: row_id.to_owned(),
            package,
            library: path,
            config,
            config_layer: layer_of(composition, row_id).to_owned(),
            profile: profile.name.clone(),
            installed_sha256,
        }),
        Err(err) => resolution.unresolved.push(Problem::row(None, row_id, err.to_string())),
    }
    None
}

/// Every route a row with the `agent/route` capability names under `routes` must be served by
/// an enabled provider row (the plugin itself checks the list's shape).
pub fn route_problems(loaded: &[LoadedPlugin], route_names: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for plugin in loaded.iter().filter(|plugin| plugin.library.manifest.hooks.contains(Hooks::ROUTES)) {
        let Some(Value::Array(named)) = plugin.row.config.get(ROUTES_KEY) else { continue };
        for (index, route) in named.iter().enumerate() {
            let Some(route) = route.as_str().filter(|route| !route_names.iter().any(|name| name == route)) else {
                continue;
            };
            let mut known: Vec<&str> = route_names.iter().map(String::as_str).collect();
            known.sort();
            let error = ConfigError::new(
                format!("{ROUTES_KEY}[{index}]"),
                format!(
                    "no enabled provider row serves route \"{route}\" (routes: {})",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            );
            let hint = format!(
                "a provider row with `provider: {route}` serves it, e.g. `- insert: [{{id: llm-{route}, name: llm-openai, \
                 config: {{provider: {route}, baseUrl: URL, model: MODEL, apiKeyEnv: VARIABLE}}}}]` in the profile's \
                 cordis.patch.yml; or take it out of `{ROUTES_KEY}`"
            );
            problems.push(
                Problem::config(Some(&plugin.row.config_layer), &plugin.row.row_id, &error).with_hint(Some(hint)),
            );
        }
    }
    problems
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
            resolution.problems.push(Problem::config(
                Some(layer),
                row_id,
                &ConfigError::new("provider", format!("route \"{route}\" is already served by row \"{first}\"")),
            ));
        }
    }
    if agents.len() > 1 {
        let ids: Vec<&str> = agents.iter().map(|agent| agent.row_id.as_str()).collect();
        resolution
            .problems
            .push(Problem::general(format!("several enabled agent rows ({}); disable all but one", ids.join(", "))));
    }
    let agent = agents.drain(..).next();
    if let Some(agent) = &agent {
        if !served.contains_key(agent.provider.as_str()) {
            let layer = layer_of_key(composition, &agent.row_id, "provider");
            let mut routes: Vec<&str> = served.keys().copied().collect();
            routes.sort();
            resolution.problems.push(Problem::config(
                Some(layer),
                &agent.row_id,
                &ConfigError::new(
                    "provider",
                    format!(
                        "no enabled provider row serves route \"{}\" (routes: {})",
                        agent.provider,
                        if routes.is_empty() { "none".to_owned() } else { routes.join(", ") }
                    ),
                ),
            ));
        }
    }
    resolution.agent = agent;
}

/// What loading the plugin rows came to.
pub struct Loaded {
    pub plugins: Vec<LoadedPlugin>,
    pub problems: Vec<Problem>,
    /// Counter stores that cannot be reached now: a problem for `check`; a run goes on, each row
    /// failing open or closed as its config says.
    pub store_problems: Vec<Problem>,
}

/// Opens the library of every plugin row (each file once) and, with `instantiate`, builds each
/// row's instance from its config, with the counter store its config names (`store`).
pub fn load_plugins(plugins: &[PluginRow], instantiate: bool, counters: &Stores) -> Loaded {
    let mut libraries: HashMap<PathBuf, PluginLibrary> = HashMap::new();
    let mut loaded = Vec::new();
    let mut problems = Vec::new();
    let mut store_problems = Vec::new();
    for row in plugins {
        let library = match libraries.get(&row.library) {
            Some(library) => library.clone(),
            None => {
                let opened = match &row.installed_sha256 {
                    Some(recorded) => PluginLibrary::load_verified(&row.library, recorded),
                    None => PluginLibrary::load(&row.library).map_err(|err| err.to_string()),
                };
                match opened {
                    Ok(library) => {
                        libraries.insert(row.library.clone(), library.clone());
                        library
                    }
                    Err(message) => {
                        problems.push(Problem::row(None, &row.row_id, message).with_hint(Some(way_out(row))));
                        continue;
                    }
                }
            }
        };
        if library.manifest.name.as_str() != row.package {
            problems.push(Problem::row(
                None,
                &row.row_id,
                format!(
                    "library {} is plugin \"{}\", not \"{}\"",
                    row.library.display(),
                    library.manifest.name,
                    row.package
                ),
            ));
            continue;
        }
        let instance = if instantiate {
            match instantiate_row(row, &library, counters) {
                Ok((instance, unreachable)) => {
                    store_problems.extend(unreachable);
                    Some(instance)
                }
                Err(row_problems) => {
                    problems.extend(row_problems);
                    continue;
                }
            }
        } else {
            None
        };
        loaded.push(LoadedPlugin { row: row.clone(), library, instance });
    }
    Loaded { plugins: loaded, problems, store_problems }
}

/// A row's instance, with its counter store when its manifest asks for counters (and, then, a
/// problem when the store cannot be reached now); or every problem of its config.
fn instantiate_row(
    row: &PluginRow,
    library: &PluginLibrary,
    counters: &Stores,
) -> Result<(RowInstance, Option<Problem>), Vec<Problem>> {
    let config_problem = |error: &ConfigError| Problem::config(Some(&row.config_layer), &row.row_id, error);
    let instance = match library.instantiate(&row.row_id, &row.config) {
        Ok(instance) => instance,
        Err(InstantiateFailure::Config(errors)) => {
            return Err(errors
                .iter()
                .map(|error| config_problem(error).with_hint(migration::config_hint(&row.package, error.path.as_str())))
                .collect())
        }
        Err(InstantiateFailure::Failed(message)) => {
            return Err(vec![Problem::row(Some(&row.config_layer), &row.row_id, message)])
        }
    };
    if !library.manifest.hooks.contains(Hooks::COUNTERS) {
        return Ok((instance, None));
    }
    let spec = StoreSpec::parse(row.config.get(COUNTER_STORE_KEY))
        .map_err(|why| vec![config_problem(&ConfigError::new(COUNTER_STORE_KEY, why))])?;
    match counters.open(&spec) {
        Ok(store) => Ok((instance.with_store(store), None)),
        Err((store, why)) => {
            let unreachable =
                ConfigError::new(COUNTER_STORE_KEY, format!("the counter store cannot be reached: {why}"));
            Ok((instance.with_store(store), Some(config_problem(&unreachable))))
        }
    }
}

/// Checks that an installed library is the one `plugin add` installed.
/// What a user can do about a row whose library is refused.
fn way_out(row: &PluginRow) -> String {
    let disable = format!(
        "or disable the row with `- {{id: {}, disabled: true}}` in $DSH_HOME/profiles/{}/cordis.patch.yml",
        row.row_id, row.profile
    );
    match row.installed_sha256 {
        Some(_) => format!(
            "install the package again with `dsh plugin --profile {profile} add <its crate or package directory>`, \
             remove it with `dsh plugin --profile {profile} remove {package}`, {disable}",
            profile = row.profile,
            package = row.package
        ),
        None => format!("it ships with dsh: reinstall dsh (./install.sh PREFIX), {disable}"),
    }
}

/// The route of every provider row, with the mock servers of `llm-mock` routes started.
async fn open_routes(
    home: &Home,
    providers: Vec<ProviderConfig>,
    verbose_mock: bool,
) -> Result<(HashMap<String, Route>, Vec<MockServer>), Vec<Problem>> {
    let mut routes = HashMap::new();
    let mut mock_servers = Vec::new();
    for provider in providers {
        let base_url = match &provider.endpoint {
            Endpoint::Url(url) => url.clone(),
            Endpoint::Mock(script) => {
                let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
                let log = MockLog { stderr: verbose_mock, record: None };
                let server = MockServer::start(listen, script.clone(), log).await.map_err(|err| {
                    vec![Problem::row(None, &provider.row_id, format!("cannot start the mock server: {err}"))]
                })?;
                let url = server.base_url();
                mock_servers.push(server);
                url
            }
        };
        let mut adapter = OpenAiAdapter::new(&provider, &base_url).map_err(|err| {
            vec![Problem::row(None, &provider.row_id, format!("cannot build the HTTP client: {err}"))]
        })?;
        if provider.wire.attribution {
            let home = home.clone();
            adapter = adapter.with_user_id(Arc::new(move || match home.anonymous_user_id() {
                Ok(id) => Some(id),
                Err(err) => {
                    tracing::warn!("cannot keep the anonymous user id in the dsh home: {err}");
                    None
                }
            }));
        }
        let endpoint_host =
            reqwest::Url::parse(&base_url).ok().and_then(|url| url.host_str().map(str::to_owned)).unwrap_or_default();
        let route = Route {
            endpoint_host,
            provider: provider.provider.clone(),
            model: provider.model.clone(),
            client: Box::new(adapter),
            policy: provider.retry_policy,
            wire: provider.wire,
            context_window: provider.context_window,
        };
        routes.insert(provider.provider, route);
    }
    Ok((routes, mock_servers))
}

/// A profile's running parts.
pub struct Assembly {
    pub agent: AgentConfig,
    pub routes: HashMap<String, Route>,
    /// `agent/request-error` listeners, outermost first.
    pub listeners: Vec<Arc<RowInstance>>,
    /// `agent/session-start` listeners, in row order.
    pub session_start: Vec<Arc<RowInstance>>,
    /// `agent/request-success` listeners, in row order.
    pub request_success: Vec<Arc<RowInstance>>,
    /// `agent/route` rows, in row order: the first that names a route chooses where a turn starts.
    pub route_rows: Vec<Arc<RowInstance>>,
    /// Rows with a session checker.
    pub checkers: Vec<Arc<RowInstance>>,
    /// In-process mock servers serving `llm-mock` routes.
    pub mock_servers: Vec<MockServer>,
    /// The MCP servers' tools the agent offers.
    pub tools: Arc<Tools>,
    /// The counter stores the rows were given; a rebuild of the profile shares them.
    pub counters: Stores,
    /// Whether a request-error or request-success call may wait on a counter store's I/O.
    pub may_wait: bool,
}

impl Assembly {
    /// One line saying what changed since `before` (a `chat` swap): listeners that now handle request errors, rows that
    /// were disabled or removed, rows reconfigured.
    pub fn change_since(&self, before: &Assembly, rows: &[Value]) -> String {
        let ids = |assembly: &Assembly| -> Vec<String> {
            assembly.listeners.iter().map(|listener| listener.row_id().to_owned()).collect()
        };
        let (old, new) = (ids(before), ids(self));
        let row_state = |id: &str| {
            rows.iter()
                .find(|row| row.get("id").and_then(Value::as_str) == Some(id))
                .map(|row| row.get("disabled").is_some_and(crate::profile::patch::truthy))
        };
        let mut changes: Vec<String> =
            new.iter().filter(|id| !old.contains(id)).map(|id| format!("{id} now handles request errors")).collect();
        changes.extend(old.iter().filter(|id| !new.contains(id)).map(|id| match row_state(id) {
            Some(true) => format!("{id} disabled"),
            Some(false) => format!("{id} no longer handles request errors"),
            None => format!("{id} removed"),
        }));
        if changes.is_empty() && old != new {
            changes.push(format!("request-error order now {}", new.join(", ")));
        }
        if changes.is_empty() {
            changes.push("rows reconfigured".to_owned());
        }
        changes.join("; ")
    }

    /// The model the agent's turns ask for: the agent row's, else its route's.
    pub fn model(&self) -> &str {
        match &self.agent.model {
            Some(model) => model,
            None => self.routes.get(&self.agent.provider).map_or("", |route| route.model.as_str()),
        }
    }

    /// Resolves, loads and instantiates every enabled row; starts the mock servers of `llm-mock`
    /// routes. `Err` lists every problem.
    pub async fn build(
        home: &Home,
        profile: &Profile,
        composition: &Composition,
        verbose_mock: bool,
        counters: &Stores,
    ) -> Result<Assembly, Vec<Problem>> {
        // An unreachable counter store is `config check`'s problem; in a turn the row that uses
        // the store says what it does without it, once, when it matters.
        let Checked { resolution, plugins: loaded, problems, store_problems: _ } =
            check(profile, composition, counters);
        let Resolution { agent: Some(agent), providers, servers, .. } = resolution else { return Err(problems) };
        if !problems.is_empty() {
            return Err(problems);
        }
        let (routes, mock_servers) = open_routes(home, providers, verbose_mock).await?;
        let (tools, tool_problems) = Tools::start(&servers).await;
        if !tool_problems.is_empty() {
            return Err(tool_problems);
        }
        let mut assembly = Assembly {
            agent,
            routes,
            listeners: Vec::new(),
            session_start: Vec::new(),
            request_success: Vec::new(),
            route_rows: Vec::new(),
            checkers: Vec::new(),
            mock_servers,
            tools: Arc::new(tools),
            counters: counters.clone(),
            may_wait: false,
        };
        for plugin in loaded {
            if let Some(instance) = plugin.instance {
                assembly.place(instance);
            }
        }
        Ok(assembly)
    }

    /// Files a row's instance under each hook its manifest names.
    fn place(&mut self, instance: RowInstance) {
        let hooks = instance.hooks();
        self.may_wait |= instance.may_wait();
        let instance = Arc::new(instance);
        if hooks.contains(Hooks::REQUEST_ERROR) {
            self.listeners.push(Arc::clone(&instance));
        }
        if hooks.contains(Hooks::SESSION_START) {
            self.session_start.push(Arc::clone(&instance));
        }
        if hooks.contains(Hooks::REQUEST_SUCCESS) {
            self.request_success.push(Arc::clone(&instance));
        }
        if hooks.contains(Hooks::ROUTES) {
            self.route_rows.push(Arc::clone(&instance));
        }
        if hooks.contains(Hooks::CHECKER) {
            self.checkers.push(instance);
        }
    }

    /// Opens every checker row's checker for a session with this header.
    pub fn open_checkers(&self, header: &str) -> Vec<RowChecker> {
        open_checkers(&self.checkers, header)
    }
}

/// The bundled `llm-retry-invariant`, the checker `verify`, `repair`, `import` and `replay` hold
/// every v0 log to (see [`bundled_checkers`]).
pub fn bundled_invariant() -> anyhow::Result<[Arc<RowInstance>; 1]> {
    let library_path = catalog::find_bundled_library("llm-retry-invariant")?;
    let library = PluginLibrary::load(&library_path)?;
    let invariant = library
        .instantiate("llm-retry-invariant", &serde_json::Value::Null)
        .map_err(|err| anyhow::anyhow!("llm-retry-invariant: {err:?}"))?;
    Ok([Arc::new(invariant)])
}

/// The bundled checkers a log with this header is held to: `llm-retry-invariant` for a v0 log;
/// none for a v4 log, whose own rules check its retries as DeepSeek Harness 0.2's reader does.
pub fn bundled_checkers(bundled: &[Arc<RowInstance>], header: &str) -> Vec<RowChecker> {
    match dsh_session::format::Format::of_header(header) {
        Ok(dsh_session::format::Format::V0) => open_checkers(bundled, header),
        _ => Vec::new(),
    }
}

/// Opens the checker of every row in `rows` for a session with this header; a row that cannot
/// open one is left out with a warning.
pub fn open_checkers(rows: &[Arc<RowInstance>], header: &str) -> Vec<RowChecker> {
    rows.iter()
        .filter_map(|row| match row.open_checker(header) {
            Ok(Some(checker)) => Some(RowChecker { row_id: row.row_id().to_owned(), checker }),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!("row \"{}\": cannot open its checker: {}", row.row_id(), err.message);
                None
            }
        })
        .collect()
}
