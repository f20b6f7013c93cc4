//! `dsh session import`: a DeepSeek Harness log (`session.jsonl` or `session.jsonl.zstd`, packed
//! chunk rows or not) copied into the home as a plain log, so `run --session` continues it.
//!
//! Each store keeps the copy out of sight until it is whole (files: written beside the sessions,
//! fsynced, then moved into a new `sessions/<id>/`; a database: one transaction), so a crash
//! leaves the old state or the whole copy, and an existing session is never overwritten. Packed
//! chunk rows are written out as the `assistant/chunk` events they hold
//! (losslessly). A torn last line is left out; the source is never changed.

use dsh_abi::events;
use std::io;
use std::path::{Path, PathBuf};

use super::meta::SessionMeta;
use super::reader::{Damage, LogReader, ReadError};
use super::store::{LogRef, SessionStore, StoreError};
use super::writer::Line;

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct Imported {
    pub session_id: String,
    pub log: LogRef,
    pub events: u64,
    /// The torn last line left out, as `line N (byte B)`.
    pub torn: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("the header's id {id} is not a session id ({rule})", id = .0, rule = super::locate::SESSION_ID_RULE)]
    BadId(String),
    #[error("{}: not a regular file (a log to import is a file, or a session folder holding one)", .0.display())]
    NotAFile(PathBuf),
    #[error("{} is not a folder; move it away to keep sessions there", .0.display())]
    SessionsNotAFolder(PathBuf),
    #[error("a session {id} is already in the home ({log}); it was not overwritten")]
    Exists { id: String, log: String },
    #[error(transparent)]
    Busy(#[from] crate::lock::LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}: the log is damaged there; nothing was imported")]
    Corrupt(String),
    #[error("cannot write the imported log")]
    Io(#[from] io::Error),
}

fn session_id(header: &str) -> Result<String, ImportError> {
    let header: serde_json::Value =
        serde_json::from_str(header).map_err(|err| ReadError::BadHeader(format!("unreadable header: {err}")))?;
    let id = header.get("id").and_then(serde_json::Value::as_str).unwrap_or_default();
    if super::locate::is_session_id(id) {
        Ok(id.to_owned())
    } else {
        Err(ImportError::BadId(dsh_abi::js::to_string(&id)))
    }
}

/// Copies the log at `source` into `store` as a new session: nothing of it is seen there until
/// the whole copy is (see [`crate::store::Backend::begin_import`]); the session's provider and
/// model are kept with it.
pub fn import(source: &Path, store: &SessionStore) -> Result<Imported, ImportError> {
    if !std::fs::metadata(source).is_ok_and(|meta| meta.is_file()) {
        return Err(ImportError::NotAFile(source.to_owned()));
    }
    let mut reader = crate::migrate::open(source)?;
    let session_id = session_id(reader.header())?;
    let mut importing = store.begin_import(&session_id, reader.header())?;
    let mut copied = copy_events(&mut reader, |event| {
        let seq = event.seq.filter(|seq| dsh_abi::js::is_safe_integer(*seq)).map(|seq| seq as i64);
        importing.push(Line { seq, event_type: event.event_type.to_owned(), body: event.line.to_owned() })
    })?;
    let log = importing.finish()?;
    log.keep_meta(&mut copied.route, &[])?;
    Ok(Imported { session_id, log, events: copied.events, torn: copied.torn })
}

/// What a pass over a log to import found.
struct Copied {
    events: u64,
    /// The torn last line left out, as `line N (byte B)`.
    torn: Option<String>,
    /// The provider and model of its last `request/header`.
    route: SessionMeta,
}

/// Hands every event of `reader` to `put`, in order; a torn last line is left out, damage
/// anywhere else ends the import.
fn copy_events(
    reader: &mut LogReader,
    mut put: impl FnMut(&super::reader::EventView<'_>) -> Result<(), ImportError>,
) -> Result<Copied, ImportError> {
    let mut copied = Copied { events: 0, torn: None, route: SessionMeta::default() };
    while let Some(next) = reader.next_event() {
        match next? {
            Ok(event) => {
                if event.event_type == events::REQUEST_HEADER {
                    note_route(&mut copied.route, event.data);
                }
                put(&event)?;
                copied.events += 1;
            }
            Err(damage @ Damage::Torn { .. }) => copied.torn = Some(damage.position()),
            Err(damage @ Damage::Corrupt { .. }) => return Err(ImportError::Corrupt(damage.to_string())),
        }
    }
    Ok(copied)
}

/// Keeps the provider and model a `request/header` names, so the imported session continues on
/// the model it was recorded with.
fn note_route(route: &mut SessionMeta, data: &str) {
    let Ok(data) = serde_json::from_str::<serde_json::Value>(data) else { return };
    let config = &data["header"]["config"];
    if let (Some(provider), Some(model)) = (config["provider"].as_str(), config["model"].as_str()) {
        route.provider = Some(provider.to_owned());
        route.model = Some(model.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"session","version":0,"id":"s1","createdAt":1,"delegationDepth":0}"#;

    #[test]
    fn a_log_is_copied_into_its_session_directory_without_its_torn_tail() {
        let scratch = tempfile::tempdir().unwrap();
        let source = scratch.path().join("in.jsonl");
        let event = r#"{"type":"turn/start","seq":0,"time":2,"data":{"turn":1}}"#;
        std::fs::write(&source, format!("{HEADER}\n{event}\n{{\"type\":\"turn/en")).unwrap();
        let sessions = scratch.path().join("sessions");
        let imported = import(&source, &SessionStore::files(sessions.clone())).unwrap();
        assert_eq!(imported.session_id, "s1");
        assert_eq!(imported.events, 1);
        let torn_at = HEADER.len() + event.len() + 2;
        assert_eq!(imported.torn, Some(format!("line 3 (byte {torn_at})")));
        assert_eq!(std::fs::read_to_string(imported.log.meta_anchor()).unwrap(), format!("{HEADER}\n{event}\n"));
        assert!(matches!(import(&source, &SessionStore::files(sessions)), Err(ImportError::Exists { .. })));
    }

    #[test]
    fn an_imported_session_keeps_the_provider_and_model_it_was_recorded_with() {
        let scratch = tempfile::tempdir().unwrap();
        let source = scratch.path().join("in.jsonl");
        let events = [
            r#"{"type":"turn/start","seq":0,"time":2,"data":{"turn":1}}"#,
            r#"{"type":"request/header","seq":1,"time":2,"data":{"header":{"config":{"provider":"p","model":"m-1"}},"reason":"initial"}}"#,
        ];
        std::fs::write(&source, format!("{HEADER}\n{}\n", events.join("\n"))).unwrap();
        let imported = import(&source, &SessionStore::files(scratch.path().join("sessions"))).unwrap();
        let meta = imported.log.meta().unwrap();
        assert_eq!((meta.provider.as_deref(), meta.model.as_deref()), (Some("p"), Some("m-1")));
    }

    #[test]
    fn a_fifo_a_device_and_a_sessions_file_are_named_as_what_they_are() {
        let scratch = tempfile::tempdir().unwrap();
        let sessions = scratch.path().join("sessions");
        let err = import(Path::new("/dev/zero"), &SessionStore::files(sessions.clone())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/dev/zero: not a regular file (a log to import is a file, or a session folder holding one)"
        );
        let source = scratch.path().join("in.jsonl");
        std::fs::write(&source, format!("{HEADER}\n")).unwrap();
        std::fs::write(&sessions, "").unwrap();
        let err = import(&source, &SessionStore::files(sessions)).unwrap_err();
        assert!(err.to_string().ends_with("sessions is not a folder; move it away to keep sessions there"), "{err}");
    }

    #[test]
    fn an_id_that_is_not_one_path_component_is_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let source = scratch.path().join("in.jsonl");
        for id in ["../x", "-rf", "a\\u001b[2Jb", "a\\nb", ""] {
            std::fs::write(&source, format!("{}\n", HEADER.replace("\"s1\"", &format!("\"{id}\"")))).unwrap();
            let err = import(&source, &SessionStore::files(scratch.path().join("sessions"))).unwrap_err();
            assert!(matches!(err, ImportError::BadId(_)), "{id}: {err}");
            assert!(!err.to_string().contains('\u{1b}'), "{err}");
        }
    }
}
