//! Where a row's package comes from: built into the host, installed in the profile, or bundled
//! with dsh (manifest and layer compiled in, library found beside the `dsh` executable, then in
//! `../lib/dsh/` relative to it — the `PREFIX/bin` + `PREFIX/lib/dsh` layout `install.sh`
//! writes — then in `$DSH_PLUGIN_PATH`).

use std::path::{Path, PathBuf};

use crate::bundled;
use crate::profile::Profile;

/// Row services implemented by the host itself.
pub const BUILT_IN_SERVICES: [&str; 4] = ["agent", "llm-openai", "llm-mock", "mcp"];

/// Extra directories searched for bundled plugin libraries, `:`-separated.
pub const PLUGIN_PATH_ENV: &str = "DSH_PLUGIN_PATH";

/// `libllm_retry.so` for `llm-retry` on Linux.
pub fn library_file_name(package: &str) -> String {
    format!("{}{}{}", std::env::consts::DLL_PREFIX, package.replace('-', "_"), std::env::consts::DLL_SUFFIX)
}

/// Where bundled libraries are looked for, in order: beside the `dsh` executable, in
/// `../lib/dsh/` relative to it, then each directory of `$DSH_PLUGIN_PATH`.
pub fn library_search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_owned)) {
        if let Some(prefix) = dir.parent() {
            dirs.push(dir.clone());
            dirs.push(prefix.join("lib").join("dsh"));
        } else {
            dirs.push(dir);
        }
    }
    if let Some(paths) = std::env::var_os(PLUGIN_PATH_ENV) {
        dirs.extend(std::env::split_paths(&paths).filter(|dir| !dir.as_os_str().is_empty()));
    }
    dirs
}

/// A bundled package's library that is nowhere dsh looks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the library {file} of bundled package \"{package}\" is not in {}: install dsh with ./install.sh PREFIX \
     (PREFIX/bin/dsh beside PREFIX/lib/dsh/), or build it in its checkout with cargo build --release --workspace",
    searched(.dirs)
)]
pub struct MissingLibrary {
    pub package: String,
    pub file: String,
    pub dirs: Vec<PathBuf>,
}

fn searched(dirs: &[PathBuf]) -> String {
    let mut shown: Vec<String> = dirs.iter().map(|dir| dir.display().to_string()).collect();
    if std::env::var_os(PLUGIN_PATH_ENV).is_none() {
        shown.push("$DSH_PLUGIN_PATH (unset)".to_owned());
    }
    shown.join(", ")
}

/// The library of a bundled package.
pub fn find_bundled_library(package: &str) -> Result<PathBuf, MissingLibrary> {
    let file = library_file_name(package);
    let dirs = library_search_dirs();
    dirs.iter().map(|dir| dir.join(&file)).find(|candidate| candidate.is_file()).ok_or(MissingLibrary {
        package: package.to_owned(),
        file,
        dirs,
    })
}

/// What serves a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowPackage {
    BuiltIn(&'static str),
    /// A plugin library; `installed_sha256` is the hash `plugin add` recorded for a package
    /// installed in the profile (`None` for a bundled one).
    Library {
        package: String,
        path: PathBuf,
        installed_sha256: Option<String>,
    },
}

/// Why a row's package cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("row \"{row}\": {missing}")]
    BundledLibraryNotFound { row: String, missing: MissingLibrary },
    #[error(
        "row \"{row}\": the library of package \"{package}\" is missing ({}); install it again with \
         'dsh plugin --profile {profile} add <its crate or package directory>', or remove it with \
         'dsh plugin --profile {profile} remove {package}'",
        path.display()
    )]
    InstalledLibraryNotFound { row: String, package: String, profile: String, path: PathBuf },
    #[error(
        "row \"{row}\": unknown package \"{package}\" (not built in, not installed in profile {profile}, not bundled \
         with dsh; install it with 'dsh plugin --profile {profile} add <package>')"
    )]
    UnknownPackage { row: String, package: String, profile: String },
}

/// Resolves the package named by row `row_id`: built in, installed in `profile`, or bundled.
pub fn resolve_row_package(profile: &Profile, row_id: &str, package: &str) -> Result<RowPackage, ResolveError> {
    if let Some(service) = BUILT_IN_SERVICES.iter().find(|service| **service == package) {
        return Ok(RowPackage::BuiltIn(service));
    }
    if let Some(installed) = profile.manifest.packages.get(package) {
        let path = profile.dir.join(&installed.library);
        return if path.is_file() {
            Ok(RowPackage::Library {
                package: package.to_owned(),
                path,
                installed_sha256: Some(installed.sha256.clone()),
            })
        } else {
            Err(ResolveError::InstalledLibraryNotFound {
                row: row_id.to_owned(),
                package: package.to_owned(),
                profile: profile.name.clone(),
                path,
            })
        };
    }
    match bundled::package(package) {
        Some(bundled) if bundled.has_library => match find_bundled_library(package) {
            Ok(path) => Ok(RowPackage::Library { package: package.to_owned(), path, installed_sha256: None }),
            Err(missing) => Err(ResolveError::BundledLibraryNotFound { row: row_id.to_owned(), missing }),
        },
        _ => Err(ResolveError::UnknownPackage {
            row: row_id.to_owned(),
            package: package.to_owned(),
            profile: profile.name.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names_follow_the_platform_convention() {
        assert_eq!(
            library_file_name("llm-retry"),
            format!("{}llm_retry{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)
        );
    }
}
