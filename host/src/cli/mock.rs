//! `dsh mock-server`: a scriptable OpenAI-compatible fault server on the loopback interface.

use super::exit::Outcome;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::globals::runtime;
use crate::llm::mock::{self, MockLog, MockServer, Replay};
use crate::problem::Problem;
use crate::profile::yaml;

#[derive(Debug, Args)]
pub struct MockServerArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    listen: SocketAddr,
    /// The YAML list of responses to serve in order (then the last repeats, or with --loop the
    /// whole script again).
    #[arg(long, value_name = "FILE")]
    script: PathBuf,
    /// Once the script is used up, start it again from its first item, so one server serves
    /// trial after trial.
    #[arg(long = "loop")]
    looping: bool,
    /// Append every request (number, method, path, headers with credentials redacted, body) to
    /// this file as a JSON line.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Print the first line as `{"listening": URL}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: MockServerArgs) -> Outcome {
    let file = args.script.display().to_string();
    let text =
        dsh_session::fsutil::read_text_limited(&args.script, crate::profile::patch::MAX_LAYER_BYTES, "a mock script")
            .with_context(|| format!("cannot read {file}"))?;
    let value = yaml::parse(&text).map_err(|err| anyhow::anyhow!("{file}: {err}"))?.unwrap_or(serde_json::Value::Null);
    let script = mock::parse_script(&value).map_err(|errors| {
        let problems: Vec<String> = errors
            .iter()
            .map(|error| Problem::in_file(&file, &error.path, error.message.as_str()).to_string())
            .collect();
        anyhow::anyhow!(problems.join("\n"))
    })?;
    runtime()?.block_on(async {
        let replay = if args.looping { Replay::Loop } else { Replay::LastRepeats };
        let log = MockLog { stderr: true, record: args.record };
        let server = MockServer::start_with(args.listen, script, log, replay).await?;
        if args.json {
            out!("{}", serde_json::json!({"listening": format!("http://{}", server.addr())}))?;
        } else {
            out!("listening on http://{}", server.addr())?;
        }
        std::io::stdout().flush()?;
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
