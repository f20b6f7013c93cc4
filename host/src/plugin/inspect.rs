//! Inspecting a library in a child process.
//!
//! Opening an unknown library runs its constructors in the opening process; a broken one can
//! crash it. So the host re-executes itself (`dsh plugin probe PATH`, hidden) to open the library,
//! and reads the child's one-line JSON report. A child that dies of a signal, hangs, or prints
//! nonsense is reported as such; the parent never crashes.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_abi::Manifest;
use serde::{Deserialize, Serialize};

use super::loader::{LoadError, PluginLibrary};

/// A manifest as printed by `dsh plugin inspect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestInfo {
    pub name: String,
    pub version: String,
    pub abi_version: u32,
    pub hooks: Vec<String>,
    pub description: String,
    pub config_keys: Vec<ConfigKeyInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigKeyInfo {
    pub name: String,
    pub summary: String,
}

impl From<&Manifest> for ManifestInfo {
    fn from(manifest: &Manifest) -> Self {
        ManifestInfo {
            name: manifest.name.to_string(),
            version: manifest.version.to_string(),
            abi_version: manifest.abi_version,
            hooks: manifest.hooks.names().into_iter().map(str::to_owned).collect(),
            description: manifest.description.to_string(),
            config_keys: manifest
                .config_keys
                .iter()
                .map(|key| ConfigKeyInfo { name: key.name.to_string(), summary: key.summary.to_string() })
                .collect(),
        }
    }
}

/// The child's report, one JSON line on stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum ProbeReport {
    Loaded(ManifestInfo),
    Refused { message: String, missing: bool },
}

/// Why inspection failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InspectError {
    /// The library was opened and refused; the message is the loader's.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Missing(String),
    #[error("{path}: {what}")]
    ChildFailed { path: String, what: String },
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs in the child (`dsh plugin probe PATH`): opens the library and prints the report.
pub fn probe(path: &Path) -> bool {
    let report = match PluginLibrary::load(path) {
        Ok(library) => ProbeReport::Loaded(ManifestInfo::from(&library.manifest)),
        Err(err) => {
            ProbeReport::Refused { missing: matches!(err, LoadError::Missing { .. }), message: err.to_string() }
        }
    };
    let loaded = matches!(report, ProbeReport::Loaded(_));
    println!("{}", serde_json::to_string(&report).expect("reports serialise"));
    loaded
}

/// Opens `path` in a child process running `dsh_executable` and returns its manifest.
pub fn inspect_in_child(dsh_executable: &Path, path: &Path) -> Result<ManifestInfo, InspectError> {
    let child_failed = |what: String| InspectError::ChildFailed { path: path.display().to_string(), what };
    let mut child = Command::new(dsh_executable)
        .args(["plugin", "probe"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| child_failed(format!("cannot start the inspecting process: {err}")))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let stdout_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > PROBE_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(child_failed(format!(
                    "the library did not finish loading within {}s; the inspecting process was killed",
                    PROBE_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(err) => return Err(child_failed(format!("cannot wait for the inspecting process: {err}"))),
        }
    };
    let stdout = stdout_reader.join().unwrap_or_default();
    let stderr = stderr_reader.join().unwrap_or_default();
    if let Some(signal) = status.signal() {
        return Err(child_failed(format!(
            "loading the library crashed the inspecting process ({}){}",
            signal_name(signal),
            last_line_note(&stderr)
        )));
    }
    match serde_json::from_str::<ProbeReport>(stdout.lines().last().unwrap_or_default()) {
        Ok(ProbeReport::Loaded(manifest)) => Ok(manifest),
        Ok(ProbeReport::Refused { message, missing: true }) => Err(InspectError::Missing(message)),
        Ok(ProbeReport::Refused { message, missing: false }) => Err(InspectError::Refused(message)),
        Err(_) => Err(child_failed(format!(
            "the inspecting process exited with {status} without a report{}",
            last_line_note(&stderr)
        ))),
    }
}

fn last_line_note(stderr: &str) -> String {
    match stderr.lines().rev().find(|line| !line.trim().is_empty()) {
        Some(line) => format!("; its last words: {}", line.trim()),
        None => String::new(),
    }
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("signal {signal}, {name}")
}
