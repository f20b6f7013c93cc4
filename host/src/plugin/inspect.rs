//! Inspecting a library in a child process.
//!
//! Opening an unknown library runs its constructors in the opening process; a broken one can
//! crash it. So the host re-executes itself (`dsh plugin probe PATH`, hidden) to open the library,
//! and reads the child's one-line JSON report. A child that dies of a signal, hangs, or prints
//! nonsense is reported as such; the parent never crashes. The child writes into files, not
//! pipes, and runs in its own process group, so nothing it starts (a library whose constructor
//! forks a child that keeps stdout open) can make the parent wait past its timeout: at the end
//! the whole group is killed.
//!
//! The child also makes the library panic inside its export guard: a library built with
//! `panic = "abort"` aborts the child there, and is refused — in the host, its first panic would
//! abort the whole process.

use std::io::{Read, Seek, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
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
    Refused {
        message: String,
        missing: bool,
    },
    /// Printed just before the unwinding check: a child that dies after it aborted there.
    CheckingUnwinding,
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

fn report(report: &ProbeReport) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", serde_json::to_string(report).expect("reports serialise"));
    let _ = out.flush();
}

/// Runs in the child (`dsh plugin probe PATH`): opens the library, makes it panic inside its
/// export guard, and prints the report.
pub fn probe(path: &Path) -> bool {
    let library = match PluginLibrary::load(path) {
        Ok(library) => library,
        Err(err) => {
            report(&ProbeReport::Refused {
                missing: matches!(err, LoadError::Missing { .. }),
                message: err.to_string(),
            });
            return false;
        }
    };
    if let Some(check_unwinding) = library.module.check_unwinding() {
        report(&ProbeReport::CheckingUnwinding);
        if let abi_stable::std_types::ROk(()) = check_unwinding() {
            report(&ProbeReport::Refused {
                missing: false,
                message: format!("{}: its unwinding check did not panic; it is not a sound dsh plugin", path.display()),
            });
            return false;
        }
    }
    report(&ProbeReport::Loaded(ManifestInfo::from(&library.manifest)));
    true
}

/// Opens `path` in a child process running `dsh_executable` and returns its manifest.
pub fn inspect_in_child(dsh_executable: &Path, path: &Path) -> Result<ManifestInfo, InspectError> {
    let child_failed = |what: String| InspectError::ChildFailed { path: path.display().to_string(), what };
    let capture = || tempfile::tempfile().map_err(|err| child_failed(format!("cannot make a capture file: {err}")));
    let (mut stdout, mut stderr) = (capture()?, capture()?);
    let as_stdio = |file: &std::fs::File| {
        file.try_clone().map(std::process::Stdio::from).map_err(|err| child_failed(format!("cannot capture: {err}")))
    };
    let mut child = Command::new(dsh_executable)
        .args(["plugin", "probe"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(as_stdio(&stdout)?)
        .stderr(as_stdio(&stderr)?)
        .process_group(0)
        .spawn()
        .map_err(|err| child_failed(format!("cannot start the inspecting process: {err}")))?;
    let status = wait_for_probe(&mut child).map_err(child_failed)?;
    kill_group(child.id());
    let read = |file: &mut std::fs::File| {
        let mut text = String::new();
        let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
        text
    };
    let (stdout, stderr) = (read(&mut stdout), read(&mut stderr));
    let last_report = stdout.lines().rev().find_map(|line| serde_json::from_str::<ProbeReport>(line).ok());
    if let Some(signal) = status.signal() {
        if matches!(last_report, Some(ProbeReport::CheckingUnwinding)) {
            return Err(InspectError::Refused(format!(
                "{}: the library aborts its process when it panics ({}): it was built with panic = \"abort\"; \
                 rebuild it with panic = \"unwind\" (remove `panic = \"abort\"` from its Cargo profile), \
                 or its first panic would end the host",
                path.display(),
                signal_name(signal)
            )));
        }
        return Err(child_failed(format!(
            "loading the library crashed the inspecting process ({}){}",
            signal_name(signal),
            last_line_note(&stderr)
        )));
    }
    match last_report {
        Some(ProbeReport::Loaded(manifest)) => Ok(manifest),
        Some(ProbeReport::Refused { message, missing: true }) => Err(InspectError::Missing(message)),
        Some(ProbeReport::Refused { message, missing: false }) => Err(InspectError::Refused(message)),
        Some(ProbeReport::CheckingUnwinding) | None => Err(child_failed(format!(
            "the inspecting process exited with {status} without a report{}",
            last_line_note(&stderr)
        ))),
    }
}

/// The probe's exit status, once it ends within [`PROBE_TIMEOUT`]; else it is killed and `Err`
/// says why.
fn wait_for_probe(child: &mut std::process::Child) -> Result<std::process::ExitStatus, String> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if started.elapsed() > PROBE_TIMEOUT => {
                kill_group(child.id());
                let _ = child.wait();
                return Err(format!(
                    "the library did not finish loading within {}s; the inspecting process was killed",
                    PROBE_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(err) => return Err(format!("cannot wait for the inspecting process: {err}")),
        }
    }
}

/// Kills the probe's process group: the child and anything its library started.
fn kill_group(child: u32) {
    // SAFETY: a negative pid signals the process group the child leads (it was spawned with
    // process_group(0)); the group holds only the probe and what it started.
    unsafe {
        libc::kill(-(child as libc::pid_t), libc::SIGKILL);
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
