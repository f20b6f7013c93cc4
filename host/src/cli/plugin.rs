//! `dsh plugin …`: add, remove and list a profile's packages; inspect any library (and, hidden,
//! the child side of inspection).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use super::Globals;
use crate::plugin::inspect::{self, InspectError, ManifestInfo};
use crate::plugin::{install, migration};
use crate::profile::Profile;
use crate::NotFound;

#[derive(Debug, Args)]
pub struct PluginArgs {
    /// The profile to change (created from the base template if it does not exist).
    #[arg(long, global = true, default_value = "web", value_name = "NAME")]
    profile: String,

    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Install packages: bundled names (relay-retry), plugin crate directories (built with cargo
    /// build --release) or prebuilt package directories (dsh-plugin.toml + library).
    Add {
        #[arg(required = true, value_name = "SPEC")]
        specs: Vec<String>,
    },
    /// Remove packages and their bundle entries (never touches your cordis.patch.yml).
    Remove {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
    /// Installed packages, versions, ABI status and bundle membership.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Load one library in a child process and print its manifest, or the exact load error.
    Inspect {
        path: PathBuf,
        /// Print the manifest as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The child side of `inspect`: open the library and print a one-line JSON report.
    #[command(hide = true)]
    Probe { path: PathBuf },
}

pub fn run(globals: &Globals, args: PluginArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PluginCommand::Inspect { path, json } => inspect_command(path, json),
        PluginCommand::Probe { path } => Ok(if inspect::probe(&path) { ExitCode::SUCCESS } else { ExitCode::FAILURE }),
        PluginCommand::Add { specs } => add(globals, &args.profile, &specs),
        PluginCommand::Remove { names } => remove(globals, &args.profile, &names),
        PluginCommand::List { json } => list(globals, &args.profile, json),
    }
}

fn dsh_executable() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the dsh executable")
}

/// Takes the profile's writer lock, waiting for another process that is changing it.
fn lock_profile(home: &crate::profile::Home, name: &str) -> anyhow::Result<crate::lock::WriterLock> {
    Ok(Profile::lock(home, name, |busy| eprintln!("dsh: waiting: {busy}"))?)
}

fn add(globals: &Globals, profile_name: &str, specs: &[String]) -> anyhow::Result<ExitCode> {
    let home = globals.home()?;
    let dsh = dsh_executable()?;
    let _lock = lock_profile(&home, profile_name)?;
    let (mut profile, created) = Profile::open_or_create(&home, profile_name, &_lock)?;
    let outcome = specs.iter().try_for_each(|spec| -> anyhow::Result<()> {
        let Some(spec) = moved_over(spec)? else { return Ok(()) };
        let candidate = install::candidate(spec)?;
        let installed =
            install::install(&mut profile, candidate, &dsh).with_context(|| format!("cannot install {spec}"))?;
        report_installed(&profile, &installed)?;
        Ok(())
    });
    if let Err(err) = outcome {
        created.undo();
        return Err(err);
    }
    if !created.is_empty() {
        eprintln!("dsh: created profile {} at {}", profile.name, profile.dir.display());
    }
    out!("Restart running dsh hosts of profile {} to apply.", profile.name)?;
    Ok(ExitCode::SUCCESS)
}

/// What to install for `spec` when it names a DeepSeek Harness package: its bundled replacement
/// (said on stdout), or nothing when the base bundle already runs it. Other specs pass through.
fn moved_over(spec: &str) -> anyhow::Result<Option<&str>> {
    match migration::replacement(spec) {
        Some(replacement) if replacement.in_base_bundle => {
            out!(
                "{spec} is DeepSeek Harness's {name}: dsh's own {name} runs from the base bundle dsh-base, so there is \
                 nothing to install (its settings are each provider row's retryPolicy)",
                name = replacement.bundled
            )?;
            Ok(None)
        }
        Some(replacement) => {
            out!("{spec} is replaced by dsh's bundled {name}: installing {name}", name = replacement.bundled)?;
            Ok(Some(replacement.bundled))
        }
        None if migration::looks_like_a_reference_package(spec) => {
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
        None => Ok(Some(spec)),
    }
}

fn report_installed(profile: &Profile, installed: &install::Installed) -> std::io::Result<()> {
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

fn remove(globals: &Globals, profile_name: &str, names: &[String]) -> anyhow::Result<ExitCode> {
    let home = globals.home()?;
    let _lock = lock_profile(&home, profile_name)?;
    let mut profile = Profile::existing(&home, profile_name)?;
    for name in install::remove(&mut profile, names)? {
        out!("removed {name} from profile {}", profile.name)?;
    }
    out!("Restart running dsh hosts of profile {} to apply.", profile.name)?;
    Ok(ExitCode::SUCCESS)
}

fn list(globals: &Globals, profile_name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let home = globals.home()?;
    let profile = Profile::open(&home, profile_name)?;
    let dsh = dsh_executable()?;
    let bundle_position = |name: &str| profile.manifest.bundles.iter().position(|bundle| bundle == name).map(|p| p + 1);
    let mut entries = Vec::new();
    for (name, package) in &profile.manifest.packages {
        let abi = match inspect::inspect_in_child(&dsh, &profile.dir.join(&package.library)) {
            Ok(info) => format!("ok (abi {})", info.abi_version),
            Err(err) => format!("error: {err}"),
        };
        entries.push(json!({
            "name": name, "version": package.version, "source": package.source, "library": package.library,
            "sha256": package.sha256, "abi": abi, "bundle": bundle_position(name),
        }));
    }
    for bundle in profile.manifest.bundles.iter().filter(|bundle| !profile.manifest.packages.contains_key(*bundle)) {
        entries.push(json!({
            "name": bundle, "version": crate::bundled::package(bundle).map(|b| b.version), "source": "bundled layer",
            "library": null, "sha256": null, "abi": null, "bundle": bundle_position(bundle),
        }));
    }
    if json {
        out!("{}", serde_json::to_string_pretty(&entries)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "profile {} ({} bundles: {})",
        profile.name,
        profile.manifest.bundles.len(),
        profile.manifest.bundles.join(", ")
    )?;
    for entry in &entries {
        let text = |key: &str| entry[key].as_str().unwrap_or("-").to_owned();
        let bundle = match entry["bundle"].as_u64() {
            Some(position) => format!("bundle {position} of {}", profile.manifest.bundles.len()),
            None => "no bundle".to_owned(),
        };
        out!("  {:24} {:10} {:16} {:12} {}", text("name"), text("version"), bundle, text("abi"), text("source"))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn inspect_command(path: PathBuf, json: bool) -> anyhow::Result<ExitCode> {
    match inspect::inspect_in_child(&dsh_executable()?, &path) {
        Ok(manifest) => {
            if json {
                out!("{}", serde_json::to_string_pretty(&manifest)?)?;
            } else {
                out_text!("{}", render_manifest(&manifest))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(InspectError::Missing(message)) => Err(NotFound(message).into()),
        Err(err) => Err(anyhow::Error::new(err)),
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
