//! What `dsh run` and `dsh session resume` share on the terminal: the runtime, starting an agent
//! over a composed profile, the live retry line, Ctrl-C, and how a turn's end is reported.

use super::exit::{Exit, Outcome, EXIT_FAILED, EXIT_INTERRUPTED};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::globals::Globals;
use super::live;
use super::shown::neutralised;
use super::EXIT_CONFIG;
use crate::agent::session::{self, Opening, StartError};
pub(crate) use crate::agent::target::{resolve_for, Resolved, DEFAULT_PROFILE};
use crate::agent::turn::{Agent, TurnEnd};
use crate::agent::view::{RetryNotice, TurnView};
use crate::agent::Cancel;
use crate::llm::openai::ToolCall;
use crate::profile::Home;
use crate::tools::ToolOutcome;
use dsh_session::meta::RunOverrides;
use dsh_session::repair::Repair;
use dsh_session::store::SessionStore;
use dsh_session::usage::Tokens;

/// Shows a turn on the terminal: text on stdout, retries on stderr. On a terminal the text
/// streams as it comes, and the text of an attempt that fails is marked discarded before the
/// retry line; any other stdout gets exactly the answer, once (each attempt's text is held until
/// the attempt completes). A stdout whose reader went away (`dsh run … | head -1`) is left alone
/// from then on; the turn still runs to its end.
pub(crate) struct TerminalView {
    json: bool,
    live: bool,
    /// Provider text is neutralised before it reaches a terminal.
    stdout_terminal: bool,
    stdout_closed: bool,
    bar: Option<ProgressBar>,
    /// The live line shown while a request has sent nothing back yet.
    waiting: Option<ProgressBar>,
    /// The calls of the step that have not come back (id, name), and their live line.
    calls: Vec<(String, String)>,
    calling: Option<ProgressBar>,
    /// The live line shown while MCP servers start.
    starting: Option<ProgressBar>,
    /// The codes of this turn's retries, for the line a live display keeps once the retry lines
    /// are gone.
    retried: Vec<String>,
    text_open: bool,
    /// The current attempt has shown text (a failure then marks it discarded).
    attempt_shown: bool,
    /// The current attempt's text, held for a stdout that is not a terminal.
    held: String,
}

/// What a terminal shows after the text of an attempt that failed mid-answer.
const DISCARDED: &str = " [discarded: the request failed mid-answer]";

impl TerminalView {
    pub(crate) fn new(json: bool) -> Self {
        TerminalView {
            json,
            live: std::io::stderr().is_terminal(),
            stdout_terminal: std::io::stdout().is_terminal(),
            stdout_closed: false,
            bar: None,
            waiting: None,
            calls: Vec::new(),
            calling: None,
            starting: None,
            retried: Vec::new(),
            text_open: false,
            attempt_shown: false,
            held: String::new(),
        }
    }

    /// Writes to stdout unless its reader went away.
    fn write_out(&mut self, text: &str) {
        if self.stdout_closed {
            return;
        }
        let mut stdout = std::io::stdout().lock();
        if stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).is_err() {
            self.stdout_closed = true;
        }
    }

    fn end_text_line(&mut self) {
        if self.text_open {
            self.write_out("\n");
            self.text_open = false;
        }
    }
}

/// The time left, as `session show` prints delays ([`dsh_session::timeline::seconds`]).
fn remaining_text(remaining: Duration) -> String {
    dsh_session::timeline::seconds(remaining.as_secs_f64() * 1000.0)
}

fn retry_line(notice: &RetryNotice, remaining: Duration) -> String {
    format!("Retrying model request ({}) · {}", notice.count, remaining_text(remaining))
}

/// What a live display keeps of a turn's retries: `recovered after 2 retries: SERVER, RATE_LIMIT`.
fn recovered_line(codes: &[String]) -> String {
    let retries = if codes.len() == 1 { "retry" } else { "retries" };
    format!("recovered after {} {retries}: {}", codes.len(), codes.join(", "))
}

impl TerminalView {
    fn stop_waiting(&mut self) {
        live::clear(self.waiting.take());
    }

    /// Shows the calls still running on the live line, or clears it when none is.
    fn show_calls(&mut self) {
        let names: Vec<&str> = self.calls.iter().map(|(_, name)| name.as_str()).collect();
        match (&self.calling, names.is_empty()) {
            (_, true) => live::clear(self.calling.take()),
            (Some(line), false) => line.set_message(neutralised(&live::calling(&names)).into_owned()),
            (None, false) => self.calling = live::elapsed_line(&live::calling(&names)),
        }
    }
}

impl TurnView for TerminalView {
    fn attempt_started(&mut self, route: &str) {
        if self.live {
            self.waiting = live::elapsed_line(&format!("waiting for {route}"));
        }
    }

