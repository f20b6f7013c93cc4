//! `dsh session replay`: recorded turns run through one or more candidate configurations, side
//! by side with what was recorded, per turn and in total (see [`crate::agent::replay`]).

use super::exit::{Exit, Outcome};
use super::shown::plural;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};

use super::globals::{runtime, Globals};
use super::EXIT_CONFIG;
use crate::agent::explain::seconds;
use crate::agent::replay::{self, Candidate, RecordedTurn, Scratch, Totals, TurnResult};
use crate::agent::Assembly;
use crate::plugin::RowInstance;
use crate::profile::{Home, LayerScope, Profile};
use dsh_session::store::{LogRef, SessionStore};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Session ids under the home, or paths of logs (ours or DeepSeek Harness's).
    #[arg(value_name = "ID|PATH", add = super::complete::sessions())]
    logs: Vec<String>,
    /// Replay every session under the home.
    #[arg(long)]
    all: bool,
    /// With --all: only sessions created on or after this day (YYYY-MM-DD, UTC).
    #[arg(long, value_name = "DATE", requires = "all")]
    since: Option<String>,
    /// The candidate's profile (default: each session's own, else web).
    #[arg(long, value_name = "NAME", add = super::complete::profiles())]
    profile: Option<String>,
    /// A patch layer of the candidate (repeatable, in order).
    #[arg(long = "patch", value_name = "FILE")]
    patches: Vec<PathBuf>,
    /// Another candidate, compared in the same table: PROFILE, PROFILE:FILE[,FILE…], or :FILE[,FILE…]
    /// for the first candidate's profile with these patch files (repeatable).
    #[arg(long = "vs", value_name = "CANDIDATE")]
    versus: Vec<String>,
    /// One JSON object per replayed turn, then a summary object.
    #[arg(long)]
    json: bool,
}

const ASSUMPTION: &str =
    "Assumption: the provider answers a request sent at time t as it answered the recorded request \
sent last at or before t, after the same time; turns are replayed one by one from their first request; a retry decided \
under the policy that made the recorded one waits what it waited; other random samples sit at the middle of their range; \
no wait is real and nothing is written.";

/// A candidate configuration: a profile (`None`: each session's own) and patch files.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Spec {
    profile: Option<String>,
    patches: Vec<PathBuf>,
}

impl Spec {
    fn label(&self) -> String {
        let profile =
            self.profile.as_deref().map_or("each session's own profile".to_owned(), |p| format!("profile {p}"));
        let patches: Vec<String> = self.patches.iter().map(|patch| patch.display().to_string()).collect();
        if patches.is_empty() {
            profile
        } else {
            format!("{profile} + {}", patches.join(" + "))
        }
    }

    /// `PROFILE`, `PROFILE:FILE,FILE` or `:FILE` (the first candidate's profile).
    fn parse(text: &str, first: &Spec) -> Spec {
        let (profile, files) = text.split_once(':').unwrap_or((text, ""));
        Spec {
            profile: if profile.is_empty() { first.profile.clone() } else { Some(profile.to_owned()) },
            patches: files.split(',').filter(|file| !file.is_empty()).map(PathBuf::from).collect(),
        }
    }
}

/// The day `YYYY-MM-DD` (UTC) as epoch milliseconds.
fn day_start_ms(day: &str) -> anyhow::Result<f64> {
    let date: jiff::civil::Date = day.parse().with_context(|| format!("--since {day:?}: expected YYYY-MM-DD"))?;
    let start = date.to_zoned(jiff::tz::TimeZone::UTC).with_context(|| format!("--since {day:?}"))?;
    Ok(start.timestamp().as_millisecond() as f64)
}

/// The logs to replay: those named, or every session in the home's store (created since
/// `since`), oldest first.
fn logs(home: &Home, args: &ReplayArgs) -> anyhow::Result<Vec<LogRef>> {
    let store = SessionStore::for_home(home.root())?;
    if !args.all {
        if args.logs.is_empty() {
            bail!("name sessions or logs to replay, or give --all");
        }
        return args.logs.iter().map(|name| Ok(store.session_log(name)?)).collect();
    }
    let since = args.since.as_deref().map(day_start_ms).transpose()?;
    let found = store.sessions()?.into_iter().filter(|(created, _)| since.is_none_or(|since| *created >= since));
    Ok(found.map(|(_, log)| log).collect())
}

