//! Opening plugin libraries through the stable ABI.
//!
//! Each library is opened with `lib_header_from_path` (never `RootModule::load_from_file`, which
//! caches the first library per interface type and would hand it back for every later path).
//! Libraries are never unloaded. Every failure becomes a [`LoadError`] that names the file and
//! says what is wrong in terms a user can act on.
//!
//! The layout check runs in the direction dsh's compatibility policy needs: the interface the
//! library was built against must be a prefix of this host's — the host may know more variants
//! of a non-exhaustive enum and more fields and methods after a type's last prefix field, so a
//! plugin keeps loading after the interface grows. (abi_stable's own `init_root_module` checks
//! the other way round: it lets a plugin be newer than its host, never older.) A plugin built
//! against a newer interface than the host's is refused.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use abi_stable::abi_stability::abi_checking::{check_layout_compatibility_with_globals, CheckingGlobals};
use abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use abi_stable::std_types::{RErr, ROk, RStr};
use abi_stable::StableAbi;
use dsh_abi::{ConfigError, InstantiateError, Manifest, PluginModuleRef, ABI_VERSION};

use super::instance::RowInstance;

/// The largest plugin library dsh reads (to hash, copy or load it): a release build of a plugin
/// is a few megabytes, a debug build some tens.
pub const MAX_LIBRARY_BYTES: usize = 512 * 1024 * 1024;

/// Whether the library at `library` is still the one `plugin add` installed (`recorded` is
/// its sha256 from `profile.yml`); `Err` says how it differs. The library is never loaded.
pub fn check_installed_hash(library: &std::path::Path, recorded: &str) -> Result<(), String> {
    let bytes = read_library(library).map_err(|err| format!("cannot read {}: {err}", library.display()))?;
    check_hash(library, &bytes, recorded)
}

/// Whether `bytes`, read from `library`, are the library whose sha256 was `recorded`.
pub fn check_hash(library: &std::path::Path, bytes: &[u8], recorded: &str) -> Result<(), String> {
    let found = dsh_session::fsutil::sha256_hex(bytes);
    if found == recorded {
        Ok(())
    } else {
        Err(format!(
            "{} is not the library that was installed (sha256 {}… recorded in profile.yml, {}… found): it changed \
             after `dsh plugin add`",
            library.display(),
            &recorded[..recorded.len().min(12)],
            &found[..12]
        ))
    }
}

/// The bytes of a plugin library, within [`MAX_LIBRARY_BYTES`].
pub fn read_library(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    dsh_session::fsutil::read_limited(path, MAX_LIBRARY_BYTES, "a plugin library")
}

/// Why a library could not be used as a plugin.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LoadError {
    #[error("{}: no such file", path.display())]
    Missing { path: PathBuf },
    #[error("{}: not a dsh plugin ({reason})", path.display())]
    NotAPlugin { path: PathBuf, reason: String },
    #[error("{}: built for another platform ({reason})", path.display())]
    WrongPlatform { path: PathBuf, reason: String },
    #[error("{}: plugin interface mismatch: {summary}", path.display())]
    AbiMismatch { path: PathBuf, summary: String },
    #[error("{}: cannot open library: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error("{}: plugin failed while describing itself: {reason}", path.display())]
    Manifest { path: PathBuf, reason: String },
}

/// An opened plugin library and the manifest it reported.
#[derive(Clone)]
pub struct PluginLibrary {
    pub path: PathBuf,
    pub module: PluginModuleRef,
    pub manifest: Manifest,
}

impl std::fmt::Debug for PluginLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginLibrary").field("path", &self.path).field("manifest", &self.manifest).finish()
    }
}

impl PluginLibrary {
    /// Opens the library at `path`, checks its layout against this host's interface, and asks it
    /// for its manifest.
    pub fn load(path: &Path) -> Result<PluginLibrary, LoadError> {
        if !path.is_file() {
            return Err(LoadError::Missing { path: path.to_owned() });
        }
        // A name without a slash would make the dynamic loader search its library path.
        let absolute = std::path::absolute(path)
            .map_err(|err| LoadError::Open { path: path.to_owned(), reason: err.to_string() })?;
        PluginLibrary::load_from(path, &absolute)
    }

