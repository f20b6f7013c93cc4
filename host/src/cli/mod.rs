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

mod args;
mod chat;
mod complete;
mod config;
mod counters;
mod exit;
mod globals;
mod habits;
mod input;
mod live;
mod logging;
mod manual;
mod mock;
mod plugin;
mod profile;
mod prune;
mod replay;
mod run;
mod sdk;
mod session;
pub(crate) mod shown;
mod tools;
mod turns;
mod web;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};
pub use globals::Globals;

pub use exit::{Exit, Outcome, EXIT_BUSY, EXIT_CONFIG, EXIT_DAMAGED, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE};

pub fn main() -> ExitCode {
    args::answer_the_shell();
    keep_large_buffers_off_the_heap();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    logging::init_logging(cli.verbose);
    let globals = Globals { home: cli.home, verbose: cli.verbose };
    let Some(command) = cli.command else {
        let Some(profile) = cli.profile else {
            let _ = Cli::command().print_help();
            return ExitCode::from(EXIT_USAGE);
        };
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return sdk_on_a_terminal(&profile);
        }
        return finish(sdk::run(&globals, profile, cli.patches));
    };
    if let Some(profile) = &cli.profile {
        say!(
            "error: `--profile` before a command serves the SDK's runtime, which takes no command; give it \
             after the command (`dsh run --profile {profile} …`)"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let result = match command {
        Command::Run(args) => run::run(&globals, args),
        Command::Chat(args) => chat::run(&globals, args),
        Command::Web(args) => web::run(&globals, args),
        Command::Plugin(args) => plugin::run(&globals, args),
        Command::Profile(args) => profile::run(&globals, args),
        Command::Config(args) => config::run(&globals, args),
        Command::Session(args) => session::run(&globals, args),
        Command::MockServer(args) => mock::run(args),
        Command::Completions { shell } => completions(shell),
        Command::Man(args) => manual::run(args),
    };
    finish(result)
}

fn finish(result: Outcome) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(exit) => exit.finish(),
    }
}

/// `dsh --profile NAME` typed at a terminal: DeepSeek Harness's habit for its interactive session,
/// not a program speaking the SDK's protocol.
fn sdk_on_a_terminal(profile: &str) -> ExitCode {
    say!(
        "dsh: with no command, `dsh --profile {profile}` serves the DeepSeek Harness SDK's runtime protocol \
         (JSON-RPC lines on stdin), and stdin is a terminal"
    );
    if let Some(hint) = habit_hint(clap::error::ErrorKind::UnknownArgument, false) {
        say!("hint: {hint}");
    }
    ExitCode::from(EXIT_USAGE)
}

/// Prints clap's error (or help), with the dsh command for a DeepSeek Harness habit when the words
/// are one.
fn usage_error(error: &clap::Error) -> ExitCode {
    let _ = error.print();
    let suggested = error.get(clap::error::ContextKind::SuggestedSubcommand).is_some();
    if let Some(hint) = habit_hint(error.kind(), suggested) {
        say!("hint: {hint}");
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(EXIT_USAGE))
}

/// The dsh command for the DeepSeek Harness habit this command line is, if it is one.
fn habit_hint(kind: clap::error::ErrorKind, suggested: bool) -> Option<String> {
    let words: Vec<String> = std::env::args_os().skip(1).map(|word| word.to_string_lossy().into_owned()).collect();
    let command = Cli::command();
    let run = command.find_subcommand("run");
    let takes_value = |word: &str| {
        let long = word.trim_start_matches('-');
        let arg = run.and_then(|run| run.get_arguments().find(|arg| arg.get_long() == Some(long)));
        arg.is_some_and(|arg| arg.get_action().takes_values())
    };
    let grammar =
        habits::Grammar { is_command: &|word| command.find_subcommand(word).is_some(), takes_value: &takes_value };
    habits::hint(kind, suggested, &words, &grammar)
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
