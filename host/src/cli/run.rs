//! `dsh run`: one turn of a profile's agent, streamed to the terminal, with a live countdown line
//! per scheduled retry; and the session set-up it shares with `dsh session resume`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use dsh_abi::SessionStartSource;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::config::compose;
use super::Globals;
use crate::agent::turn::{Agent, HeaderReason, RetryNotice, TurnEnd, TurnView, UserInput};
use crate::agent::{Assembly, Cancel};
use crate::context::{epoch_ms, Services, SystemServices};
use crate::profile::{Home, LayerScope};
use crate::session::log::{Repair, SessionLog, SyncPolicy};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The profile whose rows run the turn.
    #[arg(long, default_value = "web", value_name = "NAME")]
    profile: String,
    /// Continue this session instead of starting a new one.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// An extra patch layer, applied after every other layer (repeatable, in order).
    #[arg(long = "patch", value_name = "FILE")]
    patches: Vec<PathBuf>,
    /// Write every session event to stdout as one JSON object per line, instead of the text.
    #[arg(long)]
    json: bool,
    /// What to ask.
    prompt: String,
}

/// Shows a turn on the terminal: text on stdout, retries on stderr.
pub(crate) struct TerminalView {
    json: bool,
    live: bool,
    bar: Option<ProgressBar>,
    text_open: bool,
}

impl TerminalView {
    pub(crate) fn new(json: bool) -> Self {
        TerminalView { json, live: std::io::stderr().is_terminal(), bar: None, text_open: false }
    }

    fn end_text_line(&mut self) {
        if self.text_open {
            println!();
            self.text_open = false;
        }
    }
}

/// `4s` for whole seconds (rounded up), `0.5s` below one second.
fn remaining_text(remaining: Duration) -> String {
    let ms = remaining.as_millis();
    if ms >= 1000 {
        format!("{}s", ms.div_ceil(1000))
    } else {
        format!("{:.1}s", (ms as f64 / 100.0).ceil() / 10.0)
    }
}

fn retry_line(notice: &RetryNotice, remaining: Duration) -> String {
    let of = notice.of.map_or_else(|| "∞".to_owned(), |of| of.to_string());
    format!("Retrying model request ({}/{of}) · {}", notice.retry, remaining_text(remaining))
}

impl TurnView for TerminalView {
    fn text(&mut self, delta: &str) {
        if !self.json {
            print!("{delta}");
            let _ = std::io::stdout().flush();
            self.text_open = true;
        }
    }

    fn retry_scheduled(&mut self, notice: &RetryNotice) {
        self.end_text_line();
        if self.live {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(ProgressStyle::with_template("{msg}").expect("a valid template"));
            bar.set_message(retry_line(notice, notice.delay));
            self.bar = Some(bar);
        } else {
            eprintln!("{} ({}: {})", retry_line(notice, notice.delay), notice.code, notice.message);
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
}

/// Ctrl-C once cancels the turn; twice exits at once (130).
pub(crate) fn handle_interrupts(cancel: Cancel) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        cancel.cancel();
        eprintln!("\ndsh: cancelling the turn (Ctrl-C again exits at once)");
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(130);
        }
    });
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

pub(crate) fn print_repair(repair: &Repair) {
    if let Some((at, len, backup)) = &repair.torn {
        eprintln!(
            "dsh: repaired a torn last line (line {}, byte {}, {len} bytes); kept in {}",
            at.line,
            at.offset,
            backup.display()
        );
    }
    if !repair.closers.is_empty() {
        eprintln!("dsh: closed the interrupted turn ({})", repair.closers.join(", "));
    }
    for warning in &repair.warnings {
        eprintln!("dsh: warning: the log already breaks a rule: {warning}");
    }
}