    /// Opens the library `plugin add` installed at `path` only if it is still the one whose
    /// sha256 it recorded: the file is read once, those bytes are hashed, and those same bytes
    /// are loaded — from a sealed in-memory copy, so no file swapped in between can run its
    /// constructor unverified.
    pub fn load_verified(path: &Path, recorded: &str) -> Result<PluginLibrary, String> {
        let bytes = read_library(path).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => LoadError::Missing { path: path.to_owned() }.to_string(),
            _ => format!("cannot read {}: {err}", path.display()),
        })?;
        check_hash(path, &bytes, recorded)?;
        let copy = sealed_copy(&bytes).map_err(|err| format!("cannot keep a copy of {}: {err}", path.display()))?;
        let at = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&copy)));
        let library = PluginLibrary::load_from(path, &at).map_err(|err| err.to_string())?;
        // Never closed: the dynamic loader knows an open library by its name, so this number
        // must never come to name another file while the process lives (libraries are never
        // unloaded either).
        std::mem::forget(copy);
        Ok(library)
    }

    /// Loads the library found at `at`; messages name `path`.
    fn load_from(path: &Path, at: &Path) -> Result<PluginLibrary, LoadError> {
        let header = lib_header_from_path(at).map_err(|err| classify(path, err))?;
        let versions = || {
            format!(
                "[library built against dsh-abi {}, this host uses dsh-abi {}]",
                header.version_strings().version,
                PluginModuleRef::VERSION_STRINGS.version
            )
        };
        let Some(library_layout) = header.layout() else {
            return Err(LoadError::NotAPlugin {
                path: path.to_owned(),
                reason: "its root module carries no type layout to check".to_owned(),
            });
        };
        // Fresh globals: abi_stable's shared ones unify the prefix types of every library checked
        // in the process, which assumes its own direction.
        let globals = CheckingGlobals::new();
        let host_layout = <PluginModuleRef as StableAbi>::LAYOUT;
        check_layout_compatibility_with_globals(library_layout, host_layout, &globals).map_err(|errors| {
            LoadError::AbiMismatch {
                path: path.to_owned(),
                summary: format!("{} {}", summarize_layout_report(&errors.to_string()), versions()),
            }
        })?;
        // SAFETY: the check above proved every type the library was built with a prefix of this
        // host's (the policy in the module doc); fields and variants past it are read only
        // through accessors that tolerate their absence.
        let module =
            unsafe { header.init_root_module_with_unchecked_layout::<PluginModuleRef>() }.map_err(
                |err| match classify(path, err) {
                    LoadError::AbiMismatch { path, summary } => {
                        LoadError::AbiMismatch { path, summary: format!("{summary} {}", versions()) }
                    }
                    other => other,
                },
            )?;
        let manifest = match (module.manifest())() {
            ROk(manifest) => manifest,
            RErr(err) => return Err(LoadError::Manifest { path: path.to_owned(), reason: err.message.into_string() }),
        };
        if manifest.abi_version != ABI_VERSION {
            return Err(LoadError::AbiMismatch {
                path: path.to_owned(),
                summary: format!(
                    "plugin {} speaks dsh ABI version {}, this host speaks {}",
                    manifest.name, manifest.abi_version, ABI_VERSION
                ),
            });
        }
        Ok(PluginLibrary { path: path.to_owned(), module, manifest })
    }
}

/// `bytes` in an anonymous in-memory file sealed against any change.
fn sealed_copy(bytes: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Write as _;
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: the name is NUL-terminated; the flags are valid.
    let raw = unsafe { libc::memfd_create(c"dsh-plugin".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = File::from(owned);
    file.write_all(bytes)?;
    seal(&file)?;
    Ok(OwnedFd::from(file))
}

/// How often sealing a copy is tried while the kernel says its pages are busy.
const SEAL_ATTEMPTS: u32 = 6;

/// Seals the copy against every change. The kernel refuses a write seal (EBUSY) while it still
/// holds extra references to the pages just written — briefly, on a loaded machine — so a busy
/// answer is tried again after a short pause.
fn seal(file: &File) -> std::io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    let mut attempt = 1;
    loop {
        // SAFETY: fcntl on a descriptor the caller owns.
        if unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(file), libc::F_ADD_SEALS, seals) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EBUSY) || attempt == SEAL_ATTEMPTS {
            return Err(err);
        }
        std::thread::sleep(std::time::Duration::from_millis(10 << attempt));
        attempt += 1;
    }
}

