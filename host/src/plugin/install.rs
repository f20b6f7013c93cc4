//! Installing plugin packages into a profile (`dsh plugin add`) and removing them (`remove`).
//!
//! A package comes from a bundled name, a plugin crate directory (built with `cargo build
//! --release`, the artifact path read from cargo's JSON messages) or a prebuilt package directory
//! (`dsh-plugin.toml` + library). Its library is checked in a child process, then staged with its
//! manifest and bundle layer under `plugins/<package>/` (library under a content-hash name, since
//! an already-open path would return the library loaded before), and `profile.yml` is replaced
//! atomically. A failure at any step leaves every profile file as it was. Neither command writes
//! rows into a `cordis.patch.yml`: rows come from bundle layers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::catalog;
use super::inspect::{self, ManifestInfo};
use super::loader::read_library;
use crate::profile::patch::{Layer, MAX_LAYER_BYTES};
use crate::profile::{is_package_name, InstalledPackage, Profile, PACKAGE_NAME_RULE};
use crate::NotFound;
use dsh_session::fsutil;

/// A package's manifest file, `dsh-plugin.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageManifest {
    pub name: String,
    pub version: String,
    /// The library file, relative to the package directory.
    pub library: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<BundleManifest>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleManifest {
    /// The bundle layer, relative to the package directory.
    pub patch: String,
}

/// What is about to be installed.
#[derive(Debug)]
pub struct Candidate {
    pub name: String,
    pub version: String,
    /// `bundled`, `crate:<dir>` or `package:<dir>`.
    pub source: String,
    /// `None` for a layer-only bundle (`dsh-demo`).
    pub library: Option<PathBuf>,
    pub layer: Option<String>,
}

/// What `add` did, for the report.
#[derive(Debug)]
pub struct Installed {
    pub candidate_name: String,
    pub version: String,
    pub library: Option<String>,
    pub bundle_added: bool,
    pub has_layer: bool,
    pub newly_installed: bool,
    /// Whether the profile is different now: adding what is installed, with its library in
    /// place, changes nothing (and writes nothing).
    pub changed: bool,
    pub inserts: Vec<String>,
    pub disables: Vec<String>,
    /// Bundle entries of other installed packages put back (a package with a bundle layer
    /// whose entry was missing).
    pub bundles_restored: Vec<String>,
    /// Bundle entries dropped: packages that declare no bundle layer (any more).
    pub bundles_dropped: Vec<String>,
}

/// Why `spec` names no package: the bundled package it is a typo of, and every bundled package.
fn unknown_package(spec: &str) -> String {
    let bundled: Vec<&str> = crate::bundled::BUNDLED_PACKAGES.iter().map(|package| package.name).collect();
    let typo_of = |name: &&&str| crate::is_typo_of(spec, name) || spec.replace('_', "-") == **name;
    let guess = bundled.iter().find(typo_of).map(|name| format!(" (did you mean \"{name}\"?)")).unwrap_or_default();
    format!(
        "unknown package \"{spec}\"{guess}: it is not bundled with dsh (bundled: {}); or give the path of a plugin \
         crate or package directory",
        bundled.join(", ")
    )
}

/// Turns `add`'s argument into a candidate: a path to a crate or package directory, or a bundled
/// package name.
pub fn candidate(spec: &str) -> anyhow::Result<Candidate> {
    let path = Path::new(spec);
    if path.is_dir() {
        let dir = std::path::absolute(path)?;
        // An entry of either name decides, whatever it is: reading it says when it is no file.
        if dir.join("dsh-plugin.toml").symlink_metadata().is_ok() {
            return package_dir_candidate(&dir);
        }
        if dir.join("Cargo.toml").symlink_metadata().is_ok() {
            return crate_candidate(&dir);
        }
        bail!("{spec} is neither a plugin crate (no Cargo.toml) nor a plugin package (no dsh-plugin.toml)");
    }
    if spec.contains('/') || spec.contains('\\') || spec.starts_with('.') {
        return Err(NotFound(format!("{spec}: no such directory")).into());
    }
    let Some(bundled) = crate::bundled::package(spec) else {
        return Err(NotFound(unknown_package(spec)).into());
    };
    let library = if bundled.has_library { Some(catalog::find_bundled_library(spec)?) } else { None };
    Ok(Candidate {
        name: spec.to_owned(),
        version: bundled.version.to_owned(),
        source: "bundled".to_owned(),
        library,
        layer: bundled.layer.map(str::to_owned),
    })
}

