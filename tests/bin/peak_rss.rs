//! `peak-rss COMMAND ARGS…`: runs the command with this process's stdio, then prints its peak
//! resident memory (`peak-rss-kib: N`, on stderr) and exits with its exit code.
//!
//! A child's peak memory, as `wait4` reports it, starts from the memory of the process that
//! spawned it; spawned from a large test process, a small command would seem large. This small
//! process stands between them, so the figure is the command's own.

use std::os::unix::process::ExitStatusExt;
use std::process::{exit, Command};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: peak-rss COMMAND [ARGS…]");
        exit(2);
    };
    let child = Command::new(program).args(args).spawn().unwrap_or_else(|err| {
        eprintln!("peak-rss: cannot run the command: {err}");
        exit(2);
    });
    let (status, peak) = dsh_e2e::process::wait_with_peak_rss(child).unwrap_or_else(|err| {
        eprintln!("peak-rss: wait4 failed: {err}");
        exit(2);
    });
    eprintln!("peak-rss-kib: {peak}");
    exit(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
}
