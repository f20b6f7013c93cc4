//! The `dsh` command line: argument parsing (clap), logging set-up, dispatch and exit codes.
//!
//! Exit codes, one per meaning: 0 success; 1 the operation ran and failed (a turn ended in error,
//! a library was refused); 2 usage error (clap); 3 not found; 4 configuration problem; 5 log
//! violations (`verify`) or damage `repair` must not touch; 6 busy (another process writes the
//! session or profile); 130 interrupted by Ctrl-C. A closed stdout ends a command quietly.

/// `println!` that hands back the write's result instead of panicking: a closed stdout
/// (`dsh … | head -1`) becomes an error the command passes up, and `dsh` ends quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!` that hands back the write's result (see [`out!`]).
macro_rules! out_text {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        write!(stdout, $($arg)*).and_then(|()| stdout.flush())
    }};
}

mod chat;
mod config;
mod exit;
mod input;
mod mock;
mod plugin;
mod replay;
mod run;
mod session;
mod turns;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use exit::{Exit, Outcome, EXIT_BUSY, EXIT_CONFIG, EXIT_DAMAGED, EXIT_FAILED, EXIT_NOT_FOUND};

use crate::profile::Home;

/// `dsh --version`: the release and the plugin ABI version it loads.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (plugin ABI ", env!("DSH_ABI_VERSION"), ")");

#[derive(Debug, Parser)]
#[command(name = "dsh", version = VERSION, about = "An agent host whose model-request recovery lives in plugins")]
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
    /// An interactive session: one message per line, many turns on one log; plugin and layer
    /// changes take effect at the next turn.
    Chat(chat::ChatArgs),
    /// Install, remove, list and inspect plugin packages.
    Plugin(plugin::PluginArgs),
    /// Compose a profile: dump it, check it, or show its request-error waterfall.
    Config(config::ConfigArgs),
    /// Inspect, verify, repair and resume session logs.
    Session(session::SessionArgs),
    /// Serve a scripted OpenAI-compatible fault server on the loopback interface.
    MockServer(mock::MockServerArgs),
    /// Print a shell completion script, e.g. `dsh completions bash >
    /// ~/.local/share/bash-completion/completions/dsh`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `dsh man > ~/.local/share/man/man1/dsh.1`.
    Man,
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
    keep_large_buffers_off_the_heap();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let globals = Globals { home: cli.home, verbose: cli.verbose };
    let result = match cli.command {
        Command::Run(args) => run::run(&globals, args),
        Command::Chat(args) => chat::run(&globals, args),
        Command::Plugin(args) => plugin::run(&globals, args),
        Command::Config(args) => config::run(&globals, args),
        Command::Session(args) => session::run(&globals, args),
        Command::MockServer(args) => mock::run(args),
        Command::Completions { shell } => completions(shell),
        Command::Man => manual(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => exit.finish(),
    }
}

/// The runtime every command that runs turns or servers uses.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn completions(shell: clap_complete::Shell) -> Outcome {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "dsh", &mut script);
    out_text!("{}", String::from_utf8_lossy(&script))?;
    Ok(())
}

fn manual() -> Outcome {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    out_text!("{}", String::from_utf8_lossy(&page))?;
    Ok(())
}

/// Large buffers (a long streamed answer, a log batch) are given back to the system when freed.
/// glibc otherwise raises its mmap threshold after the first large free and serves later large
/// buffers from the heap, which fragments: an always-mode chain against endless streams would
/// then grow by megabytes an hour.
fn keep_large_buffers_off_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
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
