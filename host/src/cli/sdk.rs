//! `dsh --profile NAME [--patch F]…` with no command: the DeepSeek Harness SDK's runtime on
//! stdio ([`crate::sdk`]). SIGTERM, SIGHUP or Ctrl-C ends it as end of input does: the running
//! turns are cancelled and closed in their logs, and dsh exits 0.

use std::path::PathBuf;
use std::sync::Arc;

use super::exit::Outcome;
use super::globals::{runtime, Globals};
use super::turns::StopSignals;
use crate::sdk::{serve, Launch};

pub fn run(globals: &Globals, profile: String, patches: Vec<PathBuf>) -> Outcome {
    let home = globals.home()?;
    let notes = Arc::new(|note: &str| say!("dsh: {note}"));
    let launch = Launch { home, profile, patches, verbose: globals.verbose(), notes };
    let runtime = runtime()?;
    let served = runtime.block_on(async {
        let mut signals = StopSignals::new()?;
        let stop = async move {
            signals.next().await;
        };
        let input = tokio::io::BufReader::new(tokio::io::stdin());
        serve(launch, input, tokio::io::stdout(), stop).await
    });
    // Stdin is read on a blocking thread, which a stop signal leaves waiting for a line.
    runtime.shutdown_background();
    Ok(served?)
}
