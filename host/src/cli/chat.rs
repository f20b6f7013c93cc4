//! `dsh chat`: an interactive multi-turn session on one log. Lines come from a line editor
//! (history, editing) on a terminal, or one message per line from stdin when it is not one, so a
//! chat can be scripted. Ctrl-C cancels the running turn, not the program.
//!
//! Live swap: before each turn the profile's layers and manifest are read again; when the
//! composition changed, the agent's rows are rebuilt (libraries already open stay open), and one
//! line says what changed — `profile web: relay-retry now handles request errors; llm-retry
//! disabled`. The session's checkers stay the ones it opened with.

use super::exit::{Exit, Outcome};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use clap::Args;
use dsh_abi::{Hooks, SessionStartSource};
use serde_json::{json, Value};

use super::globals::{runtime, Globals};
use super::input;
use super::shown::neutralised;
use super::turns::{exit_code_now, start, terminated, turn_summary, turn_tokens, Ready, SessionTarget, StopSignals};
use super::EXIT_FAILED;
use crate::agent::assembly::Assembly;
use crate::agent::config::apply_overrides;
use crate::agent::turn::{Agent, HeaderReason, TurnEnd, UserInput};
use crate::agent::Cancel;
use crate::profile::patch::Composition;
use crate::profile::{Home, LayerScope, Profile};
use dsh_session::log::AppendError;
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

/// What a profile composed to, as far as running it is concerned: the rows and the installed
/// packages (a reinstalled library changes the manifest, not the rows).
#[derive(PartialEq)]
struct Snapshot {
    rows: Vec<Value>,
    packages: Value,
}

fn snapshot(profile: &Profile, rows: &[Value]) -> Snapshot {
    Snapshot { rows: rows.to_vec(), packages: serde_json::to_value(&profile.manifest.packages).unwrap_or(Value::Null) }
}

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
fn handle_chat_interrupts(current: Arc<Mutex<Option<Cancel>>>) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    tokio::spawn(async move {
        while signals.next().await.is_some() {
            match current.lock().expect("not poisoned").as_ref() {
                Some(cancel) => {
                    cancel.cancel();
                    say!("\ndsh: cancelling the turn");
                }
                None => std::process::exit(i32::from(exit_code_now())),
            }
        }
    });
    Ok(())
}

