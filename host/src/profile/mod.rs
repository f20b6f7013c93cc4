//! `$DSH_HOME` and its profiles: resolving the home, creating profiles (from the shipped templates,
//! never overwriting a file), reading and writing `profile.yml`, and stacking a profile's patch
//! layers in their fixed order — bundles (profile order), the profile's `cordis.patch.yml`,
//! `$DSH_HOME/cordis.patch.yml`, then `--patch` files in argument order.

pub mod manage;
pub mod patch;
pub mod toggle;
pub mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::bundled;
use crate::NotFound;
use dsh_session::fsutil;
use dsh_session::lock::{LockError, WriterLock};
use patch::{Composition, Layer, LayerKind};

/// How long a profile change waits for another process changing the same profile.
pub const PROFILE_LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// The variable that moves the dsh home.
pub const HOME_ENV: &str = "DSH_HOME";

/// The dsh home: `--home`, else a non-blank `$DSH_HOME` (`~` expanded), else `~/.dsh`.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

fn user_home() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|home| !home.is_empty()).map(PathBuf::from)
}

fn expand_tilde(path: &str) -> PathBuf {
    match (path.strip_prefix('~'), user_home()) {
        (Some(""), Some(home)) => home,
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(&rest[1..]),
        _ => PathBuf::from(path),
    }
}

impl Home {
    pub fn resolve(flag: Option<&Path>) -> anyhow::Result<Home> {
        let root = match flag {
            Some(path) => path.to_owned(),
            None => match std::env::var(HOME_ENV) {
                Ok(value) if !value.trim().is_empty() => expand_tilde(value.trim()),
                _ => user_home().context("cannot find the dsh home: set --home, DSH_HOME or HOME")?.join(".dsh"),
            },
        };
        let root =
            std::path::absolute(&root).with_context(|| format!("cannot resolve the dsh home {}", root.display()))?;
        Ok(Home { root })
    }

    pub fn at(root: PathBuf) -> Home {
        Home { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// Where the writer locks of profiles live (never deleted, so every writer locks the same
    /// file).
    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// The home-level user layer, which outranks every profile layer.
    pub fn patch_path(&self) -> PathBuf {
        self.root.join("cordis.patch.yml")
    }

    /// The anonymous id the DeepSeek route's attribution header carries, as DeepSeek Harness
    /// keeps it: a UUID in `.anonymous-user-id`, created on first use (two processes creating it
    /// at once agree on the one that landed).
    pub fn anonymous_user_id(&self) -> std::io::Result<String> {
        let path = self.root.join(".anonymous-user-id");
        let read = || -> Option<String> {
            let text = fsutil::read_text_limited(&path, fsutil::MAX_SETTINGS_FILE_BYTES, "an id file").ok()?;
            let id = text.trim();
            uuid::Uuid::try_parse(id).is_ok().then(|| id.to_owned())
        };
        if let Some(id) = read() {
            return Ok(id);
        }
        std::fs::create_dir_all(&self.root)?;
        let created = uuid::Uuid::new_v4().to_string();
        if fsutil::create_atomic(&path, format!("{created}\n").as_bytes())? {
            return Ok(created);
        }
        match read() {
            Some(id) => Ok(id),
            None => {
                fsutil::write_atomic(&path, format!("{created}\n").as_bytes())?;
                Ok(created)
            }
        }
    }

    /// How a file is named in messages: `$DSH_HOME/…` inside the home, else as an absolute path.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(relative) => format!("$DSH_HOME/{}", relative.display()),
            Err(_) => std::path::absolute(path).unwrap_or_else(|_| path.to_owned()).display().to_string(),
        }
    }
}

/// `profile.yml`: the bundle list and the installed packages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileManifest {
    #[serde(default)]
    pub bundles: Vec<String>,
    #[serde(default)]
    pub packages: BTreeMap<String, InstalledPackage>,
}