fn result_json(result: &TurnResult) -> Value {
    json!({
        "attempts": result.attempts,
        "waitsMs": result.waits_ms,
        "outcome": result.outcome.as_str(),
        "answerAfterMs": result.answer_after_ms,
        "assumedAnswers": result.assumed_answers,
        "hops": result.hops,
    })
}

fn result_text(result: &TurnResult) -> String {
    let waits: Vec<String> = result.waits_ms.iter().take(8).map(|wait| seconds(*wait)).collect();
    let more = if result.waits_ms.len() > 8 { " …" } else { "" };
    let waits = if waits.is_empty() { "no waits".to_owned() } else { format!("waits {}{more}", waits.join(" ")) };
    let answer = match result.answer_after_ms {
        Some(ms) => format!(" in {}", seconds(ms)),
        None => String::new(),
    };
    format!("{} attempt{}, {waits}, {}{answer}", result.attempts, plural(result.attempts), result.outcome.as_str())
}

/// Says when a log breaks a rule `dsh session verify` checks: its replay shows what it holds, which
/// may not be what happened.
fn warn_if_unsound(log: &LogRef, invariant: &[Arc<RowInstance>]) {
    let checkers = |header: &str| crate::agent::assembly::bundled_checkers(invariant, header);
    let Ok(report) = dsh_session::verify::verify_log(log, checkers) else { return };
    if let Some(first) = report.violations.first() {
        say!(
            "dsh: {} fails dsh session verify ({} violation{}, the first: {}); replaying what it holds",
            log.name(),
            report.violations.len(),
            plural(report.violations.len()),
            super::shown::neutralised(&first.message)
        );
    }
}

/// The candidates, built once per profile and patch list, and the totals so far.
struct Comparison<'a> {
    home: &'a Home,
    globals: &'a Globals,
    specs: Vec<Spec>,
    names: Vec<String>,
    json: bool,
    built: HashMap<(String, Vec<PathBuf>), Candidate>,
    recorded: Totals,
    candidates: Vec<Totals>,
    unreadable: usize,
    /// The checkers `session verify` holds every log to (none when the bundled library cannot
    /// load: replay then checks the structure rules alone).
    invariant: Vec<Arc<RowInstance>>,
}

pub fn run(globals: &Globals, args: ReplayArgs) -> Outcome {
    let home = globals.home()?;
    let logs = logs(&home, &args)?;
    let first = Spec { profile: args.profile.clone(), patches: args.patches.clone() };
    let mut specs = vec![first.clone()];
    specs.extend(args.versus.iter().map(|text| Spec::parse(text, &first)));
    let names: Vec<String> = (0..specs.len()).map(|index| char::from(b'A' + (index % 26) as u8).to_string()).collect();
    let candidates = vec![Totals::default(); specs.len()];
    let mut comparison = Comparison {
        home: &home,
        globals,
        specs,
        names,
        json: args.json,
        built: HashMap::new(),
        recorded: Totals::default(),
        candidates,
        unreadable: 0,
        invariant: crate::agent::assembly::bundled_invariant().map(Vec::from).unwrap_or_default(),
    };
    if !args.json {
        println_out(ASSUMPTION)?;
        for (name, spec) in comparison.names.iter().zip(&comparison.specs) {
            println_out(&format!("candidate {name}: {}", spec.label()))?;
        }
    }
    let runtime = runtime()?;
    for log in &logs {
        comparison.replay_log(&runtime, log)?;
    }
    if args.json {
        comparison.print_summary_json(logs.len())?;
    } else {
        comparison.print_summary_table(logs.len())?;
    }
    Ok(())
}