fn package_dir_candidate(dir: &Path) -> anyhow::Result<Candidate> {
    let manifest_path = dir.join("dsh-plugin.toml");
    let text = fsutil::read_text_limited(&manifest_path, fsutil::MAX_SETTINGS_FILE_BYTES, "a package manifest")
        .with_context(|| format!("cannot read {}", manifest_path.display()))?;
    let manifest: PackageManifest =
        toml::from_str(&text).with_context(|| format!("invalid {}", manifest_path.display()))?;
    let layer = manifest.bundle.as_ref().map(|bundle| read_bundle_layer(dir, &bundle.patch)).transpose()?;
    Ok(Candidate {
        name: manifest.name,
        version: manifest.version,
        source: format!("package:{}", dir.display()),
        library: Some(dir.join(&manifest.library)),
        layer,
    })
}

fn read_bundle_layer(dir: &Path, relative: &str) -> anyhow::Result<String> {
    let path = dir.join(relative);
    fsutil::read_text_limited(&path, MAX_LAYER_BYTES, "a layer")
        .with_context(|| format!("cannot read bundle layer {}", path.display()))
}

/// The plugin crate at `dir` as cargo reads it (`cargo metadata`).
fn crate_package(dir: &Path) -> anyhow::Result<cargo_metadata::Package> {
    let manifest_path = dir.join("Cargo.toml");
    let mut command = cargo_metadata::MetadataCommand::new();
    if let Some(cargo) = std::env::var_os("CARGO") {
        command.cargo_path(cargo);
    }
    let metadata = command
        .manifest_path(&manifest_path)
        .no_deps()
        .exec()
        .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", manifest_path.display()))?;
    let wanted = std::fs::canonicalize(&manifest_path)?;
    let package = metadata
        .packages
        .into_iter()
        .find(|package| std::fs::canonicalize(package.manifest_path.as_std_path()).is_ok_and(|found| found == wanted));
    package.with_context(|| {
        format!("{} has no [package]: give the directory of one plugin crate", manifest_path.display())
    })
}

/// The bundle layer a plugin crate declares: `[package.metadata.dsh] bundle = "cordis.patch.yml"`,
/// or the table form `[package.metadata.dsh.bundle] patch = "cordis.patch.yml"` (as in
/// `dsh-plugin.toml`). A `cordis.patch.yml` the crate does not declare is not installed, and
/// said so on stderr.
fn crate_bundle_layer(dir: &Path, package: &cargo_metadata::Package) -> anyhow::Result<Option<String>> {
    let manifest_path = dir.join("Cargo.toml");
    let dsh = package.metadata.get("dsh");
    if let Some(table) = dsh.and_then(Value::as_object) {
        for key in table.keys().filter(|key| *key != "bundle") {
            eprintln!(
                "dsh: warning: {}: [package.metadata.dsh] has no key {key:?} (it takes bundle)",
                manifest_path.display()
            );
        }
    }
    let relative = match dsh.and_then(|dsh| dsh.get("bundle")) {
        None => None,
        Some(Value::String(relative)) => Some(relative.as_str()),
        Some(Value::Object(bundle)) => Some(bundle.get("patch").and_then(Value::as_str).with_context(|| {
            format!("{}: [package.metadata.dsh.bundle] needs patch = \"cordis.patch.yml\"", manifest_path.display())
        })?),
        Some(_) => bail!(
            "{}: [package.metadata.dsh] bundle must be the path of the bundle layer, e.g. bundle = \"cordis.patch.yml\"",
            manifest_path.display()
        ),
    };
    if relative.is_none() && dir.join("cordis.patch.yml").is_file() {
        eprintln!(
            "dsh: warning: {} is not installed: the crate declares no bundle; add [package.metadata.dsh] bundle = \"cordis.patch.yml\" to {}",
            dir.join("cordis.patch.yml").display(),
            manifest_path.display()
        );
    }
    relative.map(|relative| read_bundle_layer(dir, relative)).transpose()
}

