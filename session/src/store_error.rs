//! Why a session store cannot be used: its own module, so the log reader can name it without
//! depending on the stores (which read their logs through the reader and the migration).

use std::io;
use std::time::Duration;

/// Why the session store cannot be used. Never holds a password.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to the session store {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the session store {url} {what} failed: {reason}")]
    Query { url: String, what: &'static str, reason: String },
    #[error("the session store {url} did not answer {what} within {}s", deadline.as_secs())]
    Deadline { url: String, what: &'static str, deadline: Duration },
    #[error(
        "the session store {url} holds dsh schema version {found}; this dsh knows versions up to {known} (upgrade dsh)"
    )]
    NewerSchema { url: String, found: i32, known: i32 },
    #[error("the session store {url}: the connection is gone")]
    Gone { url: String },
}

impl From<StoreError> for io::Error {
    /// The store error stays the I/O error's inner error, so what failed can still be told.
    fn from(err: StoreError) -> io::Error {
        io::Error::other(err)
    }
}
