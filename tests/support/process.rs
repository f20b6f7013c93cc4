//! The tests' child processes: signals, `kill -9` and reaping, peak memory.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};

/// Sends `signal` to `child`.
pub fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) with the pid of our own child only sends a signal.
    unsafe { libc::kill(pid(child), signal) };
}

/// Sends `signal` to the process group `child` leads.
pub fn signal_group(child: &Child, signal: i32) {
    // SAFETY: as in `signal`, to the group of our own child.
    unsafe { libc::kill(-pid(child), signal) };
}

/// Whether a process `pid` exists (a zombie not yet reaped counts).
pub fn exists(pid: i32) -> bool {
    // SAFETY: signal 0 only asks whether the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// `kill -9` of `child`, then its exit status once it is reaped (a child already gone is fine).
pub fn kill_9(child: &mut Child) -> ExitStatus {
    let _ = child.kill();
    child.wait().expect("reap the killed child")
}

/// Waits for `child` to end; its exit status and peak resident memory in KiB. The child is
/// reaped by wait4, which std cannot do but which also reports the peak.
pub fn wait_with_peak_rss(child: Child) -> std::io::Result<(ExitStatus, i64)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own child, and both out-pointers live for the call.
    let reaped = unsafe { libc::wait4(pid(&child), &mut status, 0, &mut usage) };
    if reaped != pid(&child) {
        return Err(std::io::Error::last_os_error());
    }
    Ok((ExitStatus::from_raw(status), usage.ru_maxrss))
}

fn pid(child: &Child) -> libc::pid_t {
    libc::pid_t::try_from(child.id()).expect("a pid fits in pid_t")
}
