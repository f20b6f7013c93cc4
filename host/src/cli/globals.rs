//! What every command shares: the global options, composing a profile, the runtime.

use std::path::PathBuf;

use crate::profile::Home;

/// Options every command shares.
#[derive(Debug, Clone)]
pub struct Globals {
    pub(crate) home: Option<PathBuf>,
    pub(crate) verbose: u8,
}

impl Globals {
    pub fn home(&self) -> anyhow::Result<Home> {
        Home::resolve(self.home.as_deref())
    }

    pub fn verbose(&self) -> bool {
        self.verbose > 0
    }
}

/// Composes the profile and prints the composition warnings (`dsh: [<layer>] <message>`).
pub(crate) fn compose(
    home: &Home,
    profile_name: &str,
    patches: &[PathBuf],
    scope: crate::profile::LayerScope,
) -> anyhow::Result<(crate::profile::Profile, crate::profile::patch::Composition)> {
    let profile = crate::profile::Profile::open(home, profile_name)?;
    let composition = profile.compose(home, patches, scope)?;
    for warning in &composition.warnings {
        say!("dsh: {warning}");
    }
    Ok((profile, composition))
}

/// The runtime every command that runs turns or servers uses.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// Starts the MCP servers of `servers` with a live line, on a runtime of its own. Ctrl-C ends the
/// wait (exit 130): the servers are dropped, and their guards kill them as dsh goes.
pub(crate) fn start_servers(
    composition: &crate::profile::patch::Composition,
    servers: &[crate::tools::config::McpConfig],
) -> Result<(crate::tools::Tools, Vec<crate::problem::Problem>), super::exit::Exit> {
    let starting = super::live::servers_starting(&composition.enabled_ids_of("mcp"));
    let started = runtime()?.block_on(async {
        tokio::select! {
            started = crate::tools::Tools::start(servers) => Some(started),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    super::live::clear(starting);
    started.ok_or(super::exit::Exit::reported(super::exit::EXIT_INTERRUPTED))
}

/// Takes profile `name`'s writer lock, saying so while another process holds it.
pub(crate) fn lock_profile(home: &crate::profile::Home, name: &str) -> anyhow::Result<dsh_session::lock::WriterLock> {
    Ok(crate::profile::Profile::lock(home, name, |busy| say!("dsh: waiting: {busy}"))?)
}
