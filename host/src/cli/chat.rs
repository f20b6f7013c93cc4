//! `dsh chat`: an interactive multi-turn session on one log, run by the session service
//! ([`crate::service`]) as the SDK's runtime and the web server run theirs. Lines come from a
//! line editor (history, editing) on a terminal, or one message per line from stdin when it is
//! not one, so a chat can be scripted. Ctrl-C cancels the running turn, not the program.
//!
//! Before each turn the service reads the profile again and swaps the rows when it changed,
//! saying what changed — `profile web: relay-retry now handles request errors; llm-retry
//! disabled`.

use super::exit::{Exit, Outcome};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Args;
use dsh_abi::Hooks;

use super::globals::{runtime, Globals};
use super::input;
use super::shown::neutralised;
use super::turns::{exit_code_now, say_home_created, terminated, turn_summary, turn_tokens, StopSignals};
use super::turns::{Resolved, SessionTarget, TerminalView};
use super::{EXIT_CONFIG, EXIT_FAILED};
use crate::agent::turn::{Agent, TurnEnd};
use crate::profile::{Home, Profile};
use crate::service::{ServiceError, SessionService, Setup};
use dsh_session::meta::RunOverrides;
use dsh_session::summary;

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    target: SessionTarget,
}

const HELP: &str = "/waterfall  the request-error listeners, outermost first\n\
                    /profile    the profile and the layer files it composes\n\
                    /tools      the tools the model is offered, by MCP server row\n\
                    /session    the session: its id, log, turns and tokens so far\n\
                    /exit       end the chat (so does Ctrl-D)";

/// Where messages come from.
enum Input {
    Editor(Box<rustyline::DefaultEditor>),
    /// Stdin, the number of the last line read, and whether a line was refused.
    Lines(std::io::StdinLock<'static>, u64, bool),
}

impl Input {
    fn open() -> anyhow::Result<Input> {
        if std::io::stdin().is_terminal() {
            Ok(Input::Editor(Box::new(rustyline::DefaultEditor::new()?)))
        } else {
            Ok(Input::Lines(std::io::stdin().lock(), 0, false))
        }
    }

    /// Whether a line of the input was refused (a scripted chat then exits 1).
    fn refused_a_line(&self) -> bool {
        matches!(self, Input::Lines(_, _, true))
    }

    /// The next message, `None` at the end (Ctrl-D, end of input).
    fn next(&mut self) -> anyhow::Result<Option<String>> {
        match self {
            Input::Editor(editor) => loop {
                match editor.readline("you> ") {
                    Ok(line) => {
                        let _ = editor.add_history_entry(line.as_str());
                        return Ok(Some(line));
                    }
                    Err(rustyline::error::ReadlineError::Interrupted) => continue,
                    Err(rustyline::error::ReadlineError::Eof) => return Ok(None),
                    Err(err) => return Err(err.into()),
                }
            },
            Input::Lines(lines, number, refused) => loop {
                let Some(line) = input::read_line(lines)? else { return Ok(None) };
                *number += 1;
                match line.text(&format!("line {number} of the input")) {
                    Ok(text) => return Ok(Some(text)),
                    Err(why) => {
                        say!("dsh: {why}; skipped");
                        *refused = true;
                    }
                }
            },
        }
    }
}

/// Ctrl-C cancels the running turn; between turns it ends the chat (a line editor reads it as a
/// key, so this only happens when stdin is not a terminal). A termination signal (SIGTERM,
/// SIGHUP, SIGQUIT) cancels the running turn and ends the chat after it, or ends it at once
/// between turns.
fn handle_chat_interrupts(chat: Chat) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    tokio::spawn(async move {
        while signals.next().await.is_some() {
            if !chat.in_turn.load(Ordering::SeqCst) {
                std::process::exit(i32::from(exit_code_now()));
            }
            let _ = chat.service.cancel(&chat.id);
            say!("\ndsh: cancelling the turn");
        }
    });
    Ok(())
}