impl Comparison<'_> {
    /// Replays every turn of the log at `log` through each candidate; a log that cannot be read
    /// is counted and skipped.
    fn replay_log(&mut self, runtime: &tokio::runtime::Runtime, log: &LogRef) -> Outcome {
        let session = match log.reader().and_then(replay::read_session) {
            Ok(session) => session,
            Err(err) => {
                say!("dsh: {}: cannot be replayed ({err:#}); going on with the others", log.name());
                self.unreadable += 1;
                return Ok(());
            }
        };
        warn_if_unsound(log, &self.invariant);
        let own = log.meta()?.profile.unwrap_or_else(|| super::turns::DEFAULT_PROFILE.to_owned());
        let keys: Vec<(String, Vec<PathBuf>)> = self
            .specs
            .iter()
            .map(|spec| (spec.profile.clone().unwrap_or_else(|| own.clone()), spec.patches.clone()))
            .collect();
        for key in &keys {
            if !self.built.contains_key(key) {
                let built = runtime.block_on(candidate(self.home, self.globals, &key.0, &key.1))?;
                self.built.insert(key.clone(), built);
            }
        }
        let mut scratches: Vec<Scratch> = keys.iter().map(|_| Scratch::new(&log.name())).collect();
        for turn in &session.turns {
            let recorded = turn.recorded();
            self.recorded.add(&recorded, &recorded);
            let mut results = Vec::new();
            for (index, key) in keys.iter().enumerate() {
                let result = session.replay_turn(turn, &self.built[key], &mut scratches[index]);
                self.candidates[index].add(&result, &recorded);
                results.push(result);
            }
            self.print_turn(turn, &recorded, &results)?;
        }
        Ok(())
    }

    fn print_turn(&self, turn: &RecordedTurn, recorded: &TurnResult, results: &[TurnResult]) -> std::io::Result<()> {
        if self.json {
            let candidates: Vec<Value> = self
                .names
                .iter()
                .zip(results)
                .map(|(name, result)| {
                    let mut value = result_json(result);
                    value["name"] = name.as_str().into();
                    value
                })
                .collect();
            let line = json!({
                "session": turn.session, "turn": turn.turn, "recorded": result_json(recorded),
                "candidate": result_json(&results[0]), "candidates": candidates,
            });
            return println_out(&dsh_abi::js::to_string(&line));
        }
        if turn.had_failures() {
            println_out(&format!("\nsession {} turn {}", turn.session, turn.turn))?;
            println_out(&format!("  recorded  {}", result_text(recorded)))?;
            for (name, result) in self.names.iter().zip(results) {
                println_out(&format!("  {name:9} {}", result_text(result)))?;
            }
        }
        Ok(())
    }

    fn print_summary_json(&self, logs: usize) -> std::io::Result<()> {
        let candidates: Vec<Value> =
            self.names.iter().zip(&self.candidates).map(|(name, totals)| totals_json(totals, name)).collect();
        let labels: Vec<String> = self.specs.iter().map(Spec::label).collect();
        let summary = json!({"summary": {
            "sessions": logs - self.unreadable, "unreadable": self.unreadable,
            "recorded": totals_json(&self.recorded, "recorded"), "candidates": candidates, "labels": labels,
            "assumption": ASSUMPTION,
        }});
        println_out(&dsh_abi::js::to_string(&summary))
    }

    fn print_summary_table(&self, logs: usize) -> std::io::Result<()> {
        let replayed = logs - self.unreadable;
        let skipped =
            if self.unreadable > 0 { format!(" ({} could not be read)", self.unreadable) } else { String::new() };
        println_out(&format!(
            "\n{replayed} session{}{skipped}, {} turn{} replayed",
            plural(replayed),
            self.recorded.turns,
            plural(self.recorded.turns)
        ))?;
        println_out(&format!(
            "  {:9} {:>9} {:>9} {:>10} {:>6} {:>6}",
            "", "requests", "waiting", "completed", "lost", "saved"
        ))?;
        println_out(&totals_row("recorded", &self.recorded, false))?;
        for (name, totals) in self.names.iter().zip(&self.candidates) {
            println_out(&totals_row(name, totals, true))?;
        }
        for (name, totals) in self.names.iter().zip(&self.candidates).filter(|(_, totals)| totals.hops > 0) {
            println_out(&failover_line(name, totals))?;
        }
        for (name, totals) in self.names.iter().zip(&self.candidates).filter(|(_, totals)| totals.sampled_waits > 0) {
            println_out(&sampled_line(name, totals))?;
        }
        Ok(())
    }
}

