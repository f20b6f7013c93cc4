//! How `dsh web` runs a `dsh` command for a page (see [`super::commands`]): a child process of
//! this server with the server's home, under a deadline, its stdout read as JSON (bounded), its
//! exit code made the answer's status and its stderr the error.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::error::{internal, ApiError};

/// The most a command's stdout may say (a replay of a long session is the largest).
pub const MAX_COMMAND_OUTPUT: u64 = 64 * 1024 * 1024;
/// The most of its stderr an error quotes.
const MAX_ERROR_BYTES: u64 = 64 * 1024;

/// How the server runs `dsh`: the executable, the home, and the HTTP status an exit code means.
#[derive(Clone)]
pub struct Commands {
    pub dsh: PathBuf,
    pub home: PathBuf,
    pub status_of: fn(i32) -> StatusCode,
}

impl Commands {
    /// Runs `dsh ARGS…`; its stdout read as JSON (one document, or one per line for `lines`).
    pub async fn json(&self, args: &[&str], deadline: Duration, lines: bool) -> Result<Value, ApiError> {
        let mut child = tokio::process::Command::new(&self.dsh)
            .args(args)
            .env("DSH_HOME", &self.home)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| internal(format!("cannot run {}: {err}", self.dsh.display())))?;
        let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let ran = tokio::time::timeout(deadline, async {
            let (stdout, stderr) = tokio::join!(kept(out, MAX_COMMAND_OUTPUT + 1), kept(err, MAX_ERROR_BYTES));
            Ok::<_, std::io::Error>((stdout?, stderr?, child.wait().await?))
        });
        let (stdout, stderr, status) = match ran.await {
            Ok(ran) => ran.map_err(internal)?,
            Err(_) => return Err(internal(format!("dsh {} took longer than {deadline:?}", args.join(" ")))),
        };
        if stdout.len() as u64 > MAX_COMMAND_OUTPUT {
            return Err(internal(format!("dsh {} said more than {MAX_COMMAND_OUTPUT} bytes", args.join(" "))));
        }
        if !status.success() {
            let code = status.code().unwrap_or(1);
            let said = dsh_session::redact::text(String::from_utf8_lossy(&stderr).trim()).into_owned();
            return Err(ApiError::new((self.status_of)(code), said));
        }
        parse(&stdout, lines)
    }
}

/// What `pipe` says, up to `most` bytes; the rest is read and dropped, so the child never
/// blocks on a full pipe.
async fn kept(mut pipe: impl AsyncRead + Unpin, most: u64) -> std::io::Result<Vec<u8>> {
    let mut said = Vec::new();
    (&mut pipe).take(most).read_to_end(&mut said).await?;
    tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await?;
    Ok(said)
}

/// The command's JSON, every secret this process knows taken out first.
fn parse(stdout: &[u8], lines: bool) -> Result<Value, ApiError> {
    let text = String::from_utf8_lossy(stdout);
    let text = dsh_session::redact::text(&text);
    if lines {
        let parsed: Result<Vec<Value>, _> =
            text.lines().filter(|line| !line.trim().is_empty()).map(serde_json::from_str).collect();
        return parsed.map(Value::Array).map_err(internal);
    }
    serde_json::from_str(&text).map_err(internal)
}
