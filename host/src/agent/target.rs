//! What a session runs with: the profile, the extra layers and the overrides a front end asks
//! for, reconciled with what a continued session recorded when it was created.

use std::path::PathBuf;

use super::config::apply_overrides;
use crate::profile::patch::Composition;
use crate::profile::{Home, LayerScope, Profile};
use dsh_session::meta::RunOverrides;
use dsh_session::store::{LogRef, SessionStore, StoreError};

/// The profile commands and front ends use when none is named.
pub const DEFAULT_PROFILE: &str = "web";

/// The session to continue (when there is one), the profile that runs it and the extra layers it
/// runs with.
pub struct Resolved {
    /// Where the home keeps its sessions.
    pub store: SessionStore,
    pub existing: Option<LogRef>,
    pub profile: String,
    pub patches: Vec<PathBuf>,
    /// `--provider`, `--model` and `--system`: given, else the session's own.
    pub overrides: RunOverrides,
    /// Those asked for now.
    pub typed: RunOverrides,
    /// None of profile, layers, provider or model was asked for: a continued session keeps its
    /// recorded route.
    pub as_recorded: bool,
    /// What differs from what the session recorded, for the user.
    pub notes: Vec<String>,
}

impl Resolved {
    /// The profile composed with the layers as they are on disk now, its agent row set to the
    /// overrides in effect and those asked for.
    pub fn compose(&self, home: &Home) -> anyhow::Result<(Profile, Composition)> {
        let profile = Profile::open(home, &self.profile)?;
        let mut composition = profile.compose(home, &self.patches, LayerScope::All)?;
        apply_overrides(&mut composition, &self.overrides, &self.typed);
        Ok((profile, composition))
    }
}

/// What a session runs with: the profile, layers and each override when asked for (noted when
/// the session was created with others), else what the session recorded, else profile
/// [`DEFAULT_PROFILE`], no layers and no overrides.
pub fn resolve_for(
    store: SessionStore,
    existing: Option<LogRef>,
    explicit_profile: Option<&str>,
    explicit_patches: &[PathBuf],
    explicit_overrides: &RunOverrides,
) -> Result<Resolved, StoreError> {
    let meta = existing.as_ref().map(LogRef::meta).transpose()?.unwrap_or_default();
    let mut notes = Vec::new();
    let profile = profile_for(explicit_profile, meta.profile.clone(), &mut notes);
    let patches = match &existing {
        Some(log) => {
            let (patches, patch_notes) = log.patches_for(&meta, explicit_patches);
            notes.extend(patch_notes);
            patches
        }
        None => explicit_patches.to_vec(),
    };
    let (overrides, note) = meta.overrides_for(explicit_overrides);
    notes.extend(note.filter(|_| existing.is_some()));
    let as_recorded = explicit_profile.is_none()
        && explicit_patches.is_empty()
        && explicit_overrides.provider.is_none()
        && explicit_overrides.model.is_none();
    let typed = explicit_overrides.clone();
    Ok(Resolved { store, existing, profile, patches, overrides, typed, as_recorded, notes })
}

fn profile_for(explicit: Option<&str>, remembered: Option<String>, notes: &mut Vec<String>) -> String {
    match (explicit, remembered) {
        (Some(explicit), Some(remembered)) if explicit != remembered => {
            notes.push(format!(
                "the session was created with profile {remembered}; running it with profile {explicit} as asked"
            ));
            explicit.to_owned()
        }
        (Some(explicit), _) => explicit.to_owned(),
        (None, Some(remembered)) => remembered,
        (None, None) => DEFAULT_PROFILE.to_owned(),
    }
}
