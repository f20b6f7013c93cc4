//! `dsh run`: one turn of a profile's agent, streamed to the terminal, with a live countdown line
//! per scheduled retry.

use super::exit::Outcome;

use clap::Args;
use dsh_abi::SessionStartSource;
use serde_json::json;

use anyhow::Context;

use super::globals::{runtime, Globals};
use super::input;
use super::turns::{finish, handle_interrupts, start, SessionTarget};
use crate::agent::turn::{HeaderReason, UserInput};

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    target: SessionTarget,
    /// Write every session event to stdout as one JSON object per line, instead of the text.
    #[arg(long)]
    json: bool,
    /// What to ask; `-` reads it from stdin.
    prompt: String,
}

pub fn run(globals: &Globals, args: RunArgs) -> Outcome {
    let home = globals.home()?;
    let target = args.target.resolve(&home)?;
    let prompt = if args.prompt == "-" {
        let line = input::read_all(std::io::stdin().lock()).context("cannot read the prompt from stdin")?;
        line.text("the prompt on stdin").map_err(anyhow::Error::msg)?.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        args.prompt.clone()
    };
    if prompt.trim().is_empty() {
        return Err(anyhow::anyhow!("the prompt is empty").into());
    }
    UserInput { id: String::new(), text: prompt.clone(), source: json!({"kind": "user"}) }.message_data()?;
    runtime()?.block_on(async {
        let mut agent = start(globals, &home, &target, args.json).await?;
        if args.json {
            out!(
                "{}",
                json!({"session": agent.log.id(), "profile": target.profile, "log": agent.log.location().name()})
            )?;
        }
        handle_interrupts(agent.cancel.clone())?;
        agent.announce(if target.existing.is_some() { SessionStartSource::Continue } else { SessionStartSource::New });
        let input = UserInput { id: agent.services.new_id(), text: prompt, source: json!({"kind": "user"}) };
        let end = agent.run_turn(input, HeaderReason::Initial).await?;
        agent.assembly.tools.close().await;
        finish(&agent, &end)
    })
}
