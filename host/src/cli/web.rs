//! `dsh web [--profile P] [--listen ADDR] [--port N] [--no-open] [--keep-open SECONDS]`: the browser front end
//! ([`crate::web`]) on the session service. It prints the page's address, token included, on
//! stdout; SIGTERM, SIGHUP or Ctrl-C stop it: the running turns are cancelled and closed in their
//! logs, and dsh exits 0.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Args;
use tokio::sync::watch;

use super::exit::{Exit, Outcome, EXIT_BUSY, EXIT_CONFIG, EXIT_DAMAGED, EXIT_NOT_FOUND, EXIT_STORE, EXIT_USAGE};
use super::globals::{runtime, Globals};
use super::turns::{exit_code_now, StopSignals};
use crate::agent::view::Silent;
use crate::service::{SessionService, Setup};
use crate::web::runner::Commands;
use crate::web::{self, Guard, Web, TOKEN_PARAMETER};
use axum::http::StatusCode;
use dsh_session::meta::RunOverrides;
use dsh_session::store::SessionStore;

#[derive(Debug, Args)]
pub struct WebArgs {
    /// The profile new sessions run with (a continued session keeps its own).
    #[arg(long, value_name = "NAME", default_value = crate::agent::target::DEFAULT_PROFILE, add = super::complete::profiles())]
    profile: String,
    /// An extra patch layer new sessions run with, after every other layer (repeatable, in order).
    #[arg(long = "patch", value_name = "FILE")]
    patches: Vec<PathBuf>,
    /// The address to listen on; beyond loopback it needs --token or --token-file.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    listen: IpAddr,
    /// The port to listen on (0: any free one; the printed address says which).
    #[arg(long, value_name = "N", default_value_t = 3080)]
    port: u16,
    /// Print the address without opening it in a browser.
    #[arg(long)]
    no_open: bool,
    /// The token the page and the API require (default: a new random one each start).
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    token: Option<String>,
    /// A file whose first line is the token.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// A host name the server may be reached as, besides its address (repeatable).
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// How long a session stays open here after its last request (its MCP servers running, its
    /// writer lock held), so another dsh web or dsh chat can continue it after that.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_KEEP_OPEN_SECONDS)]
    keep_open: u64,
}

/// [`WebArgs::keep_open`]'s default.
const DEFAULT_KEEP_OPEN_SECONDS: u64 = 300;

/// The shortest token `--token` and `--token-file` may give.
const MIN_TOKEN_CHARS: usize = 16;

pub fn run(globals: &Globals, args: WebArgs) -> Outcome {
    let home = globals.home()?;
    let token = token(&args)?;
    let store = SessionStore::for_home(home.root())?;
    let home_root = home.root().to_path_buf();
    let setup = Setup {
        home,
        profile: args.profile.clone(),
        patches: args.patches.clone(),
        overrides: RunOverrides::default(),
        cwd: std::env::current_dir()?,
        verbose: globals.verbose(),
        continued_as_recorded: true,
        v4_only: false,
        keep_open: Some(std::time::Duration::from_secs(args.keep_open)),
        view: Box::new(|| Box::new(Silent)),
    };
    runtime()?.block_on(async {
        let address = SocketAddr::new(args.listen, args.port);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|err| anyhow::anyhow!("dsh web cannot listen on {address}: {err}"))?;
        let port = listener.local_addr()?.port();
        let (service, _) = SessionService::new(setup, Box::new(|note| say!("dsh: {note}")))?;
        let (stop, stopping) = watch::channel(false);
        let (profile, patches) = (args.profile.clone(), args.patches.clone());
        let commands = Commands { dsh: std::env::current_exe()?, home: home_root, status_of: http_status };
        let trajectories = Default::default();
        let web = Web { service: service.clone(), store, profile, patches, stopping, trajectories, commands };
        let guard = Guard::new(token.clone(), port, &host_names(args.listen, &args.allow_hosts));
        let url = format!("http://{}/?{TOKEN_PARAMETER}={token}", SocketAddr::new(shown_ip(args.listen), port));
        announce(&url, !args.no_open)?;
        let stopped = stop_on_signals(StopSignals::new()?, stop, service.clone());
        web::serve(listener, web::router(web, guard), stopped).await?;
        service.shutdown().await;
        Ok(())
    })
}

/// Resolves at the first stop signal, once the event streams are told to end and the service
/// to stop (running turns cancelled and closed in their logs, queued prompts refused), so the
/// requests still open get their answers; a second signal exits at once.
async fn stop_on_signals(mut signals: StopSignals, stop: watch::Sender<bool>, service: SessionService) {
    if signals.next().await.is_none() {
        return std::future::pending().await;
    }
    let _ = stop.send(true);
    tokio::spawn(async move { service.shutdown().await });
    tokio::spawn(async move {
        if signals.next().await.is_some() {
            std::process::exit(i32::from(exit_code_now()));
        }
    });
}

/// The HTTP status of a `dsh` command the page ran that exited with `code`.
fn http_status(code: i32) -> StatusCode {
    match u8::try_from(code) {
        Ok(EXIT_USAGE) => StatusCode::BAD_REQUEST,
        Ok(EXIT_NOT_FOUND) => StatusCode::NOT_FOUND,
        Ok(EXIT_CONFIG | EXIT_DAMAGED) => StatusCode::UNPROCESSABLE_ENTITY,
        Ok(EXIT_BUSY) => StatusCode::CONFLICT,
        Ok(EXIT_STORE) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The token: given, read from its file, or a new random one.
fn token(args: &WebArgs) -> Result<String, Exit> {
    let given = match (&args.token, &args.token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .map_err(|err| anyhow::anyhow!("cannot read the token file {}: {err}", file.display()))?;
            Some(text.lines().next().unwrap_or_default().trim().to_owned())
        }
        (None, None) => None,
    };
    match given {
        Some(token) if usable(&token) => Ok(token),
        Some(_) => {
            say!(
                "dsh web: a token has at least {MIN_TOKEN_CHARS} characters, each a letter, a digit or one of - . _ ~"
            );
            Err(Exit::reported(EXIT_USAGE))
        }
        None if !args.listen.is_loopback() => {
            say!(
                "dsh web: listening on {} reaches beyond this machine; give the token other machines will need \
                 with --token or --token-file",
                args.listen
            );
            Err(Exit::reported(EXIT_USAGE))
        }
        None => Ok(hex::encode(rand::random::<[u8; 24]>())),
    }
}

fn usable(token: &str) -> bool {
    token.len() >= MIN_TOKEN_CHARS && token.chars().all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
}

/// The names a request may reach the server as: its address, the loopback names when it listens
/// there (or everywhere), and those the user allows.
fn host_names(listen: IpAddr, allowed: &[String]) -> Vec<String> {
    let mut names = vec![SocketAddr::new(listen, 0).to_string().trim_end_matches(":0").to_owned()];
    if listen.is_loopback() || listen.is_unspecified() {
        names.extend(["127.0.0.1", "localhost", "[::1]"].map(str::to_owned));
    }
    names.extend(allowed.iter().cloned());
    names
}

/// The address the printed URL names (an unspecified one is reached on loopback).
fn shown_ip(listen: IpAddr) -> IpAddr {
    match listen {
        ip if ip.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
        ip => ip,
    }
}

/// Prints the page's address on stdout (the one line a script waits for) and opens it.
fn announce(url: &str, open: bool) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "dsh web: {url}")?;
    stdout.flush()?;
    if open && std::process::Command::new("xdg-open").arg(url).spawn().is_err() {
        say!("dsh web: no browser could be opened (xdg-open); open the address above");
    }
    Ok(())
}
