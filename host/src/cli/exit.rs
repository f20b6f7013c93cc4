//! How every command ends: `Ok(())`, or an [`Exit`] carrying the exit code — one type, so each
//! command returns the same way and the code is chosen in one place ([`exit_code_of`]).

use std::process::ExitCode;

use crate::profile::InvalidName;
use crate::NotFound;
use dsh_session::lock::{Busy, LockError};
use dsh_session::log::{AppendError, OpenError};
use dsh_session::reader::ReadError;
use dsh_session::store::StoreError;
use dsh_session::store::StoreSettingError;
use dsh_session::writer::WriteFailed;

/// The operation ran and failed (a turn ended in error, a library was refused).
pub const EXIT_FAILED: u8 = 1;
/// A usage error (clap's code).
pub const EXIT_USAGE: u8 = 2;
/// Nothing by that name (a session, a profile, a library).
pub const EXIT_NOT_FOUND: u8 = 3;
/// A configuration problem (`check`, or a run refused for its config).
pub const EXIT_CONFIG: u8 = 4;
/// Log violations (`verify`) or damage `repair` must not touch.
pub const EXIT_DAMAGED: u8 = 5;
/// Another process writes the session or profile.
pub const EXIT_BUSY: u8 = 6;
/// The session store (PostgreSQL) cannot be reached, refused the credentials, holds a newer
/// schema, or went away during the command.
pub const EXIT_STORE: u8 = 7;
/// Stopped by Ctrl-C (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Stopped by SIGHUP, the terminal closed (128 + 1).
pub const EXIT_HANGUP: u8 = 129;
/// Stopped by SIGQUIT (128 + 3).
pub const EXIT_QUIT: u8 = 131;
/// Stopped by SIGTERM (128 + 15).
pub const EXIT_TERMINATED: u8 = 143;

/// Every exit code and what it means, for `dsh man` (EXIT STATUS).
pub const EXIT_STATUSES: [(u8, &str); 12] = [
    (0, "success"),
    (EXIT_FAILED, "the operation ran and failed: a turn ended in error, a library was refused"),
    (EXIT_USAGE, "usage error"),
    (EXIT_NOT_FOUND, "nothing by that name: a session, a profile, a --patch file, a library"),
    (EXIT_CONFIG, "a configuration problem (config check, or a run refused for its configuration)"),
    (EXIT_DAMAGED, "log violations (session verify) or damage session repair must not touch"),
    (EXIT_BUSY, "another process writes the session or the profile"),
    (
        EXIT_STORE,
        "the session store (PostgreSQL) cannot be reached, refused the credentials, holds a newer schema, or went away",
    ),
    (EXIT_INTERRUPTED, "interrupted by Ctrl-C (a second Ctrl-C during a turn)"),
    (EXIT_HANGUP, "stopped by SIGHUP (the terminal closed); the running turn is closed in the log first"),
    (EXIT_QUIT, "stopped by SIGQUIT; the running turn is closed in the log first"),
    (EXIT_TERMINATED, "stopped by SIGTERM; the running turn is closed in the log first"),
];

/// What a command returns.
pub type Outcome = Result<(), Exit>;

/// A command that did not succeed: its exit code, and the error still to print (none when the
/// command has already said what went wrong).
#[derive(Debug)]
pub struct Exit {
    code: u8,
    error: Option<anyhow::Error>,
}

impl Exit {
    /// The command has put what went wrong on stderr (or stdout with `--json`).
    pub fn reported(code: u8) -> Exit {
        Exit { code, error: None }
    }

    /// An error others hold too: its code is its kind's, its text is printed.
    pub fn shared(error: &anyhow::Error) -> Exit {
        Exit { code: exit_code_of(error), error: Some(anyhow::anyhow!("{error:#}")) }
    }

    /// `Ok(())` when `success`, else the already reported `code`.
    pub fn unless(success: bool, code: u8) -> Outcome {
        if success {
            Ok(())
        } else {
            Err(Exit::reported(code))
        }
    }

    /// The process's exit code, after printing the error; a write to a stdout whose reader went
    /// away (`dsh … | head -1`) ends the command quietly and successfully.
    pub fn finish(self) -> ExitCode {
        match self.error {
            Some(err) if stdout_closed(&err) => ExitCode::SUCCESS,
            Some(err) => {
                say!("dsh: {err:#}");
                ExitCode::from(self.code)
            }
            None => ExitCode::from(self.code),
        }
    }
}

/// Any error ends a command with the code its kind means.
impl<E: Into<anyhow::Error>> From<E> for Exit {
    fn from(error: E) -> Exit {
        let error = error.into();
        Exit { code: exit_code_of(&error), error: Some(error) }
    }
}

/// The exit code that says what kind of error ended a command.
pub fn exit_code_of(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<NotFound>().is_some() {
        EXIT_NOT_FOUND
    } else if err.downcast_ref::<InvalidName>().is_some() {
        EXIT_USAGE
    } else if err.downcast_ref::<Busy>().is_some()
        || matches!(err.downcast_ref::<LockError>(), Some(LockError::Busy(_)))
    {
        EXIT_BUSY
    } else if matches!(err.downcast_ref::<OpenError>(), Some(OpenError::Corrupt { .. } | OpenError::Violation { .. })) {
        EXIT_DAMAGED
    } else if matches!(
        err.downcast_ref::<StoreSettingError>(),
        Some(StoreSettingError::File { .. } | StoreSettingError::Value { .. })
    ) {
        EXIT_CONFIG
    } else if store_unavailable(err) {
        EXIT_STORE
    } else {
        EXIT_FAILED
    }
}

/// Whether the session store could not be used (a bad setting is a configuration problem).
fn store_unavailable(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.is::<StoreError>()
            || cause
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.is::<StoreError>())
            || matches!(cause.downcast_ref::<StoreSettingError>(), Some(StoreSettingError::Store(_)))
            || matches!(cause.downcast_ref::<LockError>(), Some(LockError::Unavailable(_)))
            || matches!(cause.downcast_ref::<ReadError>(), Some(ReadError::Store(_)))
            || matches!(cause.downcast_ref::<WriteFailed>(), Some(WriteFailed { store: true, .. }))
            || matches!(cause.downcast_ref::<AppendError>(), Some(AppendError::Fatal(WriteFailed { store: true, .. })))
    })
}

/// Whether the error is a write to a stdout whose reader went away.
fn stdout_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|err| err.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_carries_the_code_of_its_kind() {
        assert_eq!(Exit::from(NotFound("x".into())).code, EXIT_NOT_FOUND);
        assert_eq!(Exit::from(anyhow::anyhow!("plain")).code, EXIT_FAILED);
        assert_eq!(Exit::reported(EXIT_CONFIG).code, EXIT_CONFIG);
        assert!(Exit::unless(true, EXIT_DAMAGED).is_ok());
    }

    #[test]
    fn a_closed_stdout_ends_the_command_successfully() {
        let closed = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert_eq!(Exit::from(closed).finish(), ExitCode::SUCCESS);
    }
}
