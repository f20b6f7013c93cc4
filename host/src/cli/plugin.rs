//! `dsh plugin …`: inspect libraries (and, hidden, the child side of inspection).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::NotFound;
use crate::plugin::inspect::{self, InspectError, ManifestInfo};

#[derive(Debug, Args)]
pub struct PluginArgs {
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
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

pub fn run(args: PluginArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PluginCommand::Inspect { path, json } => inspect_command(path, json),
        PluginCommand::Probe { path } => Ok(if inspect::probe(&path) { ExitCode::SUCCESS } else { ExitCode::FAILURE }),
    }
}

fn inspect_command(path: PathBuf, json: bool) -> anyhow::Result<ExitCode> {
    let dsh = std::env::current_exe().context("cannot find the dsh executable")?;
    match inspect::inspect_in_child(&dsh, &path) {
        Ok(manifest) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&manifest)?);
            } else {
                print!("{}", render_manifest(&manifest));
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
