//! `dsh session …`: list sessions, show one as a timeline, verify logs against the structure rules
//! and the retry-record invariant, repair a crashed log, import a DeepSeek Harness log.

use super::exit::{Exit, Outcome};
use super::shown::plural;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;

use super::globals::{runtime, Globals};
use super::shown::neutralised;
use super::turns::{finish, handle_interrupts, print_repair, resolve_for, resolved, start};
use super::EXIT_DAMAGED;
use crate::agent::assembly::bundled_checkers;
use crate::agent::session::{self as agent_session, ResumeEvent};
use crate::context::epoch_ms;
use crate::NotFound;
use dsh_session::locate::find_log;
use dsh_session::log::{OpenError, SessionLog};
use dsh_session::meta::RunOverrides;
use dsh_session::reader::Damage;
use dsh_session::store::{LogRef, SessionStore};
use dsh_session::summary;
use dsh_session::timeline;
use dsh_session::verify::{self, Report};
use dsh_session::writer::SyncPolicy;

#[derive(Debug, Args)]
pub struct SessionArgs {
    #[command(subcommand)]
    command: SessionCommand,
}

#[derive(Debug, Subcommand)]
enum SessionCommand {
    /// Sessions under the home, newest first: id, created, turns, how the last turn ended, damage and a live writer.
    List {
        /// Print a JSON array of `{id, createdAt, turns, lastEnd, damage, writer, profile, firstPrompt, tokens}`.
        #[arg(long)]
        json: bool,
    },
    /// A readable timeline: turns, steps, requests, each retry with its code, delay and failure.
    Show {
        /// A session id under the home, or the path of a log or session directory.
        #[arg(value_name = "ID|PATH", add = super::complete::sessions())]
        log: String,
        /// Print the events as JSON lines instead.
        #[arg(long)]
        json: bool,
    },
    /// Crash repair without running anything: cut a torn last line (keeping a copy), close an
    /// interrupted turn. Exit 5 if the log is damaged where repair must not touch it.
    Repair {
        /// A session id under the home, or the path of a log or session directory.
        #[arg(value_name = "ID|PATH", add = super::complete::sessions())]
        log: String,
        /// Print `{path, torn, closers, warnings, sound}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reattach a cold session: repair it, offer it to agent/session-start listeners (source
    /// resume), and run the continuation turn one of them enqueues, if any.
    Resume {
        /// The session to resume (an id under the home; a value with a '/' is a log path).
        #[arg(value_name = "ID", add = super::complete::sessions())]
        session: String,
        /// The profile whose rows run the continuation (default: the session's own, else web).
        #[arg(long, value_name = "NAME", add = super::complete::profiles())]
        profile: Option<String>,
        /// An extra patch layer, applied after every other layer (repeatable, in order).
        #[arg(long = "patch", value_name = "FILE")]
        patches: Vec<PathBuf>,
        /// As `run --json`: a `{session, profile, log}` object, then every event appended.
        #[arg(long)]
        json: bool,
    },
    /// Remove sessions, each under its writer lock (one being written is left, exit 6): its log
    /// and everything kept with it, from either store.
    Delete(super::prune::DeleteArgs),
    /// Remove the sessions last used longer ago than --older-than, keeping the --keep most
    /// recently used; sessions being written are left.
    Prune(super::prune::PruneArgs),
    /// What-if: run recorded turns' failures through a candidate configuration's real
    /// listeners on a virtual clock, beside what was recorded (nothing is written).
    Replay(super::replay::ReplayArgs),
    /// Copy a DeepSeek Harness log (session.jsonl or session.jsonl.zstd) into the home as a plain
    /// log, after verifying it, so `dsh run --session ID` continues it. The source is not changed.
    Import {
        /// A DeepSeek Harness session.jsonl or session.jsonl.zstd, or its session directory.
        #[arg(value_name = "PATH")]
        path: PathBuf,
        /// Print `{session, log, events, tornLine}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a session's log as its exact JSONL lines (a file DeepSeek Harness loads), from
    /// either store.
    Export {
        /// A session id (or a unique prefix), or the path of a log or session directory.
        #[arg(value_name = "ID", add = super::complete::sessions())]
        session: String,
        /// The file to create (never overwritten); stdout when left out.
        #[arg(value_name = "PATH")]
        path: Option<PathBuf>,
    },
    /// Upgrade a v0 log to format v4 (DeepSeek Harness 0.2's): a session.v4.jsonl beside it,
    /// from which the session then reads and continues. The v0 log is kept as it was; removing
    /// the v4 file goes back to it.
    Migrate {
        /// A session id (or a unique prefix), or the path of a log or session directory.
        #[arg(value_name = "ID", add = super::complete::sessions())]
        session: String,
    },
    /// Check whole logs (ours, and DeepSeek Harness session.jsonl / session.jsonl.zstd files)
    /// against the session structure rules and the llm-retry invariant; every violation is
    /// printed as PATH:SEQ: message. Never creates or reads a profile.
    Verify {
        /// Session ids under the home, or paths of logs or session directories.
        #[arg(required = true, value_name = "ID|PATH", add = super::complete::sessions())]
        logs: Vec<String>,
        /// One JSON report per file instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(globals: &Globals, args: SessionArgs) -> Outcome {
    match args.command {
        SessionCommand::Verify { logs, json } => verify_command(globals, &logs, json),
        SessionCommand::List { json } => list(globals, json),
        SessionCommand::Import { path, json } => import(globals, &path, json),
        SessionCommand::Replay(args) => super::replay::run(globals, args),
        SessionCommand::Delete(args) => super::prune::delete(globals, &args),
        SessionCommand::Prune(args) => super::prune::prune(globals, &args),
        SessionCommand::Show { log, json } => show(globals, &log, json),
        SessionCommand::Export { session, path } => export(globals, &session, path.as_deref()),
        SessionCommand::Repair { log, json } => repair(globals, &log, json),
        SessionCommand::Migrate { session } => migrate(globals, &session),
        SessionCommand::Resume { session, profile, patches, json } => {
            resume(globals, &session, profile.as_deref(), &patches, json)
        }
    }
}

fn resume(globals: &Globals, session: &str, profile: Option<&str>, patches: &[PathBuf], json: bool) -> Outcome {
    let home = globals.home()?;
    let store = SessionStore::for_home(home.root())?;
    let log = store.session_log(session)?;
    let target = resolved(resolve_for(store, Some(log), profile, patches, &RunOverrides::default())?);
    runtime()?.block_on(async {
        let mut agent = start(globals, &home, &target, json).await?;
        if json {
            out!(
                "{}",
                json!({"session": agent.log.id(), "profile": target.profile, "log": agent.log.location().name()})
            )?;
        }
        handle_interrupts(agent.cancel.clone())?;
        let mut report = |event: ResumeEvent<'_>| match event {
            ResumeEvent::AlreadyInLog { id } => {
                say!("dsh: the continuation {id} is already in the log; not enqueued again")
            }
            ResumeEvent::Continuing { plugin, summary } => say!("dsh: {summary} ({plugin})"),
            ResumeEvent::Ended(_) => {}
        };
        let resumed = agent_session::resume(&mut agent, &mut report).await?;
        agent.assembly.tools.close().await;
        match resumed {
            Some(end) => finish(&agent, &end),
            None => {
                if !json {
                    out!("nothing to resume: no listener found interrupted work in session {}", agent.log.id())?;
                }
                Ok(())
            }
        }
    })
}

/// What `session list` adds after a session whose log has a line that is not an event.
fn damage_note(damage: &Damage) -> String {
    match damage {
        Damage::Torn { .. } => "  torn last line (dsh session repair cuts it)".to_owned(),
        Damage::Corrupt { .. } => format!("  damaged at {} (dsh session verify)", damage.position()),
    }
}

fn list(globals: &Globals, json: bool) -> Outcome {
    let store = SessionStore::for_home(globals.home()?.root())?;
    let summaries: Vec<summary::Summary> =
        summary::newest_first(&store, |log, err| say!("dsh: {}: {err:#}", log.name()))?
            .into_iter()
            .map(|(s, _)| s)
            .collect();
    if json {
        let value: Vec<_> = summaries.iter().map(summary::Summary::json).collect();
        out_raw!("{}", dsh_abi::js::to_string_pretty(&value))?;
        return Ok(());
    }
    for summary in &summaries {
        out!("{}", neutralised(&list_line(summary)))?;
    }
    Ok(())
}

/// How long `session list` shows the first prompt.
const LISTED_PROMPT_CHARS: usize = 48;

fn list_line(summary: &summary::Summary) -> String {
    let turns = match summary.turns {
        1 => "1 turn".to_owned(),
        count => format!("{count} turns"),
    };
    format!(
        "{}  {}  {}  {turns}  {}  {}{}{}",
        summary.id,
        timeline::http_date(summary.created_ms()),
        summary.profile.as_deref().unwrap_or("-"),
        summary.last_end,
        summary
            .first_prompt
            .as_deref()
            .map(|text| format!("{:?}", crate::one_line(text, LISTED_PROMPT_CHARS)))
            .unwrap_or_else(|| "-".to_owned()),
        summary.writer.map(|pid| format!("  (process {pid} is writing it)")).unwrap_or_default(),
        summary.damage.as_ref().map(damage_note).unwrap_or_default()
    )
}

fn show(globals: &Globals, name: &str, json: bool) -> Outcome {
    let log = SessionStore::for_home(globals.home()?.root())?.resolve(name)?;
    if json {
        let mut reader = log.reader()?;
        while let Some(next) = reader.next_event() {
            if let Ok(event) = next? {
                out!("{}", event.line)?;
            }
        }
        return Ok(());
    }
    for line in timeline::render(&log)? {
        out!("{}", neutralised(&line))?;
    }
    Ok(())
}

fn repair(globals: &Globals, name: &str, json: bool) -> Outcome {
    let store = SessionStore::for_home(globals.home()?.root())?;
    let log = store.resolve(name)?;
    let lock = log.lock(store.local_folder())?;
    let invariant = crate::agent::assembly::bundled_invariant()?;
    let open_checkers = |header: &str| bundled_checkers(&invariant, header);
    let path = log.name();
    match SessionLog::open(&log, lock, open_checkers, SyncPolicy::Durable, epoch_ms(), true) {
        Ok((_, report)) => {
            let repaired = report.torn.is_some() || !report.closers.is_empty();
            if json {
                out!(
                    "{}",
                    json!({
                        "path": path,
                        "torn": report.torn.as_ref().map(|(at, len, kept)| json!({"line": at.line, "offset": at.offset, "bytes": len, "keptIn": kept.display().to_string()})),
                        "closers": report.closers,
                        "warnings": report.warnings,
                        "sound": !repaired && report.warnings.is_empty(),
                    })
                )?;
                return Exit::unless(report.warnings.is_empty(), EXIT_DAMAGED);
            }
            print_repair(&report);
            if !report.warnings.is_empty() {
                out!(
                    "{}: {}the log still breaks {} rule{} that repair does not change (see dsh session verify)",
                    path,
                    if repaired { "repaired the crash damage, but " } else { "no crash damage to repair, but " },
                    report.warnings.len(),
                    plural(report.warnings.len())
                )?;
                return Err(Exit::reported(EXIT_DAMAGED));
            }
            if repaired {
                out!("{path}: repaired")?;
            } else {
                out!("{path}: the log is sound; nothing to repair")?;
            }
            Ok(())
        }
        Err(err @ (OpenError::Corrupt { .. } | OpenError::Violation { .. })) => {
            if json {
                out!("{}", json!({"path": path, "refused": err.to_string()}))?;
            }
            say!("dsh: {err}");
            say!("dsh: repair only cuts a torn last line and closes an interrupted turn; it will not touch this log");
            Err(Exit::reported(EXIT_DAMAGED))
        }
        Err(err) => Err(err.into()),
    }
}

fn import(globals: &Globals, path: &Path, json: bool) -> Outcome {
    let home = globals.home()?;
    let source = match path.is_dir() {
        true => find_log(path).ok_or_else(|| {
            NotFound(format!(
                "{}: no session log ({}) in this directory",
                path.display(),
                dsh_session::locate::LOG_FILES
            ))
        })?,
        false if path.is_file() => path.to_owned(),
        false if path.exists() => return Err(dsh_session::import::ImportError::NotAFile(path.to_owned()).into()),
        false => return Err(NotFound(format!("{}: no such file", path.display())).into()),
    };
    let checkers = crate::agent::assembly::bundled_invariant()?;
    let report = verify::verify_log(&LogRef::file(source.clone()), |header| bundled_checkers(&checkers, header))?;
    if !report.violations.is_empty() {
        if json {
            out_raw!("{}", dsh_abi::js::to_string_pretty(&report_json(&report)))?;
            return Err(Exit::reported(EXIT_DAMAGED));
        }
        print_violations(&report)?;
        say!(
            "dsh: not imported: {} breaks {} rule{} (see above)",
            source.display(),
            report.violations.len(),
            plural(report.violations.len())
        );
        return Err(Exit::reported(EXIT_DAMAGED));
    }
    let store = SessionStore::for_home(home.root())?;
    let imported = dsh_session::import::import(&source, &store)?;
    let into = imported.log.file_path().map_or_else(|| store.describe(), |log| home.display(log));
    if json {
        out!(
            "{}",
            json!({"session": imported.session_id, "log": imported.log.name(), "events": imported.events, "tornLine": imported.torn})
        )?;
        return Ok(());
    }
    if let Some(torn) = &imported.torn {
        say!("dsh: left out the torn last line at {torn} (a crash artefact); {} is unchanged", source.display());
    }
    out!("imported {} as session {} ({} events) into {into}", source.display(), imported.session_id, imported.events)?;
    out!("continue it with: dsh run --session {} \"…\"", imported.session_id)?;
    Ok(())
}

/// `session export`: the log's exact lines, to `path` (created, never overwritten; synced before
/// it is named) or to stdout.
fn export(globals: &Globals, name: &str, path: Option<&Path>) -> Outcome {
    let log = SessionStore::for_home(globals.home()?.root())?.resolve(name)?;
    let mut lines = log.lines()?;
    let Some(path) = path else {
        let mut out = std::io::stdout().lock();
        std::io::copy(&mut lines, &mut out)?;
        return Ok(out.flush()?);
    };
    let folder = path.parent().filter(|folder| !folder.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let staged = dsh_session::fsutil::temp_file_in(folder, ".dsh-export-")?;
    let mut out = std::io::BufWriter::new(staged.as_file());
    let bytes = std::io::copy(&mut lines, &mut out)?;
    out.flush()?;
    drop(out);
    staged.as_file().sync_all()?;
    staged.persist_noclobber(path).map_err(|err| match err.error.kind() {
        std::io::ErrorKind::AlreadyExists => anyhow::anyhow!("{} exists; not overwritten", path.display()),
        _ => anyhow::Error::new(err.error).context(format!("cannot write {}", path.display())),
    })?;
    dsh_session::fsutil::sync_dir(folder)?;
    say!("dsh: exported session {} ({bytes} bytes) to {}", log.name(), path.display());
    Ok(())
}

/// Prints a report's violations as `PATH:SEQ: message` (or `PATH:line N (byte B): message`).
/// The report's notes on stderr, then its violations on stdout.
fn print_violations(report: &Report) -> std::io::Result<()> {
    for note in &report.notes {
        say!("{}: note: {note}", report.path);
    }
    for finding in &report.violations {
        match (finding.seq, finding.at) {
            (Some(seq), _) => out!("{}:{seq}: {}", report.path, finding.message)?,
            (None, Some(at)) => out!("{}:line {} (byte {}): {}", report.path, at.line, at.offset, finding.message)?,
            (None, None) => out!("{}: {}", report.path, finding.message)?,
        }
    }
    Ok(())
}

fn migrate(globals: &Globals, name: &str) -> Outcome {
    let store = SessionStore::for_home(globals.home()?.root())?;
    let log = store.resolve(name)?;
    let invariant = crate::agent::assembly::bundled_invariant()?;
    let report = verify::verify_log(&log, |header| bundled_checkers(&invariant, header))?;
    if !report.violations.is_empty() {
        print_violations(&report)?;
        let count = report.violations.len();
        say!("dsh: {}: {count} violation{}; not migrated (dsh session verify)", log.name(), plural(count));
        return Err(Exit::reported(EXIT_DAMAGED));
    }
    let lock = log.lock(store.local_folder())?;
    let migrated = dsh_session::upgrade::to_v4(&log, lock)?;
    say!(
        "dsh: migrated session {} to format v4: {} events read, {} written, in {}; the original log {} is kept",
        log.id(),
        migrated.counts.read,
        migrated.counts.written,
        migrated.path.display(),
        log.name()
    );
    Ok(())
}

fn verify_command(globals: &Globals, logs: &[String], json: bool) -> Outcome {
    let checkers = crate::agent::assembly::bundled_invariant()?;
    let store = SessionStore::for_home(globals.home()?.root())?;
    let mut reports = Vec::new();
    let mut unreadable = 0;
    for name in logs {
        let log = store.resolve(name)?;
        match verify::verify_log(&log, |header| bundled_checkers(&checkers, header)) {
            Ok(report) => reports.push(report),
            Err(err) => {
                unreadable += 1;
                say!("{}: {err}", log.name());
            }
        }
    }
    if json {
        let value: Vec<_> = reports.iter().map(report_json).collect();
        out_raw!("{}", dsh_abi::js::to_string_pretty(&value))?;
    } else {
        for report in &reports {
            print_violations(report)?;
        }
    }
    let violations: usize = reports.iter().map(|report| report.violations.len()).sum();
    let events: u64 = reports.iter().map(|report| report.events).sum();
    if !json {
        let unreadable = match unreadable {
            0 => String::new(),
            count => format!("; {count} log{} unreadable", plural(count)),
        };
        say!(
            "dsh: verified {} log{} ({events} events): {violations} violation{}{unreadable}",
            reports.len(),
            plural(reports.len()),
            plural(violations)
        );
    }
    Exit::unless(violations == 0 && unreadable == 0, EXIT_DAMAGED)
}

fn report_json(report: &Report) -> serde_json::Value {
    json!({
        "path": report.path,
        "events": report.events,
        "violations": report.violations.iter().map(|finding| json!({
            "seq": finding.seq,
            "line": finding.at.map(|at| at.line),
            "offset": finding.at.map(|at| at.offset),
            "message": finding.message,
        })).collect::<Vec<_>>(),
        "notes": report.notes,
    })
}
