//! What dsh keeps beside a session's log (`dsh.json`): everything that decides where its turns
//! go — the profile, the `--patch` layers it was created with (each copied into the session's
//! folder, with the sha256 of what was read), the `--provider`, `--model` and `--system` it was
//! run with, and the provider and model its turns were sent to. A continued session runs on
//! these, and says when something changed since.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::fsutil::MAX_LAYER_BYTES;

/// The file beside `session.jsonl`.
pub const META_FILE: &str = "dsh.json";

/// `dsh.json`: `{"profile", "patches": [{"file", "sha256", "kept"}], "overrides", "provider", "model"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<KeptPatch>,
    #[serde(default, skip_serializing_if = "RunOverrides::is_empty")]
    pub overrides: RunOverrides,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// What `--provider`, `--model` and `--system` set on the agent row of a session's profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
}

impl RunOverrides {
    /// Each option, by the agent row key it sets (`provider`, `model`, `system`).
    pub fn fields(&self) -> [(&'static str, &Option<String>); 3] {
        [("provider", &self.provider), ("model", &self.model), ("system", &self.system)]
    }

    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, value)| value.is_none())
    }

    /// The options as a command line gives them (`--provider p --model m --system …`, each value
    /// cut to one short line).
    pub fn described(&self) -> String {
        let words: Vec<String> = self
            .fields()
            .iter()
            .filter_map(|(key, value)| value.as_ref().map(|value| format!("--{key} {:?}", shortened(value))))
            .collect();
        if words.is_empty() {
            "none of --provider, --model, --system".to_owned()
        } else {
            words.join(" ")
        }
    }
}

/// How many characters of an option's value a message shows.
const SHOWN_VALUE_CHARS: usize = 40;

fn shortened(value: &str) -> String {
    let line = value.lines().next().unwrap_or_default();
    if line.chars().count() > SHOWN_VALUE_CHARS || line.len() < value.len() {
        format!("{}…", line.chars().take(SHOWN_VALUE_CHARS).collect::<String>())
    } else {
        value.to_owned()
    }
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
    /// The keys whose inline credentials the copy does not hold (`[redacted]` in their place).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted: Vec<String>,
}

/// What a session keeps of a `--patch` layer: the bytes of its copy (the file as read, or — when
/// it holds inline credentials — the same layer with those redacted), and the sha256 of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchCopy {
    pub file: PathBuf,
    pub sha256: String,
    pub bytes: Vec<u8>,
    pub redacted: Vec<String>,
}

impl PatchCopy {
    /// A copy of `bytes`, read from `file`, holding them as they are.
    pub fn verbatim(file: &Path, bytes: Vec<u8>) -> PatchCopy {
        PatchCopy { file: file.to_owned(), sha256: fsutil::sha256_hex(&bytes), bytes, redacted: Vec::new() }
    }
}

impl SessionMeta {
    /// What dsh keeps beside the log at `log`; empty when it kept nothing (an imported log, a log
    /// elsewhere) or the file cannot be read.
    pub fn read(log: &Path) -> SessionMeta {
        fsutil::read_limited(&log.with_file_name(META_FILE), fsutil::MAX_SETTINGS_FILE_BYTES, META_FILE)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Replaces `dsh.json` beside `log`, atomically.
    pub fn write(&self, log: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string(self).map_err(std::io::Error::other)?;
        fsutil::write_atomic(&log.with_file_name(META_FILE), json.as_bytes())
    }

    /// Writes each of `copies` into the folder of `log` (`patch-1.yml`, …) and records it.
    pub fn keep_patches(&mut self, log: &Path, copies: &[PatchCopy]) -> std::io::Result<()> {
        let dir = log.parent().unwrap_or(Path::new("."));
        for (index, copy) in copies.iter().enumerate() {
            let kept = format!("patch-{}.yml", index + 1);
            fsutil::write_atomic(&dir.join(&kept), &copy.bytes)?;
            let file = std::path::absolute(&copy.file).unwrap_or_else(|_| copy.file.clone());
            self.patches.push(KeptPatch { file, sha256: copy.sha256.clone(), kept, redacted: copy.redacted.clone() });
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
        let layers = self.patches.iter().map(|patch| patch.layer(dir, &mut notes)).collect();
        (layers, notes)
    }
}

impl SessionMeta {
    /// The overrides a continued session runs with, and what to tell the user: each of
    /// `explicit` replaces the session's own (said when it differs), the others stay.
    pub fn overrides_for(&self, explicit: &RunOverrides) -> (RunOverrides, Option<String>) {
        let own = &self.overrides;
        let merged = RunOverrides {
            provider: explicit.provider.clone().or_else(|| own.provider.clone()),
            model: explicit.model.clone().or_else(|| own.model.clone()),
            system: explicit.system.clone().or_else(|| own.system.clone()),
        };
        let note = (merged != *own).then(|| {
            format!("the session was created with {}; running it with {} as asked", own.described(), merged.described())
        });
        (merged, note)
    }
}

impl KeptPatch {
    /// The layer a continued session runs with: the copy kept in `dir` — or the file itself when
    /// it is unchanged and the copy lacks its inline credentials — saying when it differs.
    fn layer(&self, dir: &Path, notes: &mut Vec<String>) -> PathBuf {
        let kept = dir.join(&self.kept);
        let why = match fsutil::read_limited(&self.file, MAX_LAYER_BYTES, "a layer") {
            Ok(now) if fsutil::sha256_hex(&now) == self.sha256 => {
                return if self.redacted.is_empty() { kept } else { self.file.clone() };
            }
            Ok(_) => "changed since the session was created",
            Err(_) => "is gone",
        };
        let mut note =
            format!("--patch {} {why}; running with the copy kept in {}", self.file.display(), kept.display());
        if !self.redacted.is_empty() {
            note.push_str(&format!(
                ", which holds no credentials ({} redacted): give them through the environment",
                self.redacted.join(", ")
            ));
        }
        notes.push(note);
        kept
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
        let copies: Vec<PatchCopy> =
            [&one, &two].map(|file| PatchCopy::verbatim(file, std::fs::read(file).unwrap())).into();
        meta.keep_patches(&log, &copies).unwrap();
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

    #[test]
    fn each_given_override_replaces_the_sessions_own_and_the_others_stay() {
        let own = RunOverrides { model: Some("m1".into()), system: Some("be brief".into()), ..RunOverrides::default() };
        let meta = SessionMeta { overrides: own.clone(), ..SessionMeta::default() };
        assert_eq!(meta.overrides_for(&RunOverrides::default()), (own.clone(), None));
        let (merged, note) = meta.overrides_for(&RunOverrides { model: Some("m2".into()), ..RunOverrides::default() });
        assert_eq!(merged, RunOverrides { model: Some("m2".into()), ..own });
        assert_eq!(
            note.as_deref(),
            Some(
                "the session was created with --model \"m1\" --system \"be brief\"; running it with --model \"m2\" \
                 --system \"be brief\" as asked"
            )
        );
    }
}