fn totals_json(totals: &Totals, name: &str) -> Value {
    json!({
        "name": name, "turns": totals.turns, "requests": totals.requests, "waitingMs": totals.waiting_ms,
        "completed": totals.completed, "lost": totals.lost, "saved": totals.saved, "failedRecorded": totals.failed,
        "assumedAnswers": totals.assumed_answers, "hops": totals.hops,
        "recordedWaits": totals.recorded_waits, "sampledWaits": totals.sampled_waits,
    })
}

/// What a candidate's failover came to, and what it assumed: `with this failover, 3 of the 4
/// failed turns would have completed …`.
fn failover_line(name: &str, totals: &Totals) -> String {
    format!(
        "candidate {name}: with this failover, {} of the {} failed turns would have completed ({} request{} went to \
         a route this log never sent to, assumed to answer; a route the log recorded failing answers as recorded)",
        totals.saved,
        totals.failed,
        totals.assumed_answers,
        plural(totals.assumed_answers)
    )
}

/// Which of a candidate's waits are its own: `candidate B: 3 waits sampled anew …`.
fn sampled_line(name: &str, totals: &Totals) -> String {
    let sampled = totals.sampled_waits;
    let mut line = format!(
        "candidate {name}: {sampled} wait{} sampled anew, at the middle of {} range (its policy is not the one \
         recorded there)",
        plural(sampled),
        if sampled == 1 { "its" } else { "their" }
    );
    if totals.recorded_waits > 0 {
        line.push_str(&format!("; {} recorded wait{} reused", totals.recorded_waits, plural(totals.recorded_waits)));
    }
    line
}

/// One row of the totals table; the recorded run compares with nothing (`-`).
fn totals_row(name: &str, totals: &Totals, compared: bool) -> String {
    let (lost, saved) =
        if compared { (totals.lost.to_string(), totals.saved.to_string()) } else { ("-".to_owned(), "-".to_owned()) };
    format!(
        "  {name:9} {:>9} {:>9} {:>10} {lost:>6} {saved:>6}",
        totals.requests,
        seconds(totals.waiting_ms),
        totals.completed
    )
}

fn println_out(line: &str) -> std::io::Result<()> {
    out!("{line}")
}

/// Loads a candidate as `run` would: the profile composed with `patches`, its rows built.
async fn candidate(home: &Home, globals: &Globals, profile: &str, patches: &[PathBuf]) -> Result<Candidate, Exit> {
    let profile = Profile::peek(home, profile)?;
    let composition = profile.compose(home, patches, LayerScope::All)?;
    match Assembly::build(home, &profile, &composition, globals.verbose(), &crate::counters::Stores::scratch()).await {
        Ok(assembly) => {
            let policies = assembly.routes.iter().map(|(name, route)| (name.clone(), route.policy.clone())).collect();
            let fallback = assembly.routes.get(&assembly.agent.provider).map(|route| route.policy.clone());
            Ok(Candidate { listeners: assembly.listeners.clone(), policies, fallback })
        }
        Err(problems) => {
            for problem in problems {
                say!("{problem}");
            }
            say!("dsh: candidate profile {} cannot run", profile.name);
            Err(Exit::reported(EXIT_CONFIG))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_read_as_utc_midnights() {
        assert_eq!(day_start_ms("1970-01-01").unwrap(), 0.0);
        assert_eq!(day_start_ms("2026-11-30").unwrap(), 1_795_996_800_000.0);
        assert!(day_start_ms("2026-13-01").is_err() && day_start_ms("yesterday").is_err());
    }

    #[test]
    fn a_versus_spec_names_a_profile_its_patches_or_both() {
        let first = Spec { profile: Some("web".into()), patches: vec![] };
        assert_eq!(Spec::parse("relay", &first), Spec { profile: Some("relay".into()), patches: vec![] });
        assert_eq!(
            Spec::parse(":a.yml,b.yml", &first),
            Spec { profile: Some("web".into()), patches: vec!["a.yml".into(), "b.yml".into()] }
        );
        assert_eq!(Spec::parse("t:x.yml", &first).label(), "profile t + x.yml");
    }
}