/// The chat's session, in its service, and whether a turn of it is running.
#[derive(Clone)]
struct Chat {
    service: SessionService,
    id: String,
    in_turn: Arc<AtomicBool>,
}

pub fn run(globals: &Globals, args: ChatArgs) -> Outcome {
    let home = globals.home()?;
    let new_home = !home.root().exists();
    let target = args.target.resolve(&home)?;
    let source = (target.profile.clone(), target.patches.clone(), (target.overrides.clone(), target.typed.clone()));
    let mut input = Input::open()?;
    runtime()?.block_on(async {
        let chat = open(globals, &home, target).await?;
        if new_home {
            say_home_created(&home);
        }
        handle_chat_interrupts(chat.clone())?;
        say!("dsh: chat in session {} (profile {}); /exit or Ctrl-D ends it", chat.id, source.0);
        let mut code = converse(&chat, &home, &source, &mut input).await;
        chat.service.shutdown().await;
        say!("session {}", chat.id);
        if input.refused_a_line() && !terminated() && code.is_ok() {
            code = Err(Exit::reported(EXIT_FAILED));
        }
        code
    })
}

/// A service of one session: the one `target` names, shown on the terminal.
async fn open(globals: &Globals, home: &Home, target: Resolved) -> Result<Chat, Exit> {
    let setup = Setup {
        home: home.clone(),
        profile: target.profile.clone(),
        patches: target.patches.clone(),
        overrides: target.overrides.clone(),
        cwd: std::env::current_dir()?,
        verbose: globals.verbose(),
        continued_as_recorded: false,
        v4_only: false,
        keep_open: None,
        view: Box::new(|| Box::new(TerminalView::new(false))),
    };
    let (service, _) = SessionService::new(setup, Box::new(|note| say!("dsh: {note}")))?;
    match service.open(target).await {
        Ok(id) => Ok(Chat { service, id, in_turn: Arc::default() }),
        Err(ServiceError::Config { problems, .. }) => {
            for problem in problems {
                say!("{problem}");
            }
            Err(Exit::reported(EXIT_CONFIG))
        }
        Err(err) => Err(service_exit(err)),
    }
}

/// The exit a request the service refused ends the chat with: the code of the error's kind.
fn service_exit(error: ServiceError) -> Exit {
    match error {
        ServiceError::Failed(err) => Exit::shared(&err),
        err => anyhow::Error::from(err).into(),
    }
}

/// Reads lines until the end, the chat's commands answered and its messages run as turns.
async fn converse(chat: &Chat, home: &Home, source: &Source, input: &mut Input) -> Outcome {
    let mut code: Outcome = Ok(());
    while let Some(line) = tokio::task::block_in_place(|| input.next())? {
        let text = line.trim();
        match text {
            "" => continue,
            "/exit" | "/quit" => break,
            command if command.starts_with('/') => {
                chat_command(chat, home, source, command).await.map_err(service_exit)?;
                continue;
            }
            _ => {}
        }
        match one_turn(chat, line).await? {
            AfterTurn::Next => {}
            AfterTurn::Failed => code = Err(Exit::reported(EXIT_FAILED)),
            AfterTurn::Terminated => return Err(Exit::reported(exit_code_now())),
            // Nobody reads the answers any more: no further turn is run (and paid for).
            AfterTurn::OutputGone => return Ok(()),
        }
    }
    code
}

/// Answers one of the chat's `/` commands.
async fn chat_command(chat: &Chat, home: &Home, source: &Source, command: &str) -> Result<(), ServiceError> {
    match command {
        "/help" => say!("{HELP}"),
        "/waterfall" => chat.service.inspect(&chat.id, show_waterfall).await?,
        "/tools" => chat.service.inspect(&chat.id, show_tools).await?,
        "/session" => chat.service.inspect(&chat.id, show_session).await?,
        "/profile" => show_profile(home, source),
        command => say!("dsh: unknown command {command}; /help lists them"),
    }
    Ok(())
}

