//! The agent: its row config, the assembly of a composed profile into running parts (provider
//! routes, plugin rows sorted by hook), cancellation, and the turn loop ([`turn`]).

pub mod config;
pub mod turn;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dsh_abi::{Hooks, RetryPolicy};
use tokio::sync::Notify;

use crate::llm::config::Endpoint;
use crate::llm::mock::{MockLog, MockServer};
use crate::llm::openai::OpenAiAdapter;
use crate::llm::ModelClient;
use crate::plugin::rows::{self, Resolution};
use crate::plugin::RowInstance;
use crate::profile::patch::Composition;
use crate::profile::Profile;
use crate::session::log::LogChecker;
use crate::waterfall::Listener;
use config::AgentConfig;

/// One provider route, ready to send.
pub struct Route {
    pub provider: String,
    pub model: String,
    pub client: Box<dyn ModelClient>,
    pub policy: RetryPolicy,
}

/// Cancellation of the current turn (Ctrl-C), visible to plugins through the host context.
#[derive(Clone, Default)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Cancel {
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    pub fn flag(&self) -> &AtomicBool {
        &self.flag
    }

    /// Resolves once the turn is cancelled (at once if it already is).
    pub async fn cancelled(&self) {
        let notified = self.notify.notified();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }
}

/// A profile's running parts.
pub struct Assembly {
    pub agent: AgentConfig,
    pub routes: HashMap<String, Route>,
    /// `agent/request-error` listeners, outermost first.
    pub listeners: Vec<Arc<RowInstance>>,
    /// `agent/session-start` listeners, in row order.
    pub session_start: Vec<Arc<RowInstance>>,
    /// Rows with a session checker.
    pub checkers: Vec<Arc<RowInstance>>,
    /// In-process mock servers serving `llm-mock` routes.
    pub mock_servers: Vec<MockServer>,
}

impl Assembly {
    /// Resolves, loads and instantiates every enabled row; starts the mock servers of `llm-mock`
    /// routes. `Err` lists every problem.
    pub async fn build(
        profile: &Profile,
        composition: &Composition,
        verbose_mock: bool,
    ) -> Result<Assembly, Vec<String>> {
        let Resolution { agent, providers, plugins, unresolved, problems } = rows::resolve(profile, composition);
        let (loaded, load_problems) = rows::load_plugins(&plugins, true);
        let mut problems: Vec<String> = unresolved.into_iter().chain(problems).chain(load_problems).collect();
        let Some(agent) = agent else {
            problems.push("no enabled agent row: the base bundle dsh-base inserts one (id \"agent\")".to_owned());
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut routes = HashMap::new();
        let mut mock_servers = Vec::new();
        for provider in providers {
            let base_url = match &provider.endpoint {
                Endpoint::Url(url) => url.clone(),
                Endpoint::Mock(script) => {
                    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
                    let log = MockLog { stderr: verbose_mock, record: None };
                    let server = MockServer::start(listen, script.clone(), log).await.map_err(|err| {
                        vec![format!("row \"{}\": cannot start the mock server: {err}", provider.row_id)]
                    })?;
                    let url = server.base_url();
                    mock_servers.push(server);
                    url
                }
            };
            let adapter = OpenAiAdapter::new(&provider, &base_url)
                .map_err(|err| vec![format!("row \"{}\": cannot build the HTTP client: {err}", provider.row_id)])?;
            let route = Route {
                provider: provider.provider.clone(),
                model: provider.model.clone(),
                client: Box::new(adapter),
                policy: provider.retry_policy,
            };
            routes.insert(provider.provider, route);
        }
        let mut assembly = Assembly {
            agent,
            routes,
            listeners: Vec::new(),
            session_start: Vec::new(),
            checkers: Vec::new(),
            mock_servers,
        };
        for plugin in loaded {
            let Some(instance) = plugin.instance else { continue };
            let hooks = instance.hooks();
            let instance = Arc::new(instance);
            if hooks.contains(Hooks::REQUEST_ERROR) {
                assembly.listeners.push(Arc::clone(&instance));
            }
            if hooks.contains(Hooks::SESSION_START) {
                assembly.session_start.push(Arc::clone(&instance));
            }
            if hooks.contains(Hooks::CHECKER) {
                assembly.checkers.push(instance);
            }
        }
        Ok(assembly)
    }

    /// Opens every checker row's checker for a session with this header.
    pub fn open_checkers(&self, header: &str) -> Vec<LogChecker> {
        self.checkers
            .iter()
            .filter_map(|row| match row.open_checker(header) {
                Ok(Some(checker)) => Some(LogChecker { row_id: row.row_id().to_owned(), checker }),
                Ok(None) => None,
                Err(err) => {
                    tracing::warn!("row \"{}\": cannot open its checker: {}", row.row_id(), err.message);
                    None
                }
            })
            .collect()
    }
}
