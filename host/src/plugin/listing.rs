//! What `dsh plugin list` shows of a profile: every package it has (installed, bundle layers,
//! bundled packages its rows name), the rows each serves, and whether its library is sound.

use std::path::{Path, PathBuf};

use crate::profile::{Home, LayerScope, Profile};

pub struct Listed {
    pub name: String,
    pub version: Option<String>,
    pub source: String,
    pub library: Option<PathBuf>,
    pub sha256: Option<String>,
    pub bundle: Option<usize>,
    pub rows: Vec<String>,
    /// Whether the profile lists it (`plugin remove` takes it out); dsh's own bundled packages
    /// its rows name are not the profile's to remove.
    pub removable: bool,
}

/// Every package of the profile: installed ones, bundle layers, and the bundled packages its
/// rows name (the base bundle's among them), each with the rows it serves.
pub fn profile_packages(home: &Home, profile: &Profile, rows_unknown: impl FnOnce(anyhow::Error)) -> Vec<Listed> {
    let bundle_position = |name: &str| profile.manifest.bundles.iter().position(|bundle| bundle == name).map(|p| p + 1);
    let mut rows_of: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    match profile.compose(home, &[], LayerScope::All) {
        Ok(composition) => {
            for (row, enabled) in composition.service_rows() {
                let field = |key: &str| row.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
                if let (Some(id), Some(name)) = (field("id"), field("name")) {
                    rows_of.entry(name).or_default().push(if enabled { id } else { format!("{id} (disabled)") });
                }
            }
        }
        Err(err) => rows_unknown(err),
    }
    let mut listed = Vec::new();
    for (name, package) in &profile.manifest.packages {
        listed.push(Listed {
            name: name.clone(),
            version: Some(package.version.clone()),
            source: package.source.clone(),
            library: Some(profile.dir.join(&package.library)),
            sha256: Some(package.sha256.clone()),
            bundle: bundle_position(name),
            rows: rows_of.remove(name).unwrap_or_default(),
            removable: true,
        });
    }
    for bundle in profile.manifest.bundles.iter().filter(|bundle| !profile.manifest.packages.contains_key(*bundle)) {
        let bundled = crate::bundled::package(bundle);
        listed.push(Listed {
            name: bundle.clone(),
            version: bundled.map(|package| package.version.to_owned()),
            source: "bundled layer".to_owned(),
            library: None,
            sha256: None,
            bundle: bundle_position(bundle),
            rows: rows_of.remove(bundle).unwrap_or_default(),
            removable: true,
        });
    }
    for (name, rows) in rows_of {
        let Some(bundled) = crate::bundled::package(&name).filter(|package| package.has_library) else { continue };
        listed.push(Listed {
            library: super::catalog::find_bundled_library(&name).ok(),
            name,
            version: Some(bundled.version.to_owned()),
            source: "bundled with dsh".to_owned(),
            sha256: None,
            bundle: None,
            rows,
            removable: false,
        });
    }
    listed
}

impl Listed {
    /// The ABI version of a sound library (`None` for a layer without one), or why it is not
    /// sound: changed since it was installed, refused by inspection, or missing.
    pub fn library_status(&self, dsh_executable: &Path) -> Result<Option<u32>, String> {
        if let (Some(library), Some(recorded)) = (&self.library, &self.sha256) {
            super::loader::check_installed_hash(library, recorded)?;
        }
        match (&self.library, self.source.as_str()) {
            (Some(library), _) => super::inspect::inspect_in_child(dsh_executable, library)
                .map(|info| Some(info.abi_version))
                .map_err(|err| err.to_string()),
            (None, "bundled layer") => Ok(None),
            (None, _) => Err("the library is missing".to_owned()),
        }
    }
}