    fn text(&mut self, delta: &str) {
        self.stop_waiting();
        if self.json {
            return;
        }
        if self.stdout_terminal {
            self.write_out(&neutralised(delta));
            self.text_open = true;
            self.attempt_shown = true;
        } else {
            self.held.push_str(delta);
        }
    }

    fn attempt_ended(&mut self, completed: bool) {
        self.stop_waiting();
        let shown = std::mem::take(&mut self.attempt_shown);
        if self.stdout_terminal {
            if !completed && shown {
                let marker = if std::env::var_os("NO_COLOR").is_some() {
                    DISCARDED.to_owned()
                } else {
                    format!("\x1b[2m{DISCARDED}\x1b[0m")
                };
                self.write_out(&marker);
                self.end_text_line();
            }
        } else if completed {
            let answer = std::mem::take(&mut self.held);
            self.write_out(&answer);
        } else {
            self.held.clear();
        }
    }

    fn retry_scheduled(&mut self, notice: &RetryNotice) {
        self.end_text_line();
        self.retried.push(notice.code.clone());
        if self.live {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(ProgressStyle::with_template("{msg}").expect("a valid template"));
            bar.set_message(retry_line(notice, notice.delay));
            self.bar = Some(bar);
        } else {
            say!("{} ({}: {})", retry_line(notice, notice.delay), notice.code, neutralised(&notice.message));
        }
    }

    fn counts_down(&self) -> bool {
        self.live
    }

    fn retry_tick(&mut self, notice: &RetryNotice, remaining: Duration) {
        if let Some(bar) = &self.bar {
            bar.set_message(retry_line(notice, remaining));
        }
    }

    fn retry_done(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn turn_ended(&mut self, completed: bool) {
        self.stop_waiting();
        let retried = std::mem::take(&mut self.retried);
        if completed && !self.json {
            self.write_out("\n");
            self.text_open = false;
        }
        if completed && self.live && !retried.is_empty() {
            say!("{}", recovered_line(&retried));
        }
    }

    fn output_gone(&self) -> bool {
        self.stdout_closed
    }

    fn retry_refused(&mut self, row: &str, reason: &str) {
        self.end_text_line();
        say!("dsh: retry refused by row \"{row}\": {}", neutralised(reason));
    }

    fn route_switched(&mut self, from: &str, to: &str, code: &str) {
        self.end_text_line();
        self.retried.push(code.to_owned());
        say!("{}", switch_line(from, to, code));
    }

    fn tool_started(&mut self, call: &ToolCall) {
        self.stop_waiting();
        self.end_text_line();
        if self.live {
            self.calls.push((call.id.clone(), call.name.clone()));
            self.show_calls();
        }
    }

    fn tool_progress(&mut self, call: &ToolCall, progress: &str) {
        if !self.live {
            say!("tool {} · {}", neutralised(&call.name), neutralised(&crate::one_line(progress, 200)));
            return;
        }
        if let Some((_, shown)) = self.calls.iter_mut().find(|(id, _)| *id == call.id) {
            *shown = format!("{} ({})", call.name, crate::one_line(progress, 80));
        }
        self.show_calls();
    }

    fn tool_ended(&mut self, call: &ToolCall, outcome: &ToolOutcome) {
        let line = tool_line(call, outcome);
        match &self.calling {
            Some(calling) => calling.suspend(|| say!("{line}")),
            None => say!("{line}"),
        }
        self.calls.retain(|(id, _)| *id != call.id);
        self.show_calls();
    }

    fn servers_starting(&mut self, rows: &[String]) {
        if self.live {
            self.starting = live::servers_starting(rows);
        }
    }

    fn servers_started(&mut self) {
        live::clear(self.starting.take());
    }
}

/// The live line of a failover hop: `switching to backup (deepseek-official: SERVER)`.
pub(crate) fn switch_line(from: &str, to: &str, code: &str) -> String {
    format!("switching to {} ({}: {code})", neutralised(to), neutralised(from))
}

/// One line per tool call: `tool lookup {"q":1} → 42 bytes: first words…`, or the error.
fn tool_line(call: &ToolCall, outcome: &ToolOutcome) -> String {
    let text: String = outcome.content.iter().filter_map(|block| block["text"].as_str()).collect();
    let shown = crate::one_line(&neutralised(&text), 80);
    let arguments = crate::one_line(&neutralised(&call.arguments), 60);
    let name = neutralised(&call.name);
    match &outcome.error {
        Some(error) => format!("tool {name} {arguments} → {}: {shown}", error["code"].as_str().unwrap_or("error")),
        None if outcome.is_error => format!("tool {name} {arguments} → error: {shown}"),
        None => format!("tool {name} {arguments} → {} bytes: {shown}", text.len()),
    }
}

/// The termination signal (SIGTERM, SIGHUP — the terminal closed — or SIGQUIT) that arrived, 0
/// while none did: the running turn ends as with Ctrl-C (closed in the log), and dsh exits with
/// 128 + its number.
static TERMINATED_BY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether a termination signal arrived (a chat then ends after its running turn).
pub(crate) fn terminated() -> bool {
    TERMINATED_BY.load(std::sync::atomic::Ordering::SeqCst) != 0
}

/// The exit code for a process stopped by a signal now, without finishing its turn.
pub(crate) fn exit_code_now() -> u8 {
    match TERMINATED_BY.load(std::sync::atomic::Ordering::SeqCst) {
        0 => EXIT_INTERRUPTED,
        signal => 128 + signal as u8,
    }
}

/// The signals that stop a turn: Ctrl-C, and the termination signals.
pub(crate) struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminations: [(tokio::signal::unix::Signal, i32); 3],
}

