//! `dsh session delete` and `dsh session prune`: sessions removed from either store, each under
//! its writer lock — one being written is left as it is, and said so.

use super::exit::{Exit, Outcome, EXIT_BUSY, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_STORE};
use super::shown::plural;

use clap::Args;
use dsh_session::lock::LockError;
use dsh_session::store::{LogRef, SessionStore};
use dsh_session::{prune, summary, timeline};
use serde_json::{json, Value};

use super::globals::Globals;
use crate::context::epoch_ms;

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Session ids (or unique prefixes) of the home's store.
    #[arg(required = true, value_name = "ID", add = super::complete::sessions())]
    sessions: Vec<String>,
    /// Print `{deleted: [ids], left: [{id, reason}]}` instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove the sessions last used longer ago than this: `30d`, `12h`, `2w`, `1d 6h`.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: f64,
    /// Keep this many of the most recently used sessions, however old.
    #[arg(long, value_name = "N", default_value_t = 0)]
    keep: usize,
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print `{deleted: [ids], left: [{id, reason}], kept, dryRun}` instead of text.
    #[arg(long)]
    json: bool,
}

/// `--older-than`'s value in milliseconds: a span of weeks, days, hours, minutes or seconds
/// (months and years have no fixed length).
fn parse_age(text: &str) -> Result<f64, String> {
    let span: jiff::Span = text.trim().parse().map_err(|_| format!("{text:?} is not an age such as 30d, 12h or 2w"))?;
    let total = span.total(jiff::SpanTotal::from(jiff::Unit::Millisecond).days_are_24_hours());
    match total {
        Ok(ms) if ms >= 0.0 => Ok(ms),
        Ok(_) => Err(format!("{text:?} is negative")),
        Err(_) => Err(format!("{text:?} has no fixed length: give it in weeks or days (30d)")),
    }
}

/// What became of the sessions asked about.
#[derive(Default)]
struct Removal {
    deleted: Vec<String>,
    /// Each session left, and why.
    left: Vec<(String, String)>,
    /// The exit code the worst of the reasons asks for.
    code: Option<u8>,
    /// Whether a session being written fails the command (`delete`) or is simply in use (`prune`).
    busy_fails: bool,
}

impl Removal {
    /// Deletes `log` under its writer lock, when `still_wanted` (asked once the lock is held)
    /// says so; a session being written, or one that cannot be removed, is left and said so.
    fn delete(&mut self, store: &SessionStore, log: &LogRef, still_wanted: impl FnOnce() -> Result<(), String>) {
        let id = log.id();
        let lock = match log.lock(store.local_folder()) {
            Ok(lock) => lock,
            Err(LockError::Busy(busy)) => {
                let code = if self.busy_fails { EXIT_BUSY } else { 0 };
                return self.leave(id, busy.to_string(), code);
            }
            Err(err) => {
                let reason = format!("session {id}: {err}");
                return self.leave(id, reason, EXIT_STORE);
            }
        };
        if let Err(reason) = still_wanted() {
            return self.leave(id, reason, 0);
        }
        match lock.delete() {
            Ok(()) => self.deleted.push(id),
            Err(err) => {
                let reason = format!("cannot delete session {id}: {err}");
                self.leave(id, reason, EXIT_FAILED);
            }
        }
    }

    fn leave(&mut self, id: String, reason: String, code: u8) {
        self.left.push((id, reason));
        self.code = self.code.max(Some(code).filter(|code| *code != 0));
    }

    fn print(&self, verb: &str, json: Option<Value>) -> Outcome {
        if let Some(mut value) = json {
            value["deleted"] = json!(self.deleted);
            value["left"] = self.left.iter().map(|(id, reason)| json!({"id": id, "reason": reason})).collect();
            out_raw!("{}", dsh_abi::js::to_string_pretty(&value))?;
        } else {
            for id in &self.deleted {
                out!("{verb} {id}")?;
            }
            for (_, reason) in &self.left {
                say!("dsh: {reason}");
            }
        }
        Ok(())
    }

    fn finish(&self) -> Outcome {
        self.code.map_or(Ok(()), |code| Err(Exit::reported(code)))
    }
}

pub fn delete(globals: &Globals, args: &DeleteArgs) -> Outcome {
    let store = SessionStore::for_home(globals.home()?.root())?;
    let mut removal = Removal { busy_fails: true, ..Removal::default() };
    for name in &args.sessions {
        match store.session_by_id(name) {
            Ok(log) => removal.delete(&store, &log, || Ok(())),
            Err(missing) => removal.leave(name.clone(), missing.to_string(), EXIT_NOT_FOUND),
        }
    }
    removal.print("deleted", args.json.then(|| json!({})))?;
    removal.finish()
}

pub fn prune(globals: &Globals, args: &PruneArgs) -> Outcome {
    let store = SessionStore::for_home(globals.home()?.root())?;
    let sessions = summary::newest_first(&store, |log, err| say!("dsh: {}: {err:#}; left as it is", log.name()))?;
    let last_used: Vec<f64> = sessions.iter().map(|(summary, _)| summary.last_used_ms).collect();
    let cutoff = epoch_ms() as f64 - args.older_than;
    let chosen = prune::to_remove(&last_used, cutoff, args.keep);
    let mut removal = Removal::default();
    for (_, log) in chosen.iter().map(|at| &sessions[*at]) {
        if args.dry_run {
            removal.deleted.push(log.id());
            continue;
        }
        // Used again since it was listed: it is no longer old enough.
        let unused_since_listed = || match summary::summarize(log) {
            Ok(now) if now.last_used_ms < cutoff => Ok(()),
            Ok(_) => Err(format!("session {} was used while the sessions were listed", log.id())),
            Err(err) => Err(format!("session {}: {err:#}", log.id())),
        };
        removal.delete(&store, log, unused_since_listed);
    }
    let kept = sessions.len() - removal.deleted.len();
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    removal.print(verb, args.json.then(|| json!({"kept": kept, "dryRun": args.dry_run})))?;
    if !args.json {
        let last = chosen.iter().map(|at| last_used[*at]).reduce(f64::max);
        let until = last.map(|ms| format!(", the newest of them last used {}", timeline::http_date(ms)));
        say!(
            "dsh: {verb} {} session{}{}; {kept} kept",
            removal.deleted.len(),
            plural(removal.deleted.len()),
            until.unwrap_or_default()
        );
    }
    removal.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_fixed_spans_and_months_are_refused() {
        assert_eq!(parse_age("30d"), Ok(30.0 * 86_400_000.0));
        assert_eq!(parse_age("2w"), Ok(14.0 * 86_400_000.0));
        assert_eq!(parse_age("1d 6h"), Ok(30.0 * 3_600_000.0));
        assert_eq!(parse_age("90m"), Ok(90.0 * 60_000.0));
        assert_eq!(parse_age("2mo"), Err("\"2mo\" has no fixed length: give it in weeks or days (30d)".to_owned()));
        assert_eq!(parse_age("soon"), Err("\"soon\" is not an age such as 30d, 12h or 2w".to_owned()));
    }
}
