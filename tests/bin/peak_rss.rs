//! `peak-rss COMMAND ARGS…`: runs the command with this process's stdio, then prints its peak
//! resident memory (`peak-rss-kib: N`, on stderr) and exits with its exit code.
//!
//! A child's peak memory, as `wait4` reports it, starts from the memory of the process that
//! spawned it; spawned from a large test process, a small command would seem large. This small
//! process stands between them, so the figure is the command's own.

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
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own child, and both out-pointers live for the call.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    if pid != child.id() as libc::pid_t {
        eprintln!("peak-rss: wait4 failed");
        exit(2);
    }
    eprintln!("peak-rss-kib: {}", usage.ru_maxrss);
    exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) });
}