/// One installed package, as recorded in `profile.yml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstalledPackage {
    pub version: String,
    /// `bundled`, `crate:<dir>` or `package:<dir>`.
    pub source: String,
    /// The library, relative to the profile directory.
    pub library: String,
    pub sha256: String,
}

/// What a package name may be, as every refusal says it.
pub const PACKAGE_NAME_RULE: &str =
    "a package name is one path component of letters, digits, '.', '_' and '-', or @scope/name of two";

/// Whether `name` can name a package: one path component of `[A-Za-z0-9._-]` (not `.` or `..`),
/// or a scoped name `@scope/name` of two such components, as npm (and DeepSeek Harness) names
/// them. A scoped package lives in `plugins/@scope/name/`.
pub fn is_package_name(name: &str) -> bool {
    match name.strip_prefix('@') {
        Some(scoped) => scoped.split_once('/').is_some_and(|(scope, leaf)| is_component(scope) && is_component(leaf)),
        None => is_component(name),
    }
}

/// One path component that stays where it is put: not empty, `.` or `..`, only `[A-Za-z0-9._-]`.
fn is_component(text: &str) -> bool {
    !text.is_empty()
        && text != "."
        && text != ".."
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl ProfileManifest {
    /// Every package and bundle name is one path component, and every library lies in its
    /// package's folder (`plugins/<name>/<file>`): nothing in a `profile.yml` can point outside
    /// the profile.
    pub fn validate(&self) -> Result<(), String> {
        for name in self.packages.keys().chain(&self.bundles) {
            if !is_package_name(name) {
                return Err(format!("package name {} is refused: {PACKAGE_NAME_RULE}", json_quote(name)));
            }
        }
        for (name, package) in &self.packages {
            let file = package.library.strip_prefix("plugins/").and_then(|rest| rest.strip_prefix(name.as_str()));
            let inside = file.and_then(|file| file.strip_prefix('/')).is_some_and(is_component);
            if !inside {
                return Err(format!(
                    "package {}: library {} must be plugins/{name}/<file>",
                    json_quote(name),
                    json_quote(&package.library)
                ));
            }
        }
        Ok(())
    }

    pub fn to_yaml(&self) -> String {
        let value = serde_json::to_value(self).expect("the manifest serialises");
        format!(
            "# dsh profile manifest: the bundle layers in order, and the installed plugin packages.\n{}",
            yaml::to_string(&value)
        )
    }
}

const ROOT_CONFIG: &str = "\
# dsh profile root: an empty row list. Rows come from patch layers: each bundle listed in
# profile.yml, then cordis.patch.yml, then $DSH_HOME/cordis.patch.yml, then --patch files.
# Edit cordis.patch.yml, not this file.
[]
";

const USER_LAYER: &str = "\
# Your patch layer for this dsh profile, applied after every bundle layer: a top-level YAML
# array of loader patch entries (overrides by id, `disabled: true`, insert lists). Configs are
# replaced, not merged.
[]
";

/// A profile name no folder can have (a usage error).
#[derive(Debug, thiserror::Error)]
#[error("invalid profile name {0}: it must be non-empty, without / or \\, and not . or ..")]
pub struct InvalidName(String);

/// The bundle list a profile gets when it has no template (`dsh plugin --profile NEW add …`).
pub const DEFAULT_BUNDLES: [&str; 1] = ["dsh-base"];

/// What creating a profile made, newest last: a command that fails removes exactly these, and
/// never a folder or file that was there before.
#[derive(Debug, Default)]
pub struct Created {
    pub paths: Vec<PathBuf>,
}

impl Created {
    /// Removes what was created: files, then folders that are empty again.
    pub fn undo(self) {
        for path in self.paths.iter().rev() {
            let _ = if path.is_dir() { std::fs::remove_dir(path) } else { std::fs::remove_file(path) };
        }
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

/// A profile directory and its manifest.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub dir: PathBuf,
    pub manifest: ProfileManifest,
}

/// Which layers to stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerScope {
    /// Every layer.
    All,
    /// Bundle layers only (`dump --bundles-only`): user layers are not even read.
    BundlesOnly,
}

/// Whether a profile folder has its `profile.yml` entry, whatever it is (reading it says when it
/// is not a file).
fn has_manifest(dir: &Path) -> bool {
    dir.join("profile.yml").symlink_metadata().is_ok()
}

impl Profile {
    pub fn validate_name(name: &str) -> Result<(), InvalidName> {
        if name.is_empty() || name.contains('/') || name.contains('\\') || name == "." || name == ".." {
            return Err(InvalidName(json_quote(name)));
        }
        Ok(())
    }

    fn dir_of(home: &Home, name: &str) -> anyhow::Result<PathBuf> {
        Self::validate_name(name)?;
        Ok(home.root().join("profiles").join(name))
    }

    /// Takes the one-writer lock of profile `name`, waiting up to [`PROFILE_LOCK_PATIENCE`] for
    /// another process that is changing it (`waiting` is told once, with the holder).
    pub fn lock(
        home: &Home,
        name: &str,
        waiting: impl FnOnce(&dsh_session::lock::Busy),
    ) -> Result<WriterLock, LockError> {
        Self::validate_name(name).map_err(|err| LockError::Io {
            path: home.locks_dir(),
            reason: std::io::Error::new(std::io::ErrorKind::InvalidInput, err.to_string()),
        })?;
        let locks = home.locks_dir();
        std::fs::create_dir_all(&locks).map_err(|reason| LockError::Io { path: locks.clone(), reason })?;
        let path = locks.join(format!("profile-{name}.lock"));
        WriterLock::acquire_waiting(&path, &format!("profile {name}"), PROFILE_LOCK_PATIENCE, waiting)
    }

    /// Opens profile `name`, creating it first (under its lock) when a template of that name ships
    /// with dsh.
    pub fn open(home: &Home, name: &str) -> anyhow::Result<Profile> {
        let dir = Self::dir_of(home, name)?;
        if !has_manifest(&dir) {
            let Some(template) = bundled::template(name) else {
                return Err(NotFound(format!(
                    "profile {} does not exist; create it with 'dsh profile new {name}' (or 'dsh plugin --profile {name} add <package>')",
                    json_quote(name)
                ))
                .into());
            };
            let _lock = Self::lock(home, name, |busy| eprintln!("dsh: waiting: {busy}"))?;
            if !has_manifest(&dir) {
                Self::create(&dir, &template_bundles(template))?;
            }
        }
        Self::load(home, name, dir)
    }

    /// Profile `name` as it is, or — a template not created yet — as it would be created, without
    /// writing anything (for commands that must leave the home as it is).
    pub fn peek(home: &Home, name: &str) -> anyhow::Result<Profile> {
        let dir = Self::dir_of(home, name)?;
        if has_manifest(&dir) {
            return Self::load(home, name, dir);
        }
        match bundled::template(name) {
            Some(template) => Ok(Profile {
                name: name.to_owned(),
                dir,
                manifest: ProfileManifest { bundles: template_bundles(template), ..ProfileManifest::default() },
            }),
            None => Err(NotFound(format!("profile {} does not exist", json_quote(name))).into()),
        }
    }

    /// Every profile a command can name: those under the home and the shipped templates, sorted.
    pub fn names(home: &Home) -> Vec<String> {
        let mut names: Vec<String> =
            bundled::PROFILE_TEMPLATES.iter().map(|template| template.name.to_owned()).collect();
        if let Ok(entries) = std::fs::read_dir(home.root().join("profiles")) {
            let created = entries.filter_map(|entry| entry.ok()?.file_name().into_string().ok());
            names.extend(created.filter(|name| Self::dir_of(home, name).is_ok_and(|dir| has_manifest(&dir))));
        }
        names.sort();
        names.dedup();
        names
    }

    /// Opens profile `name`, which must exist (no template is instantiated).
    pub fn existing(home: &Home, name: &str) -> anyhow::Result<Profile> {
        let dir = Self::dir_of(home, name)?;
        if !has_manifest(&dir) {
            return Err(NotFound(format!("profile {} does not exist", json_quote(name))).into());
        }
        Self::load(home, name, dir)
    }

    /// Opens profile `name` under its writer `_lock`, creating it (from its template, else with
    /// the base bundle) if needed. Returns what was created, so a command that fails can remove
    /// exactly that.
    pub fn open_or_create(home: &Home, name: &str, _lock: &WriterLock) -> anyhow::Result<(Profile, Created)> {
        let dir = Self::dir_of(home, name)?;
        if has_manifest(&dir) {
            return Ok((Self::load(home, name, dir)?, Created::default()));
        }
        let bundles: Vec<String> = match bundled::template(name) {
            Some(template) => template_bundles(template),
            None => DEFAULT_BUNDLES.iter().map(|bundle| (*bundle).to_owned()).collect(),
        };
        let created = Self::create(&dir, &bundles)?;
        Ok((Self::load(home, name, dir)?, created))
    }

    /// Creates whatever of the profile's folders and files is missing; never overwrites one.
    fn create(dir: &Path, bundles: &[String]) -> anyhow::Result<Created> {
        let mut created = Created::default();
        for folder in [dir.to_owned(), dir.join("plugins")] {
            if !folder.is_dir() {
                std::fs::create_dir_all(&folder)
                    .with_context(|| format!("cannot create profile folder {}", folder.display()))?;
                created.paths.push(folder);
            }
        }
        let manifest = ProfileManifest { bundles: bundles.to_vec(), packages: BTreeMap::new() };
        for (file, contents) in [
            ("cordis.yml", ROOT_CONFIG.to_owned()),
            ("cordis.patch.yml", USER_LAYER.to_owned()),
            ("profile.yml", manifest.to_yaml()),
        ] {
            let path = dir.join(file);
            if fsutil::create_atomic(&path, contents.as_bytes())
                .with_context(|| format!("cannot create {}", path.display()))?
            {
                created.paths.push(path);
            }
        }
        Ok(created)
    }

    fn load(home: &Home, name: &str, dir: PathBuf) -> anyhow::Result<Profile> {
        let path = dir.join("profile.yml");
        let shown = home.display(&path);
        let text = fsutil::read_text_limited(&path, fsutil::MAX_SETTINGS_FILE_BYTES, "profile.yml")
            .with_context(|| format!("cannot read {shown}"))?;
        let manifest: ProfileManifest = yaml::from_str::<Option<ProfileManifest>>(&text)
            .with_context(|| format!("invalid {shown}"))?
            .unwrap_or_default();
        manifest.validate().map_err(|problem| anyhow::anyhow!("invalid {shown}: {problem}"))?;
        Ok(Profile { name: name.to_owned(), dir, manifest })
    }

    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join("profile.yml")
    }

    /// Writes `profile.yml` atomically.
    pub fn save(&self) -> anyhow::Result<()> {
        let path = self.manifest_path();
        fsutil::write_atomic(&path, self.manifest.to_yaml().as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// The bundle layer of `bundle`: an installed package's layer file, else a bundled one.
    fn bundle_layer(&self, home: &Home, bundle: &str) -> anyhow::Result<Layer> {
        if self.manifest.packages.contains_key(bundle) {
            let folder = self.dir.join("plugins").join(bundle);
            if !folder.is_dir() {
                bail!(
                    "the folder of profile bundle {} is missing ({}): install the package again with `dsh plugin \
                     --profile {} add …`, or remove it",
                    json_quote(bundle),
                    home.display(&folder),
                    self.name
                );
            }
            let path = folder.join("cordis.patch.yml");
            if path.is_file() {
                return Ok(Layer::read(LayerKind::Overlay, bundle, &path, &home.display(&path))?);
            }
            bail!(
                "profile bundle {} declares no bundle layer ({} is missing)",
                json_quote(bundle),
                home.display(&path)
            );
        }
        match bundled::package(bundle) {
            Some(package) => match package.layer {
                Some(text) => Ok(Layer::parse(bundle, &format!("{bundle} (bundled layer)"), text)?),
                None => bail!("profile bundle {} declares no bundle layer", json_quote(bundle)),
            },
            None => bail!(
                "profile bundle {} is neither installed in profile {} nor bundled with dsh; remove it from {} or install it",
                json_quote(bundle),
                self.name,
                home.display(&self.manifest_path())
            ),
        }
    }

    /// The profile's layers in application order.
    pub fn layers(&self, home: &Home, patches: &[PathBuf], scope: LayerScope) -> anyhow::Result<Vec<Layer>> {
        let mut layers = self
            .manifest
            .bundles
            .iter()
            .map(|bundle| self.bundle_layer(home, bundle))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if scope == LayerScope::BundlesOnly {
            return Ok(layers);
        }
        for (optional, kind) in
            [(self.dir.join("cordis.patch.yml"), LayerKind::Overlay), (home.patch_path(), LayerKind::Patches)]
        {
            if optional.exists() {
                let label = home.display(&optional);
                layers.push(Layer::read(kind, &label, &optional, &label)?);
            }
        }
        for path in patches {
            let label = home.display(path);
            if !path.exists() {
                return Err(NotFound(format!("the --patch file {label} does not exist")).into());
            }
            layers.push(Layer::read(LayerKind::Overlay, &label, path, &label)?);
        }
        Ok(layers)
    }

    /// Composes the profile: every layer in order over an empty root list. Like DeepSeek
    /// Harness, dsh never reads rows from `cordis.yml` (it is written as `[]`): the whole profile
    /// is patch layers.
    pub fn compose(&self, home: &Home, patches: &[PathBuf], scope: LayerScope) -> anyhow::Result<Composition> {
        let layers = self.layers(home, patches, scope)?;
        Ok(patch::compose(Vec::new(), "cordis.yml", &layers))
    }
}

fn template_bundles(template: &bundled::ProfileTemplate) -> Vec<String> {
    yaml::from_str::<ProfileManifest>(template.manifest).expect("shipped templates are valid").bundles
}

fn json_quote(text: &str) -> String {
    dsh_abi::js::to_string(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().to_owned());
        (dir, home)
    }

    #[test]
    fn a_template_profile_is_created_on_first_use_with_its_files() {
        let (_dir, home) = home();
        let profile = Profile::open(&home, "web").unwrap();
        assert_eq!(profile.manifest.bundles, ["dsh-base"]);
        for file in ["profile.yml", "cordis.yml", "cordis.patch.yml"] {
            assert!(profile.dir.join(file).is_file(), "{file}");
        }
        assert!(profile.dir.join("plugins").is_dir());
    }

    #[test]
    fn other_missing_profiles_do_not_exist() {
        let (_dir, home) = home();
        let err = Profile::open(&home, "work").unwrap_err();
        assert_eq!(
            err.to_string(),
            "profile \"work\" does not exist; create it with 'dsh profile new work' (or 'dsh plugin --profile work add <package>')"
        );
        assert!(err.downcast_ref::<NotFound>().is_some());
    }

    #[test]
    fn creating_never_overwrites_an_existing_file() {
        let (_dir, home) = home();
        let dir = home.root().join("profiles/web");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cordis.patch.yml"), "- {id: agent, disabled: true}\n").unwrap();
        Profile::open(&home, "web").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("cordis.patch.yml")).unwrap(), "- {id: agent, disabled: true}\n");
    }

    #[test]
    fn undoing_a_creation_leaves_what_was_there_before() {
        let (_dir, home) = home();
        let dir = home.root().join("profiles/mine");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cordis.patch.yml"), "- {id: agent, disabled: true}\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let lock = Profile::lock(&home, "mine", |_| {}).unwrap();
        let (_, created) = Profile::open_or_create(&home, "mine", &lock).unwrap();
        created.undo();
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["cordis.patch.yml", "notes.txt"]);
        assert_eq!(std::fs::read_to_string(dir.join("cordis.patch.yml")).unwrap(), "- {id: agent, disabled: true}\n");
    }

    #[test]
    fn a_manifest_cannot_point_outside_the_profile() {
        let bad = |manifest: &str| yaml::from_str::<ProfileManifest>(manifest).unwrap().validate().unwrap_err();
        assert!(bad("packages: {'../../victim': {version: '1', source: s, library: plugins/x/l.so, sha256: a}}\n")
            .contains("one path component"));
        assert!(bad("packages: {x: {version: '1', source: s, library: ../../l.so, sha256: a}}\n")
            .contains("must be plugins/x/<file>"));
        assert!(bad("bundles: [..]\n").contains("one path component"));
        assert!(is_package_name("relay-retry") && is_package_name("my_plugin.v2"));
    }

    #[test]
    fn a_scoped_package_name_is_two_checked_components() {
        assert!(is_package_name("@acme/bundle-x") && is_package_name("@a.b/c_d"));
        for bad in ["@acme", "@/x", "@acme/", "@acme/x/y", "@../x", "@acme/..", "acme/x", "@acme\\x", "@ac me/x"] {
            assert!(!is_package_name(bad), "{bad:?}");
        }
        let manifest = |library: &str| {
            let text = format!(
                "bundles: [dsh-base, '@acme/bundle-x']\npackages: {{'@acme/bundle-x': {{version: '1', source: s, library: {library}, sha256: a}}}}\n"
            );
            yaml::from_str::<ProfileManifest>(&text).unwrap().validate()
        };
        assert_eq!(manifest("plugins/@acme/bundle-x/libx.so"), Ok(()));
        assert!(manifest("plugins/@acme/libx.so").unwrap_err().contains("must be plugins/@acme/bundle-x/<file>"));
        assert!(manifest("plugins/@acme/bundle-x/../../x.so").is_err());
    }

    #[test]
    fn profile_names_are_validated() {
        for bad in ["", ".", "..", "a/b", "a\\b"] {
            assert!(Profile::validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(Profile::validate_name("web-2").is_ok());
    }

    #[test]
    fn the_manifest_round_trips() {
        let (_dir, home) = home();
        let lock = Profile::lock(&home, "work", |_| {}).unwrap();
        let (mut profile, created) = Profile::open_or_create(&home, "work", &lock).unwrap();
        assert!(!created.is_empty());
        assert_eq!(profile.manifest.bundles, ["dsh-base"]);
        profile.manifest.packages.insert(
            "relay-retry".into(),
            InstalledPackage {
                version: "0.1.0".into(),
                source: "bundled".into(),
                library: "plugins/relay-retry/x.so".into(),
                sha256: "ab".into(),
            },
        );
        profile.save().unwrap();
        let (reopened, created) = Profile::open_or_create(&home, "work", &lock).unwrap();
        assert!(created.is_empty());
        assert_eq!(reopened.manifest, profile.manifest);
    }

    #[test]
    fn the_web_profile_composes_the_base_rows() {
        let (_dir, home) = home();
        let profile = Profile::open(&home, "web").unwrap();
        let composition = profile.compose(&home, &[], LayerScope::All).unwrap();
        let ids: Vec<&str> = composition.rows.iter().map(|row| row["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["agent", "llm-deepseek", "llm-retry", "llm-retry-invariant"]);
        assert!(composition.warnings.is_empty());
    }

    #[test]
    fn files_under_the_home_are_named_relative_to_it() {
        let (_dir, home) = home();
        assert_eq!(
            home.display(&home.root().join("profiles/web/cordis.patch.yml")),
            "$DSH_HOME/profiles/web/cordis.patch.yml"
        );
        assert_eq!(home.display(Path::new("/etc/x.yml")), "/etc/x.yml");
    }
}