fn crate_candidate(dir: &Path) -> anyhow::Result<Candidate> {
    let package = crate_package(dir)?;
    let layer = crate_bundle_layer(dir, &package)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let name = package.name.to_string();
    eprintln!("dsh: building {name} with cargo build --release");
    let output = Command::new(&cargo)
        .args(["build", "--release", "--message-format=json-render-diagnostics", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    if !output.status.success() {
        bail!("cargo build --release of {} failed ({})", dir.display(), output.status);
    }
    let library = cdylib_artifact(&output.stdout, &package.id).with_context(|| {
        format!("cargo built {name} but reported no cdylib artifact: is its crate-type \"cdylib\"?")
    })?;
    let version = package.version.to_string();
    Ok(Candidate { name, version, source: format!("crate:{}", dir.display()), library: Some(library), layer })
}

/// The cdylib cargo built for `package`, from its `compiler-artifact` messages.
fn cdylib_artifact(messages: &[u8], package: &cargo_metadata::PackageId) -> Option<PathBuf> {
    cargo_metadata::Message::parse_stream(messages).filter_map(Result::ok).find_map(|message| {
        let cargo_metadata::Message::CompilerArtifact(artifact) = message else { return None };
        if artifact.package_id != *package || !artifact.target.is_kind(cargo_metadata::TargetKind::CDyLib) {
            return None;
        }
        let library = artifact.filenames.into_iter().find(|file| file.as_str().ends_with(std::env::consts::DLL_SUFFIX));
        library.map(|library| library.into_std_path_buf())
    })
}

/// `libfoo-0123456789abcdef.so`: the library's name with the first 16 hex digits of its hash.
fn content_addressed_name(package: &str, sha256: &str) -> String {
    let plain = catalog::library_file_name(leaf(package));
    let suffix = std::env::consts::DLL_SUFFIX;
    let stem = plain.strip_suffix(suffix).unwrap_or(&plain);
    format!("{stem}-{}{suffix}", &sha256[..16])
}

/// The ids a bundle layer inserts and the ids it disables.
fn layer_effects(name: &str, layer: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let layer = Layer::parse(name, &format!("bundle layer of {name}"), layer)?;
    let mut inserts = Vec::new();
    let mut disables = Vec::new();
    for entry in &layer.entries {
        if let Some(rows) = entry.get("insert").and_then(Value::as_array) {
            inserts.extend(rows.iter().filter_map(|row| row.get("id")?.as_str().map(str::to_owned)));
        } else if entry.get("disabled") == Some(&Value::Bool(true)) {
            disables.extend(entry.get("id").and_then(Value::as_str).map(str::to_owned));
        }
    }
    Ok((inserts, disables))
}

/// Copies the library into a staging folder beside the package's and checks the copy in a child
/// process; the package entry it will have. Nothing is left behind on error.
fn stage_library(
    profile: &Profile,
    candidate: &Candidate,
    library: &Path,
    dsh_executable: &Path,
) -> anyhow::Result<(PathBuf, InstalledPackage)> {
    // Read once: the bytes hashed, the copy inspected and the file installed are the same,
    // whatever happens to the source file meanwhile.
    let bytes = read_library(library).with_context(|| format!("cannot read {}", library.display()))?;
    let sha256 = fsutil::sha256_hex(&bytes);
    let file_name = content_addressed_name(&candidate.name, &sha256);
    let staging = stage_package(profile, candidate, &bytes, &file_name)?;
    let copy = staging.join(&file_name);
    let checked = inspect::inspect_in_child(dsh_executable, &copy)
        .map_err(|err| {
            let message = err.to_string().replace(&copy.display().to_string(), &library.display().to_string());
            anyhow::anyhow!("{message}")
        })
        .and_then(|info| check_manifest(candidate, &info));
    if let Err(err) = checked {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(err);
    }
    let package = InstalledPackage {
        version: candidate.version.clone(),
        source: candidate.source.clone(),
        library: format!("plugins/{}/{file_name}", candidate.name),
        sha256,
    };
    Ok((staging, package))
}

/// Makes `manifest` the profile's: the staged package folder swapped in, then the manifest
/// saved. On error the profile is as it was.
fn commit(
    profile: &mut Profile,
    manifest: crate::profile::ProfileManifest,
    name: &str,
    staged: Option<PathBuf>,
) -> anyhow::Result<()> {
    let previous = std::mem::replace(&mut profile.manifest, manifest);
    let swapped = match staged {
        Some(staging) => match swap_in(profile, name, &staging) {
            Ok(old) => Some(old),
            Err(err) => {
                profile.manifest = previous;
                let _ = std::fs::remove_dir_all(&staging);
                return Err(err);
            }
        },
        None => None,
    };
    if let Err(err) = profile.save() {
        profile.manifest = previous;
        if let Some(old) = swapped {
            swap_back(profile, name, old);
        }
        return Err(err);
    }
    if let Some(Some(old)) = swapped {
        let _ = std::fs::remove_dir_all(old);
    }
    Ok(())
}

/// Installs `candidate` into `profile` (checking its library in a child process with
/// `dsh_executable`). On error nothing in the profile has changed.
pub fn install(profile: &mut Profile, candidate: Candidate, dsh_executable: &Path) -> anyhow::Result<Installed> {
    if !is_package_name(&candidate.name) {
        bail!("the package is named {}: {PACKAGE_NAME_RULE}", dsh_abi::js::to_string(&candidate.name));
    }
    let (inserts, disables) = match &candidate.layer {
        Some(layer) => layer_effects(&candidate.name, layer)?,
        None => (Vec::new(), Vec::new()),
    };
    let newly_installed =
        !profile.manifest.packages.contains_key(&candidate.name) && !profile.manifest.bundles.contains(&candidate.name);
    let mut manifest = profile.manifest.clone();
    let mut library_entry = None;
    let mut staged = None;
    if let Some(library) = &candidate.library {
        let (staging, package) = stage_library(profile, &candidate, library, dsh_executable)?;
        library_entry = Some(package.library.clone());
        manifest.packages.insert(candidate.name.clone(), package);
        staged = Some(staging);
    }
    let bundle_added = candidate.layer.is_some() && !manifest.bundles.contains(&candidate.name);
    if bundle_added {
        manifest.bundles.push(candidate.name.clone());
    }
    let (bundles_restored, bundles_dropped) =
        reconcile_bundles(profile, &mut manifest, &candidate.name, candidate.layer.is_some());
    // The library's file name is its content's hash: the same name in place is the same library.
    let library_in_place = library_entry.as_ref().is_none_or(|library| profile.dir.join(library).is_file());
    let changed = manifest != profile.manifest || !library_in_place;
    if changed {
        commit(profile, manifest, &candidate.name, staged)?;
    } else if let Some(staging) = staged {
        let _ = std::fs::remove_dir_all(staging);
    }
    Ok(Installed {
        candidate_name: candidate.name.clone(),
        version: candidate.version.clone(),
        library: library_entry,
        bundle_added,
        has_layer: candidate.layer.is_some(),
        newly_installed,
        changed,
        inserts,
        disables,
        bundles_restored,
        bundles_dropped,
    })
}

/// Makes the bundle list agree with the installed packages, as DeepSeek Harness does on every
/// add: a package with a bundle layer has an entry (appended when missing), a package without
/// one has none. `added` is the package being installed, whose layer is `added_has_layer`; a
/// package whose folder is missing keeps its entry, so composing says it is missing. Returns the
/// entries restored and dropped.
fn reconcile_bundles(
    profile: &Profile,
    manifest: &mut crate::profile::ProfileManifest,
    added: &str,
    added_has_layer: bool,
) -> (Vec<String>, Vec<String>) {
    let mut restored = Vec::new();
    let mut dropped = Vec::new();
    for name in manifest.packages.keys() {
        let has_layer = if name == added {
            Some(added_has_layer)
        } else {
            installed_bundle_layer(&profile.dir.join("plugins").join(name))
        };
        let listed = manifest.bundles.contains(name);
        match has_layer {
            Some(true) if !listed => restored.push(name.clone()),
            Some(false) if listed => dropped.push(name.clone()),
            _ => {}
        }
    }
    manifest.bundles.retain(|bundle| !dropped.contains(bundle));
    manifest.bundles.extend(restored.iter().cloned());
    (restored, dropped)
}

/// Whether the installed package in `dir` declares a bundle layer; `None` when its folder or
/// manifest cannot be read.
fn installed_bundle_layer(dir: &Path) -> Option<bool> {
    let text =
        fsutil::read_text_limited(&dir.join("dsh-plugin.toml"), fsutil::MAX_SETTINGS_FILE_BYTES, "a package manifest")
            .ok()?;
    let manifest: PackageManifest = toml::from_str(&text).ok()?;
    Some(manifest.bundle.is_some())
}

fn check_manifest(candidate: &Candidate, info: &ManifestInfo) -> anyhow::Result<()> {
    if info.name != candidate.name {
        bail!("the library is plugin \"{}\", but the package is named \"{}\"", info.name, candidate.name);
    }
    Ok(())
}

/// A package's name without its scope: the name of its own folder.
fn leaf(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// The folder `plugins/<name>` lies in: `plugins`, or `plugins/@scope` for a scoped package.
fn package_parent(profile: &Profile, name: &str) -> PathBuf {
    let target = profile.dir.join("plugins").join(name);
    target.parent().map(Path::to_path_buf).unwrap_or(target)
}

/// Writes the package into a staging directory beside `plugins/<name>`.
fn stage_package(profile: &Profile, candidate: &Candidate, library: &[u8], file_name: &str) -> anyhow::Result<PathBuf> {
    let parent = package_parent(profile, &candidate.name);
    std::fs::create_dir_all(&parent)?;
    let prefix = format!(".staging-{}-", leaf(&candidate.name));
    let staging = tempfile::Builder::new().prefix(&prefix).tempdir_in(&parent)?.keep();
    let write = || -> anyhow::Result<()> {
        fsutil::write_atomic(&staging.join(file_name), library)?;
        let manifest = PackageManifest {
            name: candidate.name.clone(),
            version: candidate.version.clone(),
            library: file_name.to_owned(),
            bundle: candidate.layer.as_ref().map(|_| BundleManifest { patch: "cordis.patch.yml".to_owned() }),
        };
        fsutil::write_atomic(&staging.join("dsh-plugin.toml"), toml::to_string(&manifest)?.as_bytes())?;
        if let Some(layer) = &candidate.layer {
            fsutil::write_atomic(&staging.join("cordis.patch.yml"), layer.as_bytes())?;
        }
        Ok(())
    };
    if let Err(err) = write() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(err.context(format!("cannot stage package {}", candidate.name)));
    }
    Ok(staging)
}

/// Moves the staged package into `plugins/<name>`, keeping the previous one aside; returns where.
fn swap_in(profile: &Profile, name: &str, staging: &Path) -> anyhow::Result<Option<PathBuf>> {
    let parent = package_parent(profile, name);
    let target = profile.dir.join("plugins").join(name);
    let old = if target.exists() {
        let aside = parent.join(format!(".old-{}-{}", leaf(name), std::process::id()));
        std::fs::rename(&target, &aside).with_context(|| format!("cannot move {} aside", target.display()))?;
        Some(aside)
    } else {
        None
    };
    if let Err(err) = std::fs::rename(staging, &target) {
        if let Some(aside) = &old {
            let _ = std::fs::rename(aside, &target);
        }
        return Err(anyhow::Error::new(err).context(format!("cannot install into {}", target.display())));
    }
    fsutil::sync_dir(&parent)?;
    Ok(old)
}

fn swap_back(profile: &Profile, name: &str, old: Option<PathBuf>) {
    let target = profile.dir.join("plugins").join(name);
    let _ = std::fs::remove_dir_all(&target);
    if let Some(aside) = old {
        let _ = std::fs::rename(aside, &target);
    }
}

/// The bundle every profile template starts from.
pub const BASE_BUNDLE: &str = "dsh-base";

/// Removes packages (and their bundle entries) from `profile`; a name that is only a bundle entry
/// loses that entry. Unknown names are not found.
pub fn remove(profile: &mut Profile, names: &[String]) -> anyhow::Result<Vec<String>> {
    let mut manifest = profile.manifest.clone();
    for name in names {
        if name == BASE_BUNDLE {
            bail!(
                "{BASE_BUNDLE} is the base bundle every profile composes from (the agent row, the DeepSeek route, \
                 llm-retry and its checker) and cannot be removed; disable or override single rows in {} instead",
                profile.dir.join("cordis.patch.yml").display()
            );
        }
        if !is_package_name(name) {
            bail!("{} is not a package name ({PACKAGE_NAME_RULE})", dsh_abi::js::to_string(name));
        }
        let installed = manifest.packages.remove(name).is_some();
        let listed = manifest.bundles.iter().any(|bundle| bundle == name);
        manifest.bundles.retain(|bundle| bundle != name);
        if !installed && !listed {
            return Err(NotFound(format!("package \"{name}\" is not installed in profile {}", profile.name)).into());
        }
    }
    let previous = std::mem::replace(&mut profile.manifest, manifest);
    if let Err(err) = profile.save() {
        profile.manifest = previous;
        return Err(err);
    }
    for name in names {
        let dir = profile.dir.join("plugins").join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot delete {}", dir.display()))?;
        }
        if name.starts_with('@') {
            // The scope's folder goes with its last package; one still holding others stays.
            let _ = std::fs::remove_dir(package_parent(profile, name));
        }
    }
    Ok(names.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifact_is_read_from_cargo_messages() {
        let messages = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#serde@1.0.0","manifest_path":"/r/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"serde","src_path":"/r/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/t/libserde.rlib"],"executable":null,"fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///src/plugins/relay-retry#0.3.1","manifest_path":"/src/plugins/relay-retry/Cargo.toml","target":{"kind":["cdylib","rlib"],"crate_types":["cdylib","rlib"],"name":"relay_retry","src_path":"/src/plugins/relay-retry/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/t/release/librelay_retry.so","/t/release/librelay_retry.rlib"],"executable":null,"fresh":false}
{"reason":"build-finished","success":true}"#;
        let relay = cargo_metadata::PackageId { repr: "path+file:///src/plugins/relay-retry#0.3.1".into() };
        let library = cdylib_artifact(messages.as_bytes(), &relay).unwrap();
        assert_eq!(library, PathBuf::from("/t/release/librelay_retry.so"));
        let other = cargo_metadata::PackageId { repr: "path+file:///elsewhere#0.1.0".into() };
        assert_eq!(cdylib_artifact(messages.as_bytes(), &other), None);
    }

    #[test]
    fn a_crate_declares_its_bundle_in_either_form() {
        let scratch = tempfile::tempdir().unwrap();
        std::fs::create_dir(scratch.path().join("src")).unwrap();
        std::fs::write(scratch.path().join("src/lib.rs"), "").unwrap();
        std::fs::write(scratch.path().join("cordis.patch.yml"), "[]\n").unwrap();
        let manifest = |metadata: &str| {
            let text = format!("[package]\nname = \"p\"\nversion = \"0.1.0\"\n[workspace]\n{metadata}");
            std::fs::write(scratch.path().join("Cargo.toml"), text).unwrap();
            crate_bundle_layer(scratch.path(), &crate_package(scratch.path())?)
        };
        assert_eq!(
            manifest("[package.metadata.dsh]\nbundle = \"cordis.patch.yml\"\n").unwrap().as_deref(),
            Some("[]\n")
        );
        assert_eq!(
            manifest("[package.metadata.dsh.bundle]\npatch = \"cordis.patch.yml\"\n").unwrap().as_deref(),
            Some("[]\n")
        );
        assert_eq!(manifest("").unwrap(), None);
        let error = manifest("[package.metadata.dsh.bundle]\nfile = \"x\"\n").unwrap_err().to_string();
        assert!(error.contains("needs patch = \"cordis.patch.yml\""), "{error}");
    }

    #[test]
    fn installed_libraries_are_named_by_content() {
        let name = content_addressed_name("relay-retry", "0123456789abcdef0123");
        assert_eq!(
            name,
            format!("{}relay_retry-0123456789abcdef{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)
        );
    }

    #[test]
    fn a_layer_says_what_it_inserts_and_disables() {
        let layer =
            "- insert: [{id: relay-retry, name: relay-retry}]\n- {id: llm-retry, name: llm-retry, disabled: true}\n";
        assert_eq!(
            layer_effects("relay-retry", layer).unwrap(),
            (vec!["relay-retry".to_owned()], vec!["llm-retry".to_owned()])
        );
    }
}
