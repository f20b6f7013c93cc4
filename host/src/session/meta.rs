//! What dsh keeps beside a session's log (`dsh.json`): everything that decides where its turns
//! go — the profile, the `--patch` layers it was created with (each copied into the session's
//! folder, with the sha256 of what was read) and the provider and model its turns were sent to.
//! A continued session runs on these, and says when something changed since.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::fsutil;

/// The file beside `session.jsonl`.
pub const META_FILE: &str = "dsh.json";

/// `dsh.json`: `{"profile", "patches": [{"file", "sha256", "kept"}], "provider", "model"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<KeptPatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A `--patch` layer the session was created with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptPatch {
    /// The file as it was named, made absolute.
    pub file: PathBuf,
    /// The sha256 of its content when the session was created.
    pub sha256: String,
    /// The copy in the session's folder (a file name).
    pub kept: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl SessionMeta {
    /// What dsh keeps beside the log at `log`; empty when it kept nothing (an imported log, a log
    /// elsewhere) or the file cannot be read.
    pub fn read(log: &Path) -> SessionMeta {
        std::fs::read(log.with_file_name(META_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Replaces `dsh.json` beside `log`, atomically.
    pub fn write(&self, log: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string(self).map_err(std::io::Error::other)?;
        fsutil::write_atomic(&log.with_file_name(META_FILE), json.as_bytes())
    }

    /// Copies each of `patches` into the folder of `log` (`patch-1.yml`, …) and records it.
    pub fn keep_patches(&mut self, log: &Path, patches: &[PathBuf]) -> std::io::Result<()> {
        let dir = log.parent().unwrap_or(Path::new("."));
        for (index, file) in patches.iter().enumerate() {
            let content = std::fs::read(file)?;
            let kept = format!("patch-{}.yml", index + 1);
            fsutil::write_atomic(&dir.join(&kept), &content)?;
            let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            self.patches.push(KeptPatch { file, sha256: sha256_hex(&content), kept });
        }
        Ok(())
    }

    /// The layers a continued session runs with, and what to tell the user: `explicit` when
    /// given (said when it differs from the session's own), else the copies kept with the
    /// session (said when a file changed or is gone since).
    pub fn patches_for(&self, log: &Path, explicit: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
        let named = |patches: &[PathBuf]| patches.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ");
        let own: Vec<PathBuf> = self.patches.iter().map(|patch| patch.file.clone()).collect();
        if !explicit.is_empty() {
            let given: Vec<PathBuf> =
                explicit.iter().map(|file| std::path::absolute(file).unwrap_or_else(|_| file.clone())).collect();
            let mut notes = Vec::new();
            if given != own {
                let was = if own.is_empty() { "no --patch".to_owned() } else { format!("--patch {}", named(&own)) };
                notes.push(format!(
                    "the session was created with {was}; running it with --patch {} as asked",
                    named(explicit)
                ));
            }
            return (explicit.to_vec(), notes);
        }
        let dir = log.parent().unwrap_or(Path::new("."));
        let mut notes = Vec::new();
        let layers = self
            .patches
            .iter()
            .map(|patch| {
                let kept = dir.join(&patch.kept);
                match std::fs::read(&patch.file) {
                    Ok(now) if sha256_hex(&now) == patch.sha256 => {}
                    Ok(_) => notes.push(format!(
                        "--patch {} changed since the session was created; running with the copy kept in {}",
                        patch.file.display(),
                        kept.display()
                    )),
                    Err(_) => notes.push(format!(
                        "--patch {} is gone; running with the copy kept in {}",
                        patch.file.display(),
                        kept.display()
                    )),
                }
                kept
            })
            .collect();
        (layers, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_patches_are_used_and_a_changed_or_deleted_file_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("s").join("session.jsonl");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let (one, two) = (dir.path().join("one.yml"), dir.path().join("two.yml"));
        std::fs::write(&one, "- id: a\n").unwrap();
        std::fs::write(&two, "- id: b\n").unwrap();
        let mut meta = SessionMeta { profile: Some("web".into()), ..SessionMeta::default() };
        meta.keep_patches(&log, &[one.clone(), two.clone()]).unwrap();
        meta.write(&log).unwrap();
        let meta = SessionMeta::read(&log);
        let (layers, notes) = meta.patches_for(&log, &[]);
        assert_eq!(layers, [log.with_file_name("patch-1.yml"), log.with_file_name("patch-2.yml")]);
        assert!(notes.is_empty(), "{notes:?}");
        std::fs::write(&one, "- id: changed\n").unwrap();
        std::fs::remove_file(&two).unwrap();
        let (layers, notes) = meta.patches_for(&log, &[]);
        assert_eq!(std::fs::read_to_string(&layers[0]).unwrap(), "- id: a\n", "the copy holds what the session ran");
        assert!(notes[0].contains("one.yml changed since the session was created"), "{notes:?}");
        assert!(notes[1].contains("two.yml is gone"), "{notes:?}");
        let (layers, notes) = meta.patches_for(&log, std::slice::from_ref(&two));
        assert_eq!(layers, [two]);
        assert!(notes[0].starts_with("the session was created with --patch"), "{notes:?}");
    }

    #[test]
    fn a_session_without_kept_layers_runs_with_none_and_says_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("session.jsonl");
        let meta = SessionMeta::read(&log);
        assert_eq!(meta, SessionMeta::default());
        assert_eq!(meta.patches_for(&log, &[]), (Vec::new(), Vec::new()));
    }
}