impl StopSignals {
    /// Registers the handlers: a signal that comes right after this returns is never lost.
    pub(crate) fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminations: [
                (signal(SignalKind::terminate())?, libc::SIGTERM),
                (signal(SignalKind::hangup())?, libc::SIGHUP),
                (signal(SignalKind::quit())?, libc::SIGQUIT),
            ],
        })
    }

    /// Waits for the next stop signal (noting a termination signal); `None` when none can come.
    pub(crate) async fn next(&mut self) -> Option<()> {
        let [(term, _), (hup, _), (quit, _)] = &mut self.terminations;
        let signal = tokio::select! {
            got = self.interrupt.recv() => return got,
            got = term.recv() => got.map(|()| libc::SIGTERM),
            got = hup.recv() => got.map(|()| libc::SIGHUP),
            got = quit.recv() => got.map(|()| libc::SIGQUIT),
        }?;
        TERMINATED_BY.store(signal, std::sync::atomic::Ordering::SeqCst);
        Some(())
    }
}

/// Ctrl-C or a termination signal once cancels the turn (it is closed in the log); a second one
/// exits at once (130, or 128 + the termination signal's number). The handlers are registered
/// before this returns, so a signal that comes right after is never lost.
pub(crate) fn handle_interrupts(cancel: Cancel) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    tokio::spawn(async move {
        if signals.next().await.is_none() {
            return;
        }
        cancel.cancel();
        say!("\ndsh: cancelling the turn (Ctrl-C again exits at once)");
        if signals.next().await.is_some() {
            std::process::exit(i32::from(exit_code_now()));
        }
    });
    Ok(())
}

pub(crate) fn print_repair(repair: &Repair) {
    for note in repair.notes() {
        say!("dsh: {note}");
    }
}

/// Which session a turn-running command works on, and through which profile and extra layers.
#[derive(Debug, clap::Args)]
pub(crate) struct SessionTarget {
    /// The profile whose rows run the turns (default: the session's own, else web).
    #[arg(long, value_name = "NAME", add = super::complete::profiles())]
    pub profile: Option<String>,
    /// Continue this session (an id under the home; a value with a '/' is a log path).
    #[arg(long, value_name = "ID", add = super::complete::sessions())]
    pub session: Option<String>,
    /// An extra patch layer, applied after every other layer (repeatable, in order).
    #[arg(long = "patch", value_name = "FILE")]
    pub patches: Vec<PathBuf>,
    /// The route the agent's turns use (its row's `provider`), kept with the session.
    #[arg(long, value_name = "ROUTE")]
    pub provider: Option<String>,
    /// The model the agent's requests ask for (its row's `model`), kept with the session.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The system prompt ("" sends none; its row's `system`), kept with the session.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
}

impl SessionTarget {
    /// The log to continue (when `--session` names one), the profile and the layers that run it.
    pub fn resolve(&self, home: &Home) -> anyhow::Result<Resolved> {
        let store = SessionStore::for_home(home.root())?;
        let existing = self.session.as_deref().map(|name| store.session_log(name)).transpose()?;
        let overrides =
            RunOverrides { provider: self.provider.clone(), model: self.model.clone(), system: self.system.clone() };
        Ok(resolved(resolve_for(store, existing, self.profile.as_deref(), &self.patches, &overrides)?))
    }
}

/// `resolved`, its notes said.
pub(crate) fn resolved(resolved: Resolved) -> Resolved {
    for note in &resolved.notes {
        say!("dsh: {note}");
    }
    resolved
}

