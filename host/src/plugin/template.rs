//! `dsh plugin new NAME`: a plugin crate that builds out of any tree — a working executor with
//! unit tests against the interface's fake host, a bundle layer that places its row before
//! `llm-retry`, the `[package.metadata.dsh]` that `plugin add` reads, and a vendored copy of this
//! host's interface crate (so it needs neither the dsh sources nor a registry release of them).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::bundled::INTERFACE_FILES;
use dsh_session::fsutil;

const FILES: [(&str, &str); 5] = [
    ("Cargo.toml", include_str!("../../templates/plugin/Cargo.toml.tmpl")),
    ("src/lib.rs", include_str!("../../templates/plugin/src/lib.rs.tmpl")),
    ("cordis.patch.yml", include_str!("../../templates/plugin/cordis.patch.yml.tmpl")),
    ("README.md", include_str!("../../templates/plugin/README.md.tmpl")),
    (".gitignore", include_str!("../../templates/plugin/gitignore.tmpl")),
];

/// The interface crate's folder inside a generated crate.
const INTERFACE_DIR: &str = "dsh-abi";

/// Crate names a new plugin cannot take: the crates it is built with, and the names Rust keeps.
const TAKEN_CRATE_NAMES: [&str; 10] =
    ["dsh_abi", "abi_stable", "std", "core", "alloc", "proc_macro", "test", "self", "crate", "super"];

/// Whether `name` can name both a dsh package and a Rust crate that builds: ASCII letters,
/// digits, `-` and `_`, starting with a letter, and none of [`TAKEN_CRATE_NAMES`].
pub fn is_plugin_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.len() <= 64
        && !TAKEN_CRATE_NAMES.contains(&name.replace('-', "_").as_str())
}

/// The files of a new plugin crate named `name`: relative path and text.
pub fn files(name: &str) -> Vec<(PathBuf, String)> {
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{dsh_version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{abi_version}}", &dsh_abi::ABI_VERSION.to_string())
    };
    let template = FILES.iter().map(|(path, text)| (PathBuf::from(path), fill(text)));
    let interface =
        INTERFACE_FILES.iter().map(|(path, text)| (Path::new(INTERFACE_DIR).join(path), (*text).to_owned()));
    template.chain(interface).collect()
}

/// Writes a new plugin crate named `name` into `dir`, which must not exist or be empty; returns
/// the files written. Nothing is left behind on failure.
pub fn create(dir: &Path, name: &str) -> anyhow::Result<Vec<PathBuf>> {
    if !is_plugin_name(name) {
        bail!(
            "{} cannot name a plugin: use ASCII letters, digits, '-' and '_', starting with a letter, and not a \
             crate the plugin is built with (dsh-abi, abi_stable) or a name Rust keeps (std, core, test, …)",
            dsh_abi::js::to_string(name)
        );
    }
    let existed = dir.exists();
    if existed && std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?.next().is_some() {
        bail!("{} already exists and is not empty; choose another directory", dir.display());
    }
    let written = write_all(dir, name);
    if written.is_err() {
        if existed {
            let _ = std::fs::remove_dir_all(dir).and_then(|()| std::fs::create_dir(dir));
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    written
}

fn write_all(dir: &Path, name: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (relative, text) in files(name) {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fsutil::write_atomic(&path, text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(relative);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_would_clash_with_the_crates_a_plugin_is_built_with_is_refused() {
        for taken in ["dsh-abi", "dsh_abi", "abi-stable", "std", "test"] {
            assert!(!is_plugin_name(taken), "{taken}");
        }
        assert!(is_plugin_name("dsh-abi-helper"));
    }

    #[test]
    fn a_new_crate_names_itself_everywhere_and_vendors_the_interface() {
        let files = files("only-503");
        let text = |path: &str| &files.iter().find(|(relative, _)| relative == Path::new(path)).unwrap().1;
        assert!(text("Cargo.toml").contains("name = \"only-503\""));
        assert!(text("Cargo.toml").contains("[package.metadata.dsh]\nbundle = \"cordis.patch.yml\""));
        assert!(text("cordis.patch.yml").contains("  before: llm-retry"));
        assert!(text("src/lib.rs").contains("const NAME: &str = \"only-503\";"));
        let placeholders = files.iter().filter(|(relative, _)| !relative.starts_with(INTERFACE_DIR));
        assert!(placeholders.clone().all(|(_, text)| !text.contains("{{name}}") && !text.contains("{{dsh_version}}")));
        let interface = text("dsh-abi/Cargo.toml");
        assert!(interface.contains("name = \"dsh-abi\"") && !interface.contains("workspace = true"), "{interface}");
        assert!(files.iter().any(|(relative, _)| relative == Path::new("dsh-abi/src/ffi.rs")));
    }

    #[test]
    fn names_must_suit_a_crate_and_a_package() {
        assert!(is_plugin_name("only-503") && is_plugin_name("my_plugin"));
        for bad in ["", "503-only", "a.b", "a/b", "..", "x y"] {
            assert!(!is_plugin_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_existing_non_empty_directory_is_refused_and_left_alone() {
        let scratch = tempfile::tempdir().unwrap();
        std::fs::write(scratch.path().join("keep.txt"), "mine").unwrap();
        assert!(create(scratch.path(), "x").is_err());
        assert_eq!(std::fs::read_to_string(scratch.path().join("keep.txt")).unwrap(), "mine");
        let fresh = scratch.path().join("fresh");
        assert!(create(&fresh, "fresh").unwrap().contains(&PathBuf::from("src/lib.rs")));
    }
}