pub fn run(globals: &Globals, args: ChatArgs) -> Outcome {
    let home = globals.home()?;
    let target = args.target.resolve(&home)?;
    let (profile_name, patches) = (target.profile.clone(), target.patches.clone());
    let overrides = (target.overrides.clone(), target.typed.clone());
    let mut input = Input::open()?;
    runtime()?.block_on(async {
        let Ready { mut agent, profile, composition } = start(globals, &home, &target, false).await?;
        let mut current = snapshot(&profile, &composition.rows);
        let running = Arc::new(Mutex::new(None));
        handle_chat_interrupts(Arc::clone(&running))?;
        agent.announce(if target.existing.is_some() { SessionStartSource::Continue } else { SessionStartSource::New });
        say!("dsh: chat in session {} (profile {profile_name}); /exit or Ctrl-D ends it", agent.log.id());
        let mut code: Outcome = Ok(());
        while let Some(line) = tokio::task::block_in_place(|| input.next())? {
            let text = line.trim();
            match text {
                "" => continue,
                "/exit" | "/quit" => break,
                "/help" => say!("{HELP}"),
                "/waterfall" => show_waterfall(&agent),
                "/tools" => show_tools(&agent),
                "/session" => show_session(&agent),
                "/profile" => show_profile(&home, (&profile_name, &patches, &overrides)),
                command if command.starts_with('/') => say!("dsh: unknown command {command}; /help lists them"),
                _ => {
                    current =
                        swap_if_changed(globals, &home, (&profile_name, &patches, &overrides), &mut agent, current)
                            .await;
                    match one_turn(&mut agent, &line, &running).await? {
                        AfterTurn::Next => {}
                        AfterTurn::Failed => code = Err(Exit::reported(EXIT_FAILED)),
                        AfterTurn::Terminated => {
                            code = Err(Exit::reported(exit_code_now()));
                            break;
                        }
                        // Nobody reads the answers any more: no further turn is run (and paid for).
                        AfterTurn::OutputGone => return Ok(()),
                    }
                }
            }
        }
        agent.assembly.tools.close().await;
        say!("session {}", agent.log.id());
        if input.refused_a_line() && !terminated() {
            code = Err(Exit::reported(EXIT_FAILED));
        }
        code
    })
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

/// Runs the turn of one message, cancellable with Ctrl-C through `running`, and says how it ended.
async fn one_turn(agent: &mut Agent, line: &str, running: &Mutex<Option<Cancel>>) -> Result<AfterTurn, Exit> {
    let cancel = Cancel::default();
    agent.cancel = cancel.clone();
    *running.lock().expect("not poisoned") = Some(cancel);
    let input = UserInput { id: agent.services.new_id(), text: line.to_owned(), source: json!({"kind": "user"}) };
    let end = agent.run_turn(input, HeaderReason::Initial).await;
    *running.lock().expect("not poisoned") = None;
    let end = match end {
        Err(refused @ AppendError::TooLong { .. }) => {
            say!("dsh: {refused}; the message was skipped");
            return Ok(AfterTurn::Failed);
        }
        end => end?,
    };
    if let Some(summary) = turn_summary(&end) {
        say!("{summary}");
    }
    if let Some(tokens) = turn_tokens(agent) {
        say!("{tokens}");
    }
    Ok(if terminated() {
        AfterTurn::Terminated
    } else if agent.view.output_gone() {
        AfterTurn::OutputGone
    } else if matches!(end, TurnEnd::Error(_)) {
        AfterTurn::Failed
    } else {
        AfterTurn::Next
    })
}

/// What the chat's rows are composed from: the profile's name, the `--patch` layers, and the
/// overrides in effect and those typed.
type Source<'a> = (&'a str, &'a [PathBuf], &'a (RunOverrides, RunOverrides));

/// The profile's manifest and composition, as they are on disk now.
fn compose_now(home: &Home, (profile, patches, overrides): Source<'_>) -> anyhow::Result<(Profile, Composition)> {
    let profile = Profile::open(home, profile)?;
    let mut composition = profile.compose(home, patches, LayerScope::All)?;
    apply_overrides(&mut composition, &overrides.0, &overrides.1);
    Ok((profile, composition))
}

/// Re-reads the profile; when it changed, rebuilds the agent's rows and says what changed. A
/// profile that no longer composes or builds keeps the rows the chat had, and says why.
async fn swap_if_changed(
    globals: &Globals,
    home: &Home,
    source: Source<'_>,
    agent: &mut Agent,
    current: Snapshot,
) -> Snapshot {
    let profile_name = source.0;
    let (profile, composition) = match compose_now(home, source) {
        Ok(composed) => composed,
        Err(err) => {
            say!("dsh: profile {profile_name} no longer composes ({err:#}); keeping its previous rows");
            return current;
        }
    };
    let next = snapshot(&profile, &composition.rows);
    if next == current {
        return current;
    }
    for warning in &composition.warnings {
        say!("dsh: {warning}");
    }
    let counters = agent.assembly.counters.clone();
    let starting = super::live::servers_starting(&composition.enabled_ids_of("mcp"));
    let built = Assembly::build(home, &profile, &composition, globals.verbose(), &counters).await;
    super::live::clear(starting);
    match built {
        Ok(assembly) => {
            let change = assembly.change_since(&agent.assembly, &composition.rows);
            say!("profile {profile_name}: {change}");
            agent.assembly = assembly;
            next
        }
        Err(problems) => {
            for problem in problems {
                say!("{problem}");
            }
            say!("dsh: profile {profile_name} changed but cannot run; keeping its previous rows");
            current
        }
    }
}

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

fn show_profile(home: &Home, (profile_name, patches, overrides): Source<'_>) {
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
