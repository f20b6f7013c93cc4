//! The trajectories `dsh web` has read ([`dsh_session::trajectory`]), each kept until its log
//! file changes, so a page fetching one window after another reads the log once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::error::{internal, ApiError};
use dsh_session::store::LogRef;
use dsh_session::trajectory::{self, Trajectory};

/// The trajectories computed so far, each with the state of the file it was read from.
#[derive(Clone, Default)]
pub struct Trajectories(Arc<Mutex<HashMap<String, Kept>>>);

/// A trajectory and the state of the log file it was read from.
type Kept = (Stamp, Arc<Trajectory>);

/// A log file's length and modification time: when both are unchanged, so are its events.
type Stamp = (u64, SystemTime);

fn stamp_of(log: &LogRef) -> Option<Stamp> {
    let metadata = std::fs::metadata(log.file_path()?).ok()?;
    Some((metadata.len(), metadata.modified().ok()?))
}

impl Trajectories {
    pub async fn of(&self, log: LogRef) -> Result<Arc<Trajectory>, ApiError> {
        let (id, stamp) = (log.id(), stamp_of(&log));
        let cached = self.0.lock().expect("not poisoned").get(&id).cloned();
        if let (Some((kept, trajectory)), Some(stamp)) = (cached, stamp) {
            if kept == stamp {
                return Ok(trajectory);
            }
        }
        let built = tokio::task::spawn_blocking(move || trajectory::of_log(&log)).await;
        let built = Arc::new(built.map_err(internal)?.map_err(internal)?);
        if let Some(stamp) = stamp {
            self.0.lock().expect("not poisoned").insert(id, (stamp, built.clone()));
        }
        Ok(built)
    }
}
