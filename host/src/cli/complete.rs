//! Shell completion: clap's completion engine, asked by the shell through `COMPLETE=SHELL dsh`,
//! with the values clap cannot know — the profiles and the session ids of the home.

use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use clap_complete::env::Shells;

use crate::profile::{Home, Profile};
use dsh_session::store::SessionStore;

/// The variable the shell sets when it asks `dsh` for completions.
pub(super) const COMPLETE_ENV: &str = "COMPLETE";

/// The script a shell sources once to complete `dsh` (it calls `dsh` back for every completion).
pub fn registration(shell: clap_complete::Shell) -> anyhow::Result<Vec<u8>> {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer = shells.completer(&name).ok_or_else(|| anyhow::anyhow!("dsh cannot complete for {name}"))?;
    let mut script = Vec::new();
    completer.write_registration(COMPLETE_ENV, "dsh", "dsh", "dsh", &mut script)?;
    Ok(script)
}

/// `--profile`'s values: the profiles of the home (`$DSH_HOME` or `~/.dsh`) and the templates.
pub fn profiles() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        let Ok(home) = Home::resolve(None) else { return Vec::new() };
        Profile::names(&home).into_iter().map(CompletionCandidate::new).collect()
    })
}

/// A session argument's values: the session ids of the home.
pub fn sessions() -> ArgValueCandidates {
    ArgValueCandidates::new(|| {
        let Ok(home) = Home::resolve(None) else { return Vec::new() };
        let Ok(store) = SessionStore::for_home(home.root()) else { return Vec::new() };
        let mut ids = store.ids();
        ids.sort();
        ids.into_iter().map(CompletionCandidate::new).collect()
    })
}