/// What one chat message led to.
enum AfterTurn {
    Next,
    /// The turn failed, or its message was refused: the chat goes on and exits 1.
    Failed,
    /// A signal ended it: the chat ends with the signal's code.
    Terminated,
    /// Stdout's reader went away.
    OutputGone,
}

/// Runs the turn of one message, cancellable with Ctrl-C, and says how it ended.
async fn one_turn(chat: &Chat, line: String) -> Result<AfterTurn, Exit> {
    chat.in_turn.store(true, Ordering::SeqCst);
    let end = chat.service.turn(&chat.id, line).await;
    chat.in_turn.store(false, Ordering::SeqCst);
    let end = match end {
        Err(ServiceError::Invalid(refused)) => {
            say!("dsh: {refused}; the message was skipped");
            return Ok(AfterTurn::Failed);
        }
        end => end.map_err(service_exit)?,
    };
    if let Some(summary) = turn_summary(&end) {
        say!("{summary}");
    }
    let (tokens, output_gone) = chat
        .service
        .inspect(&chat.id, |agent| (turn_tokens(agent), agent.view.output_gone()))
        .await
        .map_err(service_exit)?;
    if let Some(tokens) = tokens {
        say!("{tokens}");
    }
    Ok(if terminated() {
        AfterTurn::Terminated
    } else if output_gone {
        AfterTurn::OutputGone
    } else if matches!(end, TurnEnd::Error(_)) {
        AfterTurn::Failed
    } else {
        AfterTurn::Next
    })
}

/// What the chat's rows are composed from: the profile's name, the `--patch` layers, and the
/// overrides in effect and those typed.
type Source = (String, Vec<PathBuf>, (RunOverrides, RunOverrides));

fn show_tools(agent: &Agent) {
    let offered = agent.assembly.tools.offered();
    if offered.is_empty() {
        say!("no tools: an `mcp` row adds a server");
    }
    for tool in offered {
        say!("{} · {} — {}", tool.row_id, tool.name, neutralised(&crate::one_line(&tool.description, 100)));
    }
}

fn show_session(agent: &Agent) {
    let summary = match summary::summarize(agent.log.location()) {
        Ok(summary) => summary,
        Err(err) => return say!("dsh: cannot read session {}: {err:#}", agent.log.id()),
    };
    say!("session {} ({})", summary.id, agent.log.location().name());
    say!("  turns: {} · the last {}", summary.turns, summary.last_end);
    say!("  tokens: {}", summary.tokens.text().unwrap_or_else(|| "none reported".to_owned()));
}

fn show_waterfall(agent: &Agent) {
    for (index, listener) in agent.assembly.listeners.iter().enumerate() {
        say!("{:>3}  {:24} {}", index + 1, listener.row_id(), listener.package());
    }
    if agent.assembly.listeners.is_empty() {
        say!("no request-error listeners: failures end the turn");
    }
    let checkers: Vec<&str> = agent
        .assembly
        .checkers
        .iter()
        .filter(|row| row.hooks().contains(Hooks::CHECKER))
        .map(|row| row.row_id())
        .collect();
    if !checkers.is_empty() {
        say!("checkers: {}", checkers.join(", "));
    }
}

fn show_profile(home: &Home, (profile_name, patches, overrides): &Source) {
    match Profile::open(home, profile_name) {
        Ok(profile) => {
            say!("profile {profile_name} ({})", home.display(&profile.dir));
            say!("  bundles: {}", profile.manifest.bundles.join(", "));
            say!("  your layer: {}", home.display(&profile.dir.join("cordis.patch.yml")));
            say!("  home layer: {}", home.display(&home.patch_path()));
            for patch in patches {
                say!("  --patch: {}", neutralised(&patch.display().to_string()));
            }
            if !overrides.0.is_empty() {
                say!("  on the agent row: {}", neutralised(&overrides.0.described()));
            }
        }
        Err(err) => say!("dsh: {err:#}"),
    }
}