/// Composes `profile` and starts its agent over a new session or the log at `existing`; prints
/// the composition warnings and what opening the log repaired. `Err(code)`: the profile cannot
/// run (its problems are printed).
pub(crate) async fn start(globals: &Globals, home: &Home, target: &Resolved, json: bool) -> Result<Agent, Exit> {
    let new_home = !home.root().exists();
    let Resolved { store, existing, patches, overrides, as_recorded, .. } = target;
    let lock = existing.as_ref().map(|log| log.lock(store.local_folder())).transpose()?;
    let (profile, composition) = target.compose(home)?;
    for warning in &composition.warnings {
        say!("dsh: {warning}");
    }
    let opening = match (existing, lock) {
        (Some(log), Some(lock)) => Opening::Existing { log, lock, keep_route: *as_recorded },
        _ => Opening::New { store, patches, overrides, id: None, cwd: None },
    };
    let view = Box::new(TerminalView::new(json));
    let started = match session::start(home, &profile, &composition, opening, view, globals.verbose()).await {
        Ok(started) => started,
        Err(StartError::Config(problems)) => {
            for problem in problems {
                say!("{problem}");
            }
            return Err(Exit::reported(EXIT_CONFIG));
        }
        Err(StartError::Open(err)) => return Err(err.into()),
        Err(err) => return Err(err.into()),
    };
    if new_home {
        say_home_created(home);
    }
    if let Some(repair) = &started.repair {
        print_repair(repair);
    }
    for note in &started.notes {
        say!("dsh: {note}");
    }
    let mut agent = started.agent;
    if json {
        agent.log.set_echo(Box::new(|line| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }));
    }
    Ok(agent)
}

/// Tells a user whose first command created the home where it is.
pub(crate) fn say_home_created(home: &Home) {
    say!(
        "dsh: created the dsh home {} (sessions, profiles); {} or --home puts it elsewhere",
        home.root().display(),
        crate::profile::HOME_ENV
    );
}

/// The tokens of the turn that just ended, where its provider reported them.
pub(crate) fn turn_tokens(agent: &Agent) -> Option<String> {
    Tokens::of_lines(agent.log.index().last_turn_events()).text().map(|tokens| format!("tokens: {tokens}"))
}

/// Prints how the turn ended and returns the exit code.
pub(crate) fn finish(agent: &Agent, end: &TurnEnd) -> Outcome {
    if let Some(summary) = turn_summary(end) {
        say!("{summary}");
    }
    if let Some(tokens) = turn_tokens(agent) {
        say!("{tokens}");
    }
    say!("session {}", agent.log.id());
    match end {
        TurnEnd::Completed | TurnEnd::MaxTokens => Ok(()),
        TurnEnd::Error(_) => Err(Exit::reported(EXIT_FAILED)),
        TurnEnd::Aborted => Err(Exit::reported(exit_code_now())),
    }
}

/// What a turn that found no key is told.
const NO_KEY: &str = "export the variable with your key, or try dsh without one: `dsh run --profile demo \"hello\"`";

/// What stderr says of how a turn ended, unless it simply completed.
pub(crate) fn turn_summary(end: &TurnEnd) -> Option<String> {
    match end {
        TurnEnd::Completed => None,
        TurnEnd::MaxTokens => Some("dsh: the answer was cut at the model's output limit".to_owned()),
        TurnEnd::Error(failure) => {
            let ended =
                format!("dsh: the turn ended with an error: {}: {}", failure.code, neutralised(&failure.message));
            match failure.code.as_str() {
                "MISSING_CREDENTIAL" => Some(format!("{ended}\nhint: {NO_KEY}")),
                _ => Some(ended),
            }
        }
        TurnEnd::Aborted => Some("dsh: the turn was cancelled".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_countdown_shows_tenths_below_ten_seconds_and_rounds_up() {
        let notice = RetryNotice {
            count: "2/5".into(),
            delay: Duration::from_secs(4),
            code: "SERVER".into(),
            message: "m".into(),
        };
        assert_eq!(retry_line(&notice, Duration::from_millis(3200)), "Retrying model request (2/5) · 3.2s");
        assert_eq!(retry_line(&notice, Duration::from_millis(2151)), "Retrying model request (2/5) · 2.2s");
        assert_eq!(retry_line(&notice, Duration::from_millis(12_100)), "Retrying model request (2/5) · 13s");
        assert_eq!(retry_line(&notice, Duration::from_millis(450)), "Retrying model request (2/5) · 0.5s");
    }

    #[test]
    fn the_countdown_rounds_a_delay_as_session_show_does() {
        for delay_ms in [900.0, 900.4, 918.6, 1_300.0, 9_999.2, 10_000.3, 45.0] {
            let live = remaining_text(Duration::from_secs_f64(delay_ms / 1000.0));
            assert_eq!(live, dsh_session::timeline::seconds(delay_ms), "{delay_ms} ms");
        }
    }
}
