//! The command line as clap reads it: the global options and every command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::{chat, config, mock, plugin, profile, run, session, web};

/// `dsh --version`: the release and the plugin ABI version it loads.
pub(crate) const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (plugin ABI ", env!("DSH_ABI_VERSION"), ")");

#[derive(Debug, Parser)]
#[command(
    name = "dsh",
    version = VERSION,
    about = "An agent host whose model-request recovery lives in plugins"
)]
pub struct Cli {
    /// The dsh home (default: $DSH_HOME, else ~/.dsh).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) home: Option<PathBuf>,

    /// Log more to stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    /// With no command: serve the DeepSeek Harness SDK's runtime protocol (JSON-RPC on stdio)
    /// with this profile's rows, as the SDK launches its runtime (`dsh --profile sdk`).
    #[arg(id = "runtime_profile", long = "profile", value_name = "NAME", add = super::complete::profiles())]
    pub(crate) profile: Option<String>,

    /// With `--profile` and no command: an extra patch layer (repeatable, in order).
    #[arg(id = "runtime_patches", long = "patch", value_name = "FILE", requires = "runtime_profile")]
    pub(crate) patches: Vec<PathBuf>,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one turn of the profile's agent: stream the answer, recover failures through the
    /// request-error waterfall, keep a durable log.
    Run(run::RunArgs),
    /// An interactive session: one message per line, many turns on one log; plugin and layer
    /// changes take effect at the next turn.
    Chat(chat::ChatArgs),
    /// The browser front end: chat, sessions and an HTTP API on 127.0.0.1:3080, the address
    /// (with its token) printed.
    Web(web::WebArgs),
    /// Install, remove, list and inspect plugin packages.
    Plugin(plugin::PluginArgs),
    /// List, create, copy and remove profiles.
    Profile(profile::ProfileArgs),
    /// Compose a profile: dump it, check it, or show its request-error waterfall.
    Config(config::ConfigArgs),
    /// Inspect, verify, repair and resume session logs.
    Session(session::SessionArgs),
    /// Serve a scripted OpenAI-compatible fault server on the loopback interface.
    MockServer(mock::MockServerArgs),
    /// Print the script that completes dsh in a shell — commands, options, profiles and session
    /// ids — e.g. `source <(dsh completions bash)` in ~/.bashrc.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff): `dsh man > ~/.local/share/man/man1/dsh.1`, `dsh man session
    /// repair` for dsh-session-repair(1), or every page with `--dir DIR`.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print (`session repair` is dsh-session-repair(1)); none: dsh(1).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write every page (dsh.1, dsh-run.1, …) into this directory instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

/// Answers the shell and exits when it is asking for completions; returns otherwise.
pub fn answer_the_shell() {
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command)
        .var(super::complete::COMPLETE_ENV)
        .complete();
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every argument and subcommand of `command` (and below) without help text.
    fn undocumented(command: &clap::Command, path: &str, found: &mut Vec<String>) {
        for argument in command.get_arguments() {
            let name = argument.get_id().as_str();
            if argument.get_help().is_none() && !matches!(name, "help" | "version") {
                found.push(format!("{path} {name}"));
            }
        }
        for sub in command.get_subcommands() {
            if sub.get_about().is_none() {
                found.push(format!("{path} {}", sub.get_name()));
            }
            undocumented(sub, &format!("{path} {}", sub.get_name()), found);
        }
    }

    #[test]
    fn every_command_and_argument_has_help() {
        let mut found = Vec::new();
        undocumented(&super::Cli::command(), "dsh", &mut found);
        assert!(found.is_empty(), "without help text: {found:?}");
    }

    #[test]
    fn the_version_names_the_abi_version_the_host_loads() {
        assert!(super::VERSION.ends_with(&format!(" (plugin ABI {})", dsh_abi::ABI_VERSION)), "{}", super::VERSION);
    }
}
