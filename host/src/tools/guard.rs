//! The guard every MCP server over stdio runs under, so that no server outlives dsh, whatever ends
//! it (an exit, a signal during the server's start, `kill -9`).
//!
//! dsh starts its own executable as the guard, in a process group of its own, handing it the read
//! end of a pipe (the lifeline) whose write end only dsh holds. The guard starts the server in a
//! new process group and then waits for one of two things:
//!
//! - the lifeline closes — dsh is gone, or dropped the connection: the server's whole group is
//!   killed (a server that ignores the end of its input, and every child it forked, go with it);
//! - the server exits: whatever it left running in its group (a child that keeps its pipes open,
//!   which would keep dsh waiting for an end of output) is killed, and the guard exits as it did.
//!
//! The kernel closes the lifeline for any death of dsh, so this needs nothing of dsh at its end.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt};

/// The variable that makes `dsh` a guard: the lifeline's descriptor number. The command line
/// after the executable is the server's.
pub const GUARD_ENV: &str = "DSH_MCP_GUARD_LIFELINE";

/// The guard's exit code when it could not start the server (it then says why on stderr, as
/// `cannot start PROGRAM: …`).
pub const NOT_STARTED: i32 = 127;

/// Runs as the guard when this process was started as one; `None` otherwise (call it first in
/// `main`). The returned code is the server's exit code (128 + signal when it was killed).
pub fn serve_if_asked() -> Option<u8> {
    let lifeline = std::env::var(GUARD_ENV).ok()?;
    std::env::remove_var(GUARD_ENV);
    let code = match lifeline.parse::<i32>() {
        Ok(fd) if fd > 2 => guard(fd),
        _ => {
            eprintln!("dsh: {GUARD_ENV} must name an open descriptor");
            127
        }
    };
    Some(code)
}

fn guard(fd: i32) -> u8 {
    // SAFETY: dsh passed this descriptor for the guard alone to own.
    let lifeline = unsafe { OwnedFd::from_raw_fd(fd) };
    set_close_on_exec(&lifeline);
    let mut line = std::env::args_os().skip(1);
    let Some(program) = line.next() else {
        eprintln!("dsh: the MCP guard was given no server to start");
        return 127;
    };
    let mut server = match std::process::Command::new(&program).args(line).process_group(0).spawn() {
        Ok(server) => server,
        Err(err) => {
            eprintln!("cannot start {}: {err}", program.to_string_lossy());
            return NOT_STARTED as u8;
        }
    };
    let group = server.id() as i32;
    let _ = release_pipes();
    std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        // Returns at end of file (dsh is gone) or on an error; nothing is ever written.
        // SAFETY: reading into a valid one-byte buffer from a descriptor this thread owns.
        unsafe { libc::read(lifeline.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        kill_group(group);
        std::process::exit(137);
    });
    let status = server.wait();
    kill_group(group);
    match status {
        Ok(status) => status.code().map_or_else(|| 128 + status.signal().unwrap_or(9) as u8, |code| code as u8),
        Err(_) => 1,
    }
}

/// Points the guard's own stdin and stdout at `/dev/null`: only the server holds dsh's pipes, so
/// they close when the server's group is gone.
fn release_pipes() -> std::io::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    for target in [0, 1] {
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe { libc::dup2(null.as_raw_fd(), target) };
    }
    Ok(())
}

fn kill_group(group: i32) {
    // SAFETY: signalling a process group this guard created.
    unsafe { libc::killpg(group, libc::SIGKILL) };
}

fn set_close_on_exec(fd: &OwnedFd) {
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
}

/// A lifeline: the read end for a guard (inherited by it alone) and the write end, whose drop —
/// or dsh's death — tells the guard to end the server.
pub struct Lifeline {
    _write: OwnedFd,
    read: Option<OwnedFd>,
}

impl Lifeline {
    pub fn new() -> std::io::Result<Lifeline> {
        let mut fds = [0i32; 2];
        // SAFETY: a two-element array for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Lifeline { _write: write, read: Some(read) })
    }

    /// Once the guard has started: the write end alone stays with dsh.
    pub fn started(mut self) -> Lifeline {
        self.read = None;
        self
    }

    /// A command that runs dsh's own executable as the guard of `server`: the read end survives
    /// into it (and only into it); it runs in a process group of its own, so a Ctrl-C at the
    /// terminal, meant for the turn, reaches neither it nor the server; and its environment —
    /// which the server gets, less [`GUARD_ENV`] — is only what the caller adds.
    pub fn guard_command(&self, server: &[String]) -> std::io::Result<tokio::process::Command> {
        let read = self.read.as_ref().map(AsRawFd::as_raw_fd).ok_or_else(|| std::io::Error::other("guard started"))?;
        let mut command = tokio::process::Command::new(std::env::current_exe()?);
        command.args(server).process_group(0).env_clear().env(GUARD_ENV, read.to_string());
        // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
        unsafe {
            command.pre_exec(move || match libc::fcntl(read, libc::F_SETFD, 0) {
                -1 => Err(std::io::Error::last_os_error()),
                _ => Ok(()),
            });
        }
        Ok(command)
    }
}
