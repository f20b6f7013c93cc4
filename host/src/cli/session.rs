//! `dsh session …`: verify whole logs against the structure rules and the retry-record invariant.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use super::Globals;
use crate::plugin::catalog;
use crate::plugin::PluginLibrary;
use crate::session::verify::{self, Report};
use crate::NotFound;

#[derive(Debug, Args)]
pub struct SessionArgs {
    #[command(subcommand)]
    command: SessionCommand,
}

#[derive(Debug, Subcommand)]
enum SessionCommand {
    /// Check whole logs (ours, and DeepSeek Harness session.jsonl / session.jsonl.zstd files)
    /// against the session structure rules and the llm-retry invariant; every violation is
    /// printed as PATH:SEQ: message. Never creates or reads a profile.
    Verify {
        #[arg(required = true, value_name = "ID|PATH")]
        logs: Vec<String>,
        /// One JSON report per file instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(globals: &Globals, args: SessionArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        SessionCommand::Verify { logs, json } => verify_command(globals, &logs, json),
    }
}

/// A log named by path (a file, or a session directory) or by session id under the home.
pub(crate) fn resolve_log(globals: &Globals, name: &str) -> anyhow::Result<PathBuf> {
    let in_dir = |dir: &Path| {
        ["session.jsonl", "session.jsonl.zstd"].iter().map(|file| dir.join(file)).find(|path| path.is_file())
    };
    let path = Path::new(name);
    if path.is_file() {
        return Ok(path.to_owned());
    }
    if path.is_dir() {
        return in_dir(path).ok_or_else(|| NotFound(format!("{name}: no session.jsonl in this directory")).into());
    }
    let sessions = globals.home()?.sessions_dir();
    if !name.contains(['/', '\\']) {
        if let Some(found) = in_dir(&sessions.join(name)) {
            return Ok(found);
        }
    }
    Err(NotFound(format!("{name}: no such log file, and no session of that id under {}", sessions.display())).into())
}

fn verify_command(globals: &Globals, logs: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let library_path = catalog::find_bundled_library("llm-retry-invariant").map_err(|expected| {
        anyhow::anyhow!(
            "the llm-retry-invariant library {} was not found (run cargo build --release --workspace)",
            expected.display()
        )
    })?;
    let library = PluginLibrary::load(&library_path)?;
    let invariant = library
        .instantiate("llm-retry-invariant", &serde_json::Value::Null)
        .map_err(|err| anyhow::anyhow!("llm-retry-invariant: {err:?}"))?;
    let mut reports = Vec::new();
    let mut unreadable = false;
    for name in logs {
        let path = resolve_log(globals, name)?;
        match verify::verify_log(&path, &[&invariant]) {
            Ok(report) => reports.push(report),
            Err(err) => {
                unreadable = true;
                eprintln!("{}: {err}", path.display());
            }
        }
    }
    if json {
        let value: Vec<_> = reports.iter().map(report_json).collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for report in &reports {
            for note in &report.notes {
                eprintln!("{}: note: {note}", report.path.display());
            }
            for finding in &report.violations {
                match (finding.seq, finding.at) {
                    (Some(seq), _) => println!("{}:{seq}: {}", report.path.display(), finding.message),
                    (None, Some(at)) => {
                        println!("{}:line {} (byte {}): {}", report.path.display(), at.line, at.offset, finding.message)
                    }
                    (None, None) => println!("{}: {}", report.path.display(), finding.message),
                }
            }
        }
    }
    let violations: usize = reports.iter().map(|report| report.violations.len()).sum();
    let events: u64 = reports.iter().map(|report| report.events).sum();
    if !json {
        eprintln!(
            "dsh: verified {} log{} ({events} events): {violations} violation{}",
            reports.len(),
            if reports.len() == 1 { "" } else { "s" },
            if violations == 1 { "" } else { "s" }
        );
    }
    Ok(if violations > 0 || unreadable { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn report_json(report: &Report) -> serde_json::Value {
    json!({
        "path": report.path.display().to_string(),
        "events": report.events,
        "violations": report.violations.iter().map(|finding| json!({
            "seq": finding.seq,
            "line": finding.at.map(|at| at.line),
            "offset": finding.at.map(|at| at.offset),
            "message": finding.message,
        })).collect::<Vec<_>>(),
        "notes": report.notes,
    })
}
