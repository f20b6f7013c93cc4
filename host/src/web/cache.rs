//! The trajectories `dsh web` follows ([`dsh_session::trajectory`]): each log is read once, then
//! only what is appended to it is fed to its trajectory (files by offset, PostgreSQL by line), so
//! a page fetching one window after another, or watching a live session, costs what is new. The
//! least recently used are let go past [`MAX_KEPT_SPANS`] spans in all.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::error::{internal, ApiError};
use dsh_session::store::{LogRef, Tail};
use dsh_session::trajectory::{self, Builder, Trajectory};

/// The most spans the followed trajectories hold together (about 250 bytes each).
pub const MAX_KEPT_SPANS: usize = 400_000;

/// The trajectories followed so far, the most recently used last.
#[derive(Clone, Default)]
pub struct Trajectories(Arc<Mutex<Kept>>);

#[derive(Default)]
struct Kept {
    followed: HashMap<String, Arc<tokio::sync::Mutex<Followed>>>,
    recent: VecDeque<String>,
}

/// One log's trajectory and where its reading stopped.
#[derive(Default)]
struct Followed {
    /// The log read (a session's log can change: an older generation continued as v4).
    name: String,
    tail: Tail,
    builder: Builder,
    spans: usize,
}

impl Followed {
    /// Brings the trajectory up to `log`'s end: what was appended, or all of it when the log is
    /// new to it. The end is taken before a whole read, so nothing appended meanwhile is missed.
    fn catch_up(&mut self, log: &LogRef) -> Result<(), ApiError> {
        if self.name != log.name() {
            let tail = log.end().map_err(internal)?;
            self.builder = trajectory::read(log).map_err(internal)?;
            (self.name, self.tail) = (log.name(), tail);
        }
        let (lines, tail) = log.lines_after(self.tail).map_err(internal)?;
        lines.iter().for_each(|line| self.builder.push_line(line));
        self.tail = tail;
        self.spans = self.builder.current().spans.len();
        Ok(())
    }
}

impl Trajectories {
    /// What `answer` makes of `log`'s trajectory as it is now.
    pub async fn with<T: Send + 'static>(
        &self,
        log: LogRef,
        answer: impl FnOnce(&Trajectory) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let followed = self.followed(&log.id());
        let mut followed = followed.lock_owned().await;
        let answered = tokio::task::spawn_blocking(move || {
            followed.catch_up(&log)?;
            Ok(answer(followed.builder.current()))
        });
        let answered = answered.await.map_err(internal)?;
        self.let_go_of_the_least_used();
        answered
    }

    /// The session's entry (made when new), now the most recently used.
    fn followed(&self, id: &str) -> Arc<tokio::sync::Mutex<Followed>> {
        let mut kept = self.0.lock().expect("not poisoned");
        kept.recent.retain(|kept| kept != id);
        kept.recent.push_back(id.to_owned());
        kept.followed.entry(id.to_owned()).or_default().clone()
    }

    /// Lets go of the least recently used trajectories while they hold more than
    /// [`MAX_KEPT_SPANS`] spans (the most recent is always kept).
    fn let_go_of_the_least_used(&self) {
        let mut kept = self.0.lock().expect("not poisoned");
        let spans_of = |followed: &Arc<tokio::sync::Mutex<Followed>>| followed.try_lock().map_or(0, |f| f.spans);
        let mut total: usize = kept.followed.values().map(spans_of).sum();
        while total > MAX_KEPT_SPANS && kept.recent.len() > 1 {
            let Some(oldest) = kept.recent.pop_front() else { break };
            total = total.saturating_sub(kept.followed.remove(&oldest).as_ref().map_or(0, spans_of));
        }
    }
}
