//! The `dsh` command line: argument parsing (clap), logging set-up, dispatch and exit codes.
//!
//! Exit codes, one per meaning, are listed in [`exit::EXIT_STATUSES`] (and `dsh man`'s EXIT
//! STATUS). A closed stdout ends a command quietly.

/// `println!` for text a person reads, through [`shown::shown`] (secrets out, control characters
/// visible), handing back the write's result instead of panicking: a closed stdout (`dsh … |
/// head -1`) becomes an error the command passes up, and `dsh` ends quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), "{}", $crate::cli::shown::shown(&format!($($arg)*)))
    }};
}

/// `println!` of exact output — a JSON document, a log line — handing back the write's result.
macro_rules! out_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `eprintln!` through [`shown::shown`]: what dsh says on stderr never holds a secret or an
/// escape sequence, whatever a server or log put into it.
macro_rules! say {
    ($($arg:tt)*) => {{
        eprintln!("{}", $crate::cli::shown::shown(&format!($($arg)*)))
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
mod complete;
mod config;
mod counters;
mod exit;
mod habits;
mod input;
mod manual;
mod mock;
mod plugin;
mod replay;
mod run;
mod session;
pub(crate) mod shown;
mod tools;
mod turns;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use exit::{Exit, Outcome, EXIT_BUSY, EXIT_CONFIG, EXIT_DAMAGED, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE};

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
    /// Print the script that completes dsh in a shell — commands, options, profiles and session
    /// ids — e.g. `source <(dsh completions bash)` in ~/.bashrc.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff): `dsh man > ~/.local/share/man/man1/dsh.1`, `dsh man session
    /// repair` for dsh-session-repair(1), or every page with `--dir DIR`.
    Man(manual::ManArgs),
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
    complete::answer_the_shell();
    keep_large_buffers_off_the_heap();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
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
        Command::Man(args) => manual::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => exit.finish(),
    }
}

/// Prints clap's error (or help), with the dsh command for a DeepSeek Harness habit when the words
/// are one.
fn usage_error(error: &clap::Error) -> ExitCode {
    let _ = error.print();
    let words: Vec<String> = std::env::args_os().skip(1).map(|word| word.to_string_lossy().into_owned()).collect();
    let command = Cli::command();
    let is_command = |word: &str| command.find_subcommand(word).is_some();
    if let Some(hint) = habits::hint(error.kind(), &words, is_command) {
        say!("hint: {hint}");
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(EXIT_USAGE))
}

/// Composes the profile and prints the composition warnings (`dsh: [<layer>] <message>`).
pub(crate) fn compose(
    home: &Home,
    profile_name: &str,
    patches: &[PathBuf],
    scope: crate::profile::LayerScope,
) -> anyhow::Result<(crate::profile::Profile, crate::profile::patch::Composition)> {
    let profile = crate::profile::Profile::open(home, profile_name)?;
    let composition = profile.compose(home, patches, scope)?;
    for warning in &composition.warnings {
        say!("dsh: {warning}");
    }
    Ok((profile, composition))
}

/// The runtime every command that runs turns or servers uses.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn completions(shell: clap_complete::Shell) -> Outcome {
    let script = complete::registration(shell)?;
    out_text!("{}", String::from_utf8_lossy(&script))?;
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

/// The variable that sets the log filter (tracing's `EnvFilter` syntax), over `-v`.
pub(crate) const LOG_ENV: &str = "DSH_LOG";

fn init_logging(verbose: u8) {
    let default_level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(OneStyle)
        .init();
}

/// Every line dsh logs in the one style its own messages have: `dsh: warning: …`,
/// `dsh: error: …`, and with `-v` `dsh: info: …` and `dsh: debug: …`, through
/// [`shown::shown`] (a plugin's or a server's words never carry a secret or an escape).
struct OneStyle;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for OneStyle
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        fields: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        let level = if level == "warn" { "warning".to_owned() } else { level };
        let mut message = String::new();
        tracing_subscriber::fmt::FormatFields::format_fields(
            fields,
            tracing_subscriber::fmt::format::Writer::new(&mut message),
            event,
        )?;
        writeln!(writer, "dsh: {level}: {}", shown::shown(&message))
    }
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
