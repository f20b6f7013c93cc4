//! The `dsh` command line: argument parsing (clap), logging set-up, dispatch and exit codes.
//!
//! Exit codes: 0 success; 1 the operation ran and failed; 2 usage error; 3 not found; 130
//! interrupted by Ctrl-C.

mod config;
mod mock;
mod plugin;
mod run;
mod session;
mod turns;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::profile::Home;
use crate::NotFound;

#[derive(Debug, Parser)]
#[command(name = "dsh", version, about = "An agent host whose model-request recovery lives in plugins")]
pub struct Cli {
    /// The dsh home (default: $DSH_HOME, else ~/.dsh).
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,

    /// Log more to stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one turn of the profile's agent: stream the answer, recover failures through the
    /// request-error waterfall, keep a durable log.
    Run(run::RunArgs),
    /// Install, remove, list and inspect plugin packages.
    Plugin(plugin::PluginArgs),
    /// Compose a profile: dump it, check it, or show its request-error waterfall.
    Config(config::ConfigArgs),
    /// Inspect, verify, repair and resume session logs.
    Session(session::SessionArgs),
    /// Serve a scripted OpenAI-compatible fault server on the loopback interface.
    MockServer(mock::MockServerArgs),
}

/// Options every command shares.
#[derive(Debug, Clone)]
pub struct Globals {
    home: Option<PathBuf>,
    verbose: u8,
}

impl Globals {
    pub fn home(&self) -> anyhow::Result<Home> {
        Home::resolve(self.home.as_deref())
    }

    pub fn verbose(&self) -> bool {
        self.verbose > 0
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let globals = Globals { home: cli.home, verbose: cli.verbose };
    let result = match cli.command {
        Command::Run(args) => run::run(&globals, args),
        Command::Plugin(args) => plugin::run(&globals, args),
        Command::Config(args) => config::run(&globals, args),
        Command::Session(args) => session::run(&globals, args),
        Command::MockServer(args) => mock::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("dsh: {err:#}");
            if err.downcast_ref::<NotFound>().is_some() {
                ExitCode::from(3)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn init_logging(verbose: u8) {
    let default_level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .without_time()
        .with_target(false)
        .init();
}