/// A profile's agent over a new or continued session.
pub(crate) async fn start_agent(
    globals: &Globals,
    home: &Home,
    profile: &str,
    patches: &[PathBuf],
    session: Option<&str>,
    json: bool,
) -> anyhow::Result<Result<Agent, ExitCode>> {
    let (profile, composition) = compose(home, profile, patches, LayerScope::All)?;
    let assembly = match Assembly::build(&profile, &composition, globals.verbose()).await {
        Ok(assembly) => assembly,
        Err(problems) => {
            for problem in problems {
                eprintln!("{problem}");
            }
            return Ok(Err(ExitCode::FAILURE));
        }
    };
    let services: Arc<dyn Services> = Arc::new(SystemServices);
    let log = match session {
        None => {
            let id = services.new_id();
            let header = json!({
                "type": "session", "version": 0, "id": id, "createdAt": epoch_ms(),
                "cwd": std::env::current_dir().map(|dir| dir.display().to_string()).unwrap_or_default(),
                "delegationDepth": 0,
            });
            SessionLog::create(
                &home.sessions_dir(),
                &id,
                &header,
                |header| assembly.open_checkers(header),
                SyncPolicy::Durable,
            )?
        }
        Some(name) => {
            let path = super::session::resolve_log(globals, name)?;
            let (log, repair) = SessionLog::open(
                &path,
                |header| assembly.open_checkers(header),
                SyncPolicy::Durable,
                epoch_ms(),
                true,
            )?;
            print_repair(&repair);
            log
        }
    };
    let mut agent =
        Agent { log, assembly, services, cancel: Cancel::default(), view: Box::new(TerminalView::new(json)) };
    if json {
        agent.log.set_echo(Box::new(|line| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }));
    }
    Ok(Ok(agent))
}

/// Prints how the turn ended and returns the exit code.
pub(crate) fn finish(agent: &Agent, end: &TurnEnd, json: bool) -> ExitCode {
    if !json && !matches!(end, TurnEnd::Aborted) {
        println!();
    }
    let code = match end {
        TurnEnd::Completed => ExitCode::SUCCESS,
        TurnEnd::MaxTokens => {
            eprintln!("dsh: the answer was cut at the model's output limit");
            ExitCode::SUCCESS
        }
        TurnEnd::Error(failure) => {
            eprintln!("dsh: the turn ended with an error: {}: {}", failure.code, failure.message);
            ExitCode::FAILURE
        }
        TurnEnd::Aborted => {
            eprintln!("dsh: the turn was cancelled");
            ExitCode::from(130)
        }
    };
    eprintln!("session {}", agent.log.id());
    code
}

pub fn run(globals: &Globals, args: RunArgs) -> anyhow::Result<ExitCode> {
    let home = globals.home()?;
    runtime()?.block_on(async {
        let mut agent = match start_agent(
            globals,
            &home,
            &args.profile,
            &args.patches,
            args.session.as_deref(),
            args.json,
        )
        .await?
        {
            Ok(agent) => agent,
            Err(code) => return Ok(code),
        };
        handle_interrupts(agent.cancel.clone());
        let source = if args.session.is_some() { SessionStartSource::Continue } else { SessionStartSource::New };
        agent.session_start(source, true);
        let input =
            UserInput { id: agent.services.new_id(), text: args.prompt.clone(), source: json!({"kind": "user"}) };
        let end = agent.run_turn(input, HeaderReason::Initial).await?;
        Ok(finish(&agent, &end, args.json))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_countdown_rounds_up_and_shows_tenths_below_a_second() {
        let notice = RetryNotice {
            retry: 2,
            of: Some(5),
            delay: Duration::from_secs(4),
            code: "SERVER".into(),
            message: "m".into(),
        };
        assert_eq!(retry_line(&notice, Duration::from_millis(3200)), "Retrying model request (2/5) · 4s");
        assert_eq!(retry_line(&notice, Duration::from_millis(450)), "Retrying model request (2/5) · 0.5s");
        let unbounded = RetryNotice { of: None, retry: 7, ..notice };
        assert_eq!(retry_line(&unbounded, Duration::from_secs(20)), "Retrying model request (7/∞) · 20s");
    }
}