/// Why a library could not build an instance for a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstantiateFailure {
    /// The row's config is invalid: every problem the plugin found.
    Config(Vec<ConfigError>),
    /// The plugin failed or panicked while building the instance.
    Failed(String),
}

impl PluginLibrary {
    /// Builds the instance serving row `row_id` with `config` (`null` when the row has none).
    pub fn instantiate(&self, row_id: &str, config: &serde_json::Value) -> Result<RowInstance, InstantiateFailure> {
        let config_json = serde_json::to_string(config).expect("JSON values serialise");
        match (self.module.instantiate())(RStr::from_str(row_id), RStr::from_str(&config_json)) {
            ROk(object) => Ok(RowInstance::new(row_id, &self.manifest.name, self.manifest.hooks, object)),
            RErr(InstantiateError::Config(errors)) => Err(InstantiateFailure::Config(errors.into_iter().collect())),
            RErr(InstantiateError::Failed(err)) => Err(InstantiateFailure::Failed(if err.panicked {
                format!("panicked while instantiating: {}", err.message)
            } else {
                err.message.into_string()
            })),
        }
    }
}

fn classify(path: &Path, err: LibraryError) -> LoadError {
    let path_buf = path.to_owned();
    match err {
        LibraryError::OpenError { path: opened, err } => classify_open_error(path, &opened, err.to_string()),
        LibraryError::GetSymbolError { .. } => LoadError::NotAPlugin {
            path: path_buf,
            reason: "it has no dsh root module; plugins export one with dsh_abi::export_plugin!".to_owned(),
        },
        LibraryError::IncompatibleVersionNumber { expected_version, actual_version, .. } => LoadError::AbiMismatch {
            path: path_buf,
            summary: format!("built against dsh-abi {actual_version}, this host uses dsh-abi {expected_version}"),
        },
        LibraryError::ParseVersionError(err) => {
            LoadError::AbiMismatch { path: path_buf, summary: format!("unreadable interface version: {err}") }
        }
        LibraryError::InvalidAbiHeader(header) => LoadError::AbiMismatch {
            path: path_buf,
            summary: format!(
                "built with an incompatible abi_stable (header {}.{}, this host reads {}.{})",
                header.abi_major,
                header.abi_minor,
                abi_stable::library::AbiHeader::VALUE.abi_major,
                abi_stable::library::AbiHeader::VALUE.abi_minor
            ),
        },
        LibraryError::AbiInstability(report) => {
            LoadError::AbiMismatch { path: path_buf, summary: summarize_layout_report(&report.to_string()) }
        }
        LibraryError::InvalidCAbi { expected, found } => LoadError::WrongPlatform {
            path: path_buf,
            reason: format!("its C ABI differs: expected {expected}, found {found}"),
        },
        LibraryError::RootModule { err, .. } => LoadError::Open {
            path: path_buf,
            reason: format!("its root module failed to initialise: {}", err.to_string().trim()),
        },
        LibraryError::Many(errors) => {
            let first = errors.into_iter().next();
            match first {
                Some(err) => classify(path, err),
                None => LoadError::Open { path: path_buf, reason: "unknown error".to_owned() },
            }
        }
    }
}

/// Tells apart "not a library at all", "a library for another platform" and other open failures
/// from the dynamic loader's message and the file's magic bytes.
fn classify_open_error(path: &Path, opened: &Path, message: String) -> LoadError {
    let path_buf = path.to_owned();
    let reason = message.strip_prefix(&format!("{}: ", opened.display())).unwrap_or(&message).trim().to_owned();
    if let Some(platform) = foreign_binary_kind(path) {
        return LoadError::WrongPlatform { path: path_buf, reason: platform.to_owned() };
    }
    let lowered = reason.to_ascii_lowercase();
    if lowered.contains("wrong elf class")
        || lowered.contains("machine")
        || lowered.contains("architecture")
        || lowered.contains("data encoding")
        || lowered.contains("os abi")
    {
        LoadError::WrongPlatform { path: path_buf, reason }
    } else if lowered.contains("executable") {
        LoadError::NotAPlugin { path: path_buf, reason: format!("an executable, not a shared library: {reason}") }
    } else if lowered.contains("invalid elf header") || lowered.contains("file too short") {
        LoadError::NotAPlugin { path: path_buf, reason: format!("not a shared library: {reason}") }
    } else {
        LoadError::Open { path: path_buf, reason }
    }
}

