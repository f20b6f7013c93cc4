//! Profiles as wholes: creating one from a template or from the base bundle alone, copying one
//! (its layers, manifest and installed libraries) and removing one — each under the profile's
//! writer lock, so a `plugin add` running at the same time waits, and never half done: a copy is
//! built beside its target and renamed into place, a removal renames the folder away first.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::{bundled, has_manifest, template_bundles, Home, Profile, DEFAULT_BUNDLES};
use crate::NotFound;
use dsh_session::lock::WriterLock;

/// Where a new profile's bundle list comes from.
pub enum Source<'a> {
    /// The base bundle alone (a profile to add MCP servers or packages to).
    Base,
    /// A shipped template (`web`, `demo`).
    Template(&'static bundled::ProfileTemplate),
    /// Another profile of the home, copied whole.
    Profile(&'a str),
}

impl<'a> Source<'a> {
    /// `--from NAME`: a profile of the home when there is one, else a shipped template.
    pub fn named(home: &Home, name: &'a str) -> anyhow::Result<Source<'a>> {
        if has_manifest(&Profile::dir_of(home, name)?) {
            return Ok(Source::Profile(name));
        }
        match bundled::template(name) {
            Some(template) => Ok(Source::Template(template)),
            None => Err(NotFound(format!("there is no profile or template named {name:?} to start from")).into()),
        }
    }
}

/// Creates profile `name` from the base bundle or a template, under `_lock` (the new
/// profile's). `Err` when it exists; a [`Source::Profile`] is a [`copy`].
pub fn create(home: &Home, name: &str, source: Source<'_>, _lock: &WriterLock) -> anyhow::Result<Profile> {
    let dir = Profile::dir_of(home, name)?;
    refuse_existing(home, name, &dir)?;
    let bundles = match source {
        Source::Base => DEFAULT_BUNDLES.iter().map(|bundle| (*bundle).to_owned()).collect(),
        Source::Template(template) => template_bundles(template),
        Source::Profile(from) => bail!("profile {name} would be a copy of {from}: that is `dsh profile copy`"),
    };
    Profile::create(&dir, &bundles)?;
    Profile::load(home, name, dir)
}

/// The writer locks a copy holds: the new profile's and the one it reads.
pub struct CopyLocks {
    pub to: WriterLock,
    pub from: WriterLock,
}

/// Copies profile `from` to the new profile `to`, both locked, libraries included: the hashes
/// its manifest recorded still match.
pub fn copy(home: &Home, from: &str, to: &str, _locks: &CopyLocks) -> anyhow::Result<Profile> {
    let source = Profile::existing(home, from)?;
    let dir = Profile::dir_of(home, to)?;
    refuse_existing(home, to, &dir)?;
    let staging = staging_dir(&dir, "copying");
    if let Err(err) = copy_tree(&source.dir, &staging) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(err.context(format!("cannot copy profile {from}")));
    }
    std::fs::rename(&staging, &dir).with_context(|| format!("cannot create {}", home.display(&dir)))?;
    Profile::load(home, to, dir)
}

/// Removes profile `name` (whose `lock` is held): its folder is renamed away, then deleted.
/// Sessions created with it keep their logs. Returns the folder it was in.
pub fn remove(home: &Home, name: &str, _lock: &WriterLock) -> anyhow::Result<PathBuf> {
    let profile = Profile::existing(home, name)?;
    let removing = staging_dir(&profile.dir, "removing");
    std::fs::rename(&profile.dir, &removing)
        .with_context(|| format!("cannot remove {}", home.display(&profile.dir)))?;
    std::fs::remove_dir_all(&removing).with_context(|| format!("cannot delete {}", removing.display()))?;
    Ok(profile.dir)
}

fn refuse_existing(home: &Home, name: &str, dir: &Path) -> anyhow::Result<()> {
    if dir.symlink_metadata().is_ok() {
        bail!("profile {name} exists already ({}); dsh never overwrites one", home.display(dir));
    }
    Ok(())
}

/// A hidden folder beside `dir`, for a copy being built or a folder being removed.
fn staging_dir(dir: &Path, doing: &str) -> PathBuf {
    let name = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    dir.with_file_name(format!(".{doing}-{name}-{}", std::process::id()))
}

/// Copies the folder `from` to `to` (which must not exist): folders and regular files only; a
/// link or anything else in a profile is refused, naming it.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target).with_context(|| format!("cannot copy {}", source.display()))?;
        } else {
            bail!("{} is not a regular file or folder; a profile holding it is not copied", source.display());
        }
    }
    Ok(())
}
