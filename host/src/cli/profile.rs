//! `dsh profile …`: list the profiles a command can name, create one (from a template, another
//! profile, or the base bundle alone), copy one, remove one.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::exit::Outcome;
use super::globals::{lock_profile, Globals};
use crate::profile::manage::{self, Source};
use crate::profile::{Home, Profile};

#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    command: ProfileCommand,
}

#[derive(Debug, Subcommand)]
enum ProfileCommand {
    /// Every profile a command can name: those of the home and the shipped templates not created
    /// yet, with their bundles and installed packages.
    List {
        /// Print a JSON array of `{name, created, dir, bundles, packages}`.
        #[arg(long)]
        json: bool,
    },
    /// Create a profile: with the base bundle alone, or `--from` a template or another profile.
    New {
        /// The new profile's name.
        name: String,
        /// A shipped template (web, demo) or a profile of the home (copied whole).
        #[arg(long, value_name = "NAME", add = super::complete::profiles())]
        from: Option<String>,
        /// Print `{name, dir, bundles, packages}`.
        #[arg(long)]
        json: bool,
    },
    /// Copy a profile — layers, manifest and installed libraries — to a new name.
    Copy {
        /// The profile to copy.
        #[arg(add = super::complete::profiles())]
        from: String,
        /// The new profile's name.
        to: String,
        /// Print `{name, dir, bundles, packages}`.
        #[arg(long)]
        json: bool,
    },
    /// Remove a profile's folder (its sessions keep their logs).
    Remove {
        /// The profile to remove.
        #[arg(add = super::complete::profiles())]
        name: String,
        /// Print `{removed, dir}`.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(globals: &Globals, args: ProfileArgs) -> Outcome {
    let home = globals.home()?;
    match args.command {
        ProfileCommand::List { json } => list(&home, json),
        ProfileCommand::New { name, from, json } => {
            let source = match &from {
                Some(from) => Source::named(&home, from)?,
                None => Source::Base,
            };
            let profile = match source {
                Source::Profile(from) => copy(&home, from, &name)?,
                source => manage::create(&home, &name, source, &lock_profile(&home, &name)?)?,
            };
            created(&home, &profile, json)
        }
        ProfileCommand::Copy { from, to, json } => created(&home, &copy(&home, &from, &to)?, json),
        ProfileCommand::Remove { name, json } => remove(&home, &name, json),
    }
}

fn copy(home: &Home, from: &str, to: &str) -> anyhow::Result<Profile> {
    // Taken in name order, so two copies between the same profiles cannot wait for each other.
    let locks = match from < to {
        true => {
            let from_lock = lock_profile(home, from)?;
            manage::CopyLocks { from: from_lock, to: lock_profile(home, to)? }
        }
        false => {
            let to_lock = lock_profile(home, to)?;
            manage::CopyLocks { to: to_lock, from: lock_profile(home, from)? }
        }
    };
    manage::copy(home, from, to, &locks)
}

fn described(home: &Home, profile: &Profile, created: bool) -> Value {
    json!({
        "name": profile.name,
        "created": created,
        "dir": home.display(&profile.dir),
        "bundles": profile.manifest.bundles,
        "packages": profile.manifest.packages.keys().collect::<Vec<_>>(),
    })
}

fn list(home: &Home, json: bool) -> Outcome {
    let mut listed = Vec::new();
    for name in Profile::names(home) {
        match Profile::existing(home, &name) {
            Ok(profile) => listed.push(described(home, &profile, true)),
            Err(_) => match Profile::peek(home, &name) {
                Ok(template) => listed.push(described(home, &template, false)),
                Err(err) => say!("dsh: warning: profile {name}: {err:#}"),
            },
        }
    }
    if json {
        out_raw!("{}", dsh_abi::js::to_string_pretty(&Value::Array(listed)))?;
        return Ok(());
    }
    out!("  {:16} {:9} {:28} PACKAGES", "PROFILE", "STATE", "BUNDLES")?;
    for profile in &listed {
        let words = |key: &str| profile[key].as_array().map_or_else(String::new, |list| joined(list));
        let state = if profile["created"] == true { "created" } else { "template" };
        let name = profile["name"].as_str().unwrap_or_default();
        out!("  {name:16} {state:9} {:28} {}", words("bundles"), words("packages"))?;
    }
    Ok(())
}

fn joined(list: &[Value]) -> String {
    let words: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    if words.is_empty() {
        "-".to_owned()
    } else {
        words.join(", ")
    }
}

fn created(home: &Home, profile: &Profile, json: bool) -> Outcome {
    if json {
        let mut document = described(home, profile, true);
        document.as_object_mut().map(|fields| fields.remove("created"));
        out_raw!("{}", dsh_abi::js::to_string_pretty(&document))?;
        return Ok(());
    }
    out!("created profile {} at {}", profile.name, home.display(&profile.dir))?;
    out!(
        "  dsh plugin --profile {} add PACKAGE    # add packages; MCP servers are rows of its cordis.patch.yml",
        profile.name
    )?;
    Ok(())
}

fn remove(home: &Home, name: &str, json: bool) -> Outcome {
    let lock = lock_profile(home, name)?;
    let dir = manage::remove(home, name, &lock)?;
    let recreated = crate::bundled::template(name).is_some();
    if json {
        out_raw!("{}", dsh_abi::js::to_string_pretty(&json!({"removed": name, "dir": home.display(&dir)})))?;
        return Ok(());
    }
    out!("removed profile {name} ({})", home.display(&dir))?;
    if recreated {
        out!("  {name} is a shipped template: the next command that names it creates it again, as shipped")?;
    }
    Ok(())
}