fn foreign_binary_kind(path: &Path) -> Option<&'static str> {
    let mut magic = [0u8; 4];
    File::open(path).ok()?.read_exact(&mut magic).ok()?;
    match magic {
        [b'M', b'Z', _, _] if !cfg!(windows) => Some("a Windows PE library"),
        [0xcf, 0xfa, 0xed, 0xfe] | [0xfe, 0xed, 0xfa, 0xcf] | [0xca, 0xfe, 0xba, 0xbe]
            if !cfg!(target_os = "macos") =>
        {
            Some("a macOS Mach-O library")
        }
        [0x7f, b'E', b'L', b'F'] if !cfg!(target_os = "linux") => Some("a Linux ELF library"),
        _ => None,
    }
}

/// Condenses abi_stable's layout report (a formatted text of several hundred lines) to the
/// mismatches themselves, deepest first: `Manifest.hooks (Hooks): incompatible type size
/// (plugin: 8, host: 4)`. The check takes the plugin's interface as the expected one, so the
/// report's "expected" is the plugin's and its "found" the host's.
fn summarize_layout_report(report: &str) -> String {
    let mut clauses: Vec<(usize, String)> = Vec::new();
    for block in report.split("error(s)inside:").skip(1) {
        let trace = block.split("Layout of expected type:").next().unwrap_or_default();
        let frames = stack_frames(trace);
        let location = match frames.as_slice() {
            [.., (_, parent), (field, ty)] => format!("{parent}.{field} ({ty})"),
            [(_, ty)] => ty.clone(),
            [] => PluginModuleRef::NAME.to_owned(),
        };
        let mut lines = block.lines().map(str::trim);
        while let Some(line) = lines.next() {
            let Some(message) = line.strip_prefix("Error:") else { continue };
            let mut expected_found = Vec::new();
            for label in ["Expected:", "Found:"] {
                if lines.next() == Some(label) {
                    expected_found.push(lines.next().unwrap_or_default().to_owned());
                }
            }
            let clause = match expected_found.as_slice() {
                [plugin, host] => format!("{location}: {message} (plugin: {plugin}, host: {host})"),
                _ => format!("{location}: {message}"),
            };
            if !clauses.iter().any(|(_, existing)| *existing == clause) {
                clauses.push((frames.len(), clause));
            }
        }
    }
    clauses.sort_by_key(|(depth, _)| std::cmp::Reverse(*depth));
    const SHOWN: usize = 3;
    let mut summary = clauses.iter().take(SHOWN).map(|(_, clause)| clause.as_str()).collect::<Vec<_>>().join("; ");
    if clauses.len() > SHOWN {
        summary.push_str(&format!("; and {} more", clauses.len() - SHOWN));
    }
    if summary.is_empty() {
        "the library's types do not match this host's interface".to_owned()
    } else {
        summary
    }
}

/// The `(field_name, type)` pairs of a report's stack trace, outermost first, without the
/// function-pointer plumbing between them.
fn stack_frames(trace: &str) -> Vec<(String, String)> {
    let mut frames = Vec::new();
    let mut field = None;
    for line in trace.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("field_name:") {
            field = Some(name.to_owned());
        } else if let (Some(ty), Some(name)) = (line.strip_prefix("type:"), field.take()) {
            if ty != "AFunctionPointer" && !name.starts_with("__") {
                frames.push((name, ty.to_owned()));
            }
        }
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_report_is_condensed_to_the_mismatched_types_deepest_first() {
        let report = include_str!("testdata/layout-mismatch-report.txt");
        let summary = summarize_layout_report(report);
        assert!(
            summary.starts_with("Hooks.field_0 (u64): mismatched type (plugin: u32, host: u64); Manifest.hooks (Hooks): incompatible type size (plugin: 4, host: 8)"),
            "{summary}"
        );
        assert!(summary.len() < 400, "{summary}");
    }

    #[test]
    fn an_unparseable_report_still_says_what_is_wrong() {
        assert_eq!(summarize_layout_report("garbage"), "the library's types do not match this host's interface");
    }
}
