//! `dsh run`: one turn of a profile's agent, streamed to the terminal, with a live countdown line
//! per scheduled retry.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dsh_abi::SessionStartSource;
use serde_json::json;

use anyhow::Context;

use super::turns::{finish, handle_interrupts, profile_for, start};
use super::{runtime, Globals};
use crate::agent::turn::{HeaderReason, UserInput};
use crate::session::locate::session_log;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The profile whose rows run the turn (default: the session's own, else web).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Continue this session (an id under the home; a value with a '/' is a log path).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// An extra patch layer, applied after every other layer (repeatable, in order).
    #[arg(long = "patch", value_name = "FILE")]
    patches: Vec<PathBuf>,
    /// Write every session event to stdout as one JSON object per line, instead of the text.
    #[arg(long)]
    json: bool,
    /// What to ask; `-` reads it from stdin.
    prompt: String,
}

pub fn run(globals: &Globals, args: RunArgs) -> anyhow::Result<ExitCode> {
    let home = globals.home()?;
    let existing = args.session.as_deref().map(|name| session_log(&home.sessions_dir(), name)).transpose()?;
    let profile = profile_for(args.profile.as_deref(), existing.as_deref());
    let prompt = if args.prompt == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("cannot read the prompt from stdin")?;
        text.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        args.prompt.clone()
    };
    if prompt.trim().is_empty() {
        anyhow::bail!("the prompt is empty");
    }
    runtime()?.block_on(async {
        let mut agent = match start(globals, &home, &profile, &args.patches, existing.as_deref(), args.json).await? {
            Ok(agent) => agent,
            Err(code) => return Ok(code),
        };
        if args.json {
            out!(
                "{}",
                json!({"session": agent.log.id(), "profile": profile, "log": agent.log.path().display().to_string()})
            )?;
        }
        handle_interrupts(agent.cancel.clone())?;
        agent.announce(if existing.is_some() { SessionStartSource::Continue } else { SessionStartSource::New });
        let input = UserInput { id: agent.services.new_id(), text: prompt, source: json!({"kind": "user"}) };
        let end = agent.run_turn(input, HeaderReason::Initial).await?;
        Ok(finish(&agent, &end, args.json))
    })
}
