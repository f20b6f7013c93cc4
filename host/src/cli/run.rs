//! `dsh run`: one turn of a profile's agent, streamed to the terminal, with a live countdown line
//! per scheduled retry.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dsh_abi::SessionStartSource;
use serde_json::json;

use super::turns::{finish, handle_interrupts, runtime, start};
use super::Globals;
use crate::agent::turn::{HeaderReason, UserInput};
use crate::session::locate::resolve_log;

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

pub fn run(globals: &Globals, args: RunArgs) -> anyhow::Result<ExitCode> {
    let home = globals.home()?;
    let existing = args.session.as_deref().map(|name| resolve_log(&home.sessions_dir(), name)).transpose()?;
    runtime()?.block_on(async {
        let mut agent =
            match start(globals, &home, &args.profile, &args.patches, existing.as_deref(), args.json).await? {
                Ok(agent) => agent,
                Err(code) => return Ok(code),
            };
        handle_interrupts(agent.cancel.clone())?;
        agent.announce(if existing.is_some() { SessionStartSource::Continue } else { SessionStartSource::New });
        let input =
            UserInput { id: agent.services.new_id(), text: args.prompt.clone(), source: json!({"kind": "user"}) };
        let end = agent.run_turn(input, HeaderReason::Initial).await?;
        Ok(finish(&agent, &end, args.json))
    })
}
