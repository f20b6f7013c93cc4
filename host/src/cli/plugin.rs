//! `dsh plugin …`: add, remove and list a profile's packages; inspect any library (and, hidden,
//! the child side of inspection).

use super::exit::{Exit, Outcome};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use super::globals::{lock_profile, Globals};
use super::shown::plural;
use super::{EXIT_FAILED, EXIT_NOT_FOUND};
use crate::agent::assembly;
use crate::counters::Stores;
use crate::migration;
use crate::plugin::inspect::{self, InspectError, ManifestInfo};
use crate::plugin::{install, listing};
use crate::problem::Problem;
use crate::profile::{toggle, Home, LayerScope, Profile};
use crate::NotFound;

#[derive(Debug, Args)]
pub struct PluginArgs {
    /// The profile to change (created from the base template if it does not exist).
    #[arg(long, global = true, default_value = "web", value_name = "NAME", add = super::complete::profiles())]
    profile: String,

    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Install packages: bundled names (relay-retry), plugin crate directories (built with cargo
    /// build --release) or prebuilt package directories (dsh-plugin.toml + library).
    Add {
        /// A bundled package name (relay-retry), a plugin crate or package directory, or a
        /// DeepSeek Harness package name (@syncended/dsh-retry), which installs its replacement.
        #[arg(required = true, value_name = "SPEC")]
        specs: Vec<String>,
        /// Print `{profile, packages: [{spec, name, version, library, bundle, inserts, disables, …}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Remove packages and their bundle entries (never touches your cordis.patch.yml).
    Remove {
        /// Installed package or bundle names, as `plugin list` shows them.
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        /// Print `{profile, removed: [NAME…]}`.
        #[arg(long)]
        json: bool,
    },
    /// Every package of the profile — installed, bundle layers, and the bundled packages its
    /// rows use — with version, bundle place, library status, source and rows.
    List {
        /// Print a JSON array of `{name, version, source, library, sha256, abiVersion, error, bundle, rows}`.
        #[arg(long)]
        json: bool,
    },
    /// Turn a row of the profile back on: a marked `disabled: false` entry at the end of the
    /// profile's cordis.patch.yml (replacing an earlier enable or disable of that row).
    Enable {
        /// The row id, as `config dump` shows it.
        #[arg(value_name = "ROW")]
        row: String,
        /// Print `{profile, row, disabled, layer}`.
        #[arg(long)]
        json: bool,
    },
    /// Turn a row of the profile off: a marked `disabled: true` entry at the end of the
    /// profile's cordis.patch.yml (replacing an earlier enable or disable of that row).
    Disable {
        /// The row id, as `config dump` shows it.
        #[arg(value_name = "ROW")]
        row: String,
        /// Print `{profile, row, disabled, layer}`.
        #[arg(long)]
        json: bool,
    },
    /// Write a new plugin crate: a working executor with unit tests, a bundle layer that places
    /// its row before llm-retry, and this dsh's interface vendored, so it builds anywhere.
    New {
        /// The plugin's name (ASCII letters, digits, '-' and '_'), also its package name.
        name: String,
        /// Where to write it (default: ./NAME); must not exist or be empty.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Print `{name, dir, files}`.
        #[arg(long)]
        json: bool,
    },
    /// Load one library in a child process and print its manifest, or the exact load error.
    Inspect {
        /// The shared library to inspect.
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// Print the manifest as JSON (`{"error": …}` when the library is refused).
        #[arg(long)]
        json: bool,
    },
    /// The child side of `inspect`: open the library and print a one-line JSON report.
    #[command(hide = true)]
    Probe {
        /// The library to open.
        path: PathBuf,
    },
}

pub fn run(globals: &Globals, args: PluginArgs) -> Outcome {
    match args.command {
        PluginCommand::Inspect { path, json } => inspect_command(path, json),
        PluginCommand::Probe { path } => Exit::unless(inspect::probe(&path), EXIT_FAILED),
        PluginCommand::Add { specs, json } => add(globals, &args.profile, &specs, json),
        PluginCommand::Remove { names, json } => remove(globals, &args.profile, &names, json),
        PluginCommand::List { json } => list(globals, &args.profile, json),
        PluginCommand::New { name, dir, json } => new_crate(&name, dir, json),
        PluginCommand::Enable { row, json } => toggle(globals, &args.profile, &row, false, json),
        PluginCommand::Disable { row, json } => toggle(globals, &args.profile, &row, true, json),
    }
}

/// Sets row `row` of the profile disabled (or enabled) in its own patch layer.
fn toggle(globals: &Globals, profile_name: &str, row: &str, disabled: bool, json: bool) -> Outcome {
    let home = globals.home()?;
    let _lock = lock_profile(&home, profile_name)?;
    let profile = Profile::existing(&home, profile_name)?;
    let composition = profile.compose(&home, &[], LayerScope::All)?;
    let ids: Vec<&str> = composition.rows.iter().filter_map(|row| row.get("id")?.as_str()).collect();
    if !ids.contains(&row) {
        say!("dsh: profile {} has no row {row:?}; its rows: {}", profile.name, ids.join(", "));
        return Err(Exit::reported(EXIT_NOT_FOUND));
    }
    let layer = profile.dir.join("cordis.patch.yml");
    toggle::set_disabled(&layer, row, disabled)?;
    if json {
        let layer = home.display(&layer);
        out!("{}", json!({"profile": profile.name, "row": row, "disabled": disabled, "layer": layer}))?;
        return Ok(());
    }
    let done = if disabled { "disabled" } else { "enabled" };
    out!("{done} row {row} of profile {} ({})", profile.name, home.display(&layer))?;
    out!("{}", applies_when(&profile.name))?;
    Ok(())
}

fn new_crate(name: &str, dir: Option<PathBuf>, json: bool) -> Outcome {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let written = crate::plugin::template::create(&dir, name)?;
    if json {
        let files: Vec<String> = written.iter().map(|path| path.display().to_string()).collect();
        out!("{}", json!({"name": name, "dir": dir.display().to_string(), "files": files}))?;
        return Ok(());
    }
    out!("wrote plugin crate {name} in {} ({} files)", dir.display(), written.len())?;
    out!("  cd {} && cargo test                    # its unit tests", dir.display())?;
    out!("  dsh plugin --profile web add {}        # build and install it, placed before llm-retry", dir.display())?;
    Ok(())
}

fn dsh_executable() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the dsh executable")
}

/// What the profile's long-running hosts do with a change: `dsh chat` picks it up at its next turn.
fn applies_when(profile: &str) -> String {
    format!(
        "dsh chat and dsh web sessions of profile {profile} pick this up at their next turn; dsh run uses it from the next run."
    )
}

fn add(globals: &Globals, profile_name: &str, specs: &[String], json: bool) -> Outcome {
    let home = globals.home()?;
    let dsh = dsh_executable()?;
    let _lock = lock_profile(&home, profile_name)?;
    let (mut profile, created) = Profile::open_or_create(&home, profile_name, &_lock)?;
    let mut reports = Vec::new();
    let mut changed = false;
    let outcome = specs.iter().try_for_each(|spec| -> anyhow::Result<()> {
        let (name, note) = moved_over(spec)?;
        if let (Some(note), false) = (&note, json) {
            out!("{note}")?;
        }
        let Some(name) = name else {
            reports.push(json!({"spec": spec, "installed": false, "note": note}));
            return Ok(());
        };
        let candidate = install::candidate(name)?;
        let installed =
            install::install(&mut profile, candidate, &dsh).with_context(|| format!("cannot install {spec}"))?;
        changed |= installed.changed;
        if json {
            reports.push(installed_json(spec, &profile, &installed, note));
        } else {
            report_installed(&profile, &installed)?;
        }
        Ok(())
    });
    if let Err(err) = outcome {
        created.undo();
        return Err(err.into());
    }
    if !created.is_empty() {
        say!("dsh: created profile {} at {}", profile.name, profile.dir.display());
    }
    let needed = still_needed(&home, &profile);
    if json {
        let document = json!({"profile": profile.name, "packages": reports, "problems": needed});
        out_raw!("{}", dsh_abi::js::to_string_pretty(&document))?;
    } else if changed {
        out!("{}", applies_when(&profile.name))?;
    }
    if !json && !needed.is_empty() {
        let name = &profile.name;
        say!("dsh: warning: profile {name} does not run yet, {} problem{} to fix:", needed.len(), plural(needed.len()));
        needed.iter().for_each(|problem| say!("{problem}"));
        say!("dsh: `dsh config --profile {name} check` checks it again");
    }
    Ok(())
}

/// What keeps `profile` from running now that its packages are in (a route no provider row
/// serves, a key to set), found as a run finds it; the servers of `mcp` rows are not started.
fn still_needed(home: &Home, profile: &Profile) -> Vec<Problem> {
    let composition = match profile.compose(home, &[], LayerScope::All) {
        Ok(composition) => composition,
        Err(err) => return vec![Problem::general(format!("{err:#}"))],
    };
    assembly::check(profile, &composition, &Stores::at(home.root())).problems
}

fn installed_json(
    spec: &str,
    profile: &Profile,
    installed: &install::Installed,
    note: Option<String>,
) -> serde_json::Value {
    json!({
        "spec": spec,
        "installed": true,
        "note": note,
        "name": installed.candidate_name,
        "version": installed.version,
        "library": installed.library,
        "bundle": profile.manifest.bundles.iter().position(|bundle| *bundle == installed.candidate_name).map(|p| p + 1),
        "inserts": installed.inserts,
        "disables": installed.disables,
        "bundlesRestored": installed.bundles_restored,
        "bundlesDropped": installed.bundles_dropped,
        "changed": installed.changed,
    })
}

/// What to install for `spec` when it names a DeepSeek Harness package — its bundled
/// replacement, or nothing when the base bundle already runs it — and what to say about it.
/// Other specs pass through.
fn moved_over(spec: &str) -> anyhow::Result<(Option<&str>, Option<String>)> {
    match migration::replacement(spec) {
        Some(replacement) if replacement.in_base_bundle => Ok((
            None,
            Some(format!(
                "{spec} is DeepSeek Harness's {name}: dsh's own {name} runs from the base bundle dsh-base, so there is \
                 nothing to install ({})",
                replacement.settings,
                name = replacement.bundled
            )),
        )),
        Some(replacement) => Ok((
            Some(replacement.bundled),
            Some(format!("{spec} is replaced by dsh's bundled {name}: installing {name}", name = replacement.bundled)),
        )),
        None if migration::looks_like_a_reference_package(spec) => {
            if let Some(instead) = migration::instead_of(spec) {
                let missing = format!("{spec} is a DeepSeek Harness package dsh does not have: {instead}");
                return Err(NotFound(missing).into());
            }
            let bundled: Vec<&str> = crate::bundled::BUNDLED_PACKAGES
                .iter()
                .filter(|package| package.has_library)
                .map(|package| package.name)
                .collect();
            Err(NotFound(format!(
                "{spec} is a DeepSeek Harness (npm) package, which dsh cannot load: dsh installs bundled packages ({}) \
                 or the path of a Rust plugin crate or package directory",
                bundled.join(", ")
            ))
            .into())
        }
        None => Ok((Some(spec), None)),
    }
}

fn report_installed(profile: &Profile, installed: &install::Installed) -> std::io::Result<()> {
    if !installed.changed {
        return out!(
            "{} {} is already installed in profile {}; nothing changed",
            installed.candidate_name,
            installed.version,
            profile.name
        );
    }
    match &installed.library {
        Some(library) => out!(
            "installed {} {} into profile {} ({library})",
            installed.candidate_name,
            installed.version,
            profile.name
        )?,
        None => out!("added bundle {} {} to profile {}", installed.candidate_name, installed.version, profile.name)?,
    }
    for name in &installed.bundles_restored {
        out!("  restored the bundle entry of {name}, which has a bundle layer")?;
    }
    for name in &installed.bundles_dropped {
        out!("  dropped the bundle entry of {name}, which declares no bundle layer")?;
    }
    if installed.has_layer {
        let mut effects = Vec::new();
        if !installed.inserts.is_empty() {
            effects.push(format!("inserts {}", installed.inserts.join(", ")));
        }
        if !installed.disables.is_empty() {
            effects.push(format!("disables {}", installed.disables.join(", ")));
        }
        let position =
            profile.manifest.bundles.iter().position(|bundle| *bundle == installed.candidate_name).map_or(0, |p| p + 1);
        out!(
            "  bundle layer {} of {}{}",
            position,
            profile.manifest.bundles.len(),
            if effects.is_empty() { String::new() } else { format!(": {}", effects.join("; ")) }
        )?;
    } else if installed.newly_installed {
        out!(
            "  note: {} declares no bundle, so it is installed but has no rows; enable it with an insert row in {}",
            installed.candidate_name,
            profile.dir.join("cordis.patch.yml").display()
        )?;
    }
    Ok(())
}

fn remove(globals: &Globals, profile_name: &str, names: &[String], json: bool) -> Outcome {
    let home = globals.home()?;
    let _lock = lock_profile(&home, profile_name)?;
    let mut profile = Profile::existing(&home, profile_name)?;
    let removed = install::remove(&mut profile, names)?;
    if json {
        out!("{}", json!({"profile": profile.name, "removed": removed}))?;
        return Ok(());
    }
    for name in removed {
        out!("removed {name} from profile {}", profile.name)?;
    }
    out!("{}", applies_when(&profile.name))?;
    Ok(())
}

/// One package of a profile, as `plugin list` shows it.
fn list(globals: &Globals, profile_name: &str, json: bool) -> Outcome {
    let home = globals.home()?;
    let profile = Profile::open(&home, profile_name)?;
    let dsh = dsh_executable()?;
    let listed = listing::profile_packages(&home, &profile, |err| {
        say!("dsh: warning: the rows of profile {} are not shown: {err:#}", profile.name)
    });
    let entries: Vec<serde_json::Value> = listed
        .iter()
        .map(|package| {
            let (abi_version, error) = match package.library_status(&dsh) {
                Ok(abi_version) => (abi_version, None),
                Err(error) => (None, Some(error)),
            };
            json!({
                "name": package.name, "version": package.version, "source": package.source,
                "library": package.library.as_ref().map(|path| path.display().to_string()),
                "sha256": package.sha256, "abiVersion": abi_version, "error": error, "bundle": package.bundle,
                "rows": package.rows, "removable": package.removable,
            })
        })
        .collect();
    if json {
        out_raw!("{}", dsh_abi::js::to_string_pretty(&entries))?;
        return Ok(());
    }
    out!(
        "profile {} ({} bundles: {})",
        profile.name,
        profile.manifest.bundles.len(),
        profile.manifest.bundles.join(", ")
    )?;
    out!("  {:24} {:10} {:16} {:14} {:22} {}", "PACKAGE", "VERSION", "BUNDLE", "LIBRARY", "SOURCE", "ROWS")?;
    for entry in &entries {
        let text = |key: &str| entry[key].as_str().unwrap_or("-").to_owned();
        let library = match (entry["abiVersion"].as_u64(), entry["error"].as_str()) {
            (Some(version), _) => format!("ok (abi {version})"),
            (None, Some(error)) => format!("error: {error}"),
            (None, None) => "-".to_owned(),
        };
        let bundle = match entry["bundle"].as_u64() {
            Some(position) => format!("{position} of {}", profile.manifest.bundles.len()),
            None => "-".to_owned(),
        };
        let rows: Vec<&str> = entry["rows"].as_array().into_iter().flatten().filter_map(|row| row.as_str()).collect();
        let rows = if rows.is_empty() { "-".to_owned() } else { rows.join(", ") };
        out!(
            "  {:24} {:10} {:16} {:14} {:22} {}",
            text("name"),
            text("version"),
            bundle,
            library,
            text("source"),
            rows
        )?;
    }
    Ok(())
}

fn inspect_command(path: PathBuf, json: bool) -> Outcome {
    match inspect::inspect_in_child(&dsh_executable()?, &path) {
        Ok(manifest) => {
            if json {
                out_raw!("{}", dsh_abi::js::to_string_pretty(&manifest))?;
            } else {
                out_text!("{}", render_manifest(&manifest))?;
            }
            Ok(())
        }
        Err(err) => {
            let code = if matches!(err, InspectError::Missing(_)) { EXIT_NOT_FOUND } else { EXIT_FAILED };
            if json {
                out!("{}", json!({"path": path.display().to_string(), "error": err.to_string()}))?;
                say!("dsh: {err}");
                return Err(Exit::reported(code));
            }
            match err {
                InspectError::Missing(message) => Err(NotFound(message).into()),
                err => Err(err.into()),
            }
        }
    }
}

fn render_manifest(manifest: &ManifestInfo) -> String {
    let mut out = format!(
        "name:        {}\nversion:     {}\nabi version: {}\nhooks:       {}\n",
        manifest.name,
        manifest.version,
        manifest.abi_version,
        if manifest.hooks.is_empty() { "(none)".to_owned() } else { manifest.hooks.join(", ") },
    );
    if !manifest.description.is_empty() {
        out.push_str(&format!("description: {}\n", manifest.description));
    }
    if manifest.config_keys.is_empty() {
        out.push_str("config keys: (none)\n");
    } else {
        out.push_str("config keys:\n");
        let width = manifest.config_keys.iter().map(|key| key.name.len()).max().unwrap_or(0);
        for key in &manifest.config_keys {
            out.push_str(&format!("  {:width$}  {}\n", key.name, key.summary));
        }
    }
    out
}
