//! JSON-RPC 2.0 as the SDK speaks it: one message per line, requests read with a size limit,
//! and the lines dsh writes back (responses, errors, notifications).

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest request line dsh reads: as long as a session log line
/// ([`dsh_session::reader::MAX_LINE_BYTES`]), which a prompt has to fit in anyway. A longer line
/// is refused and skipped without being held in memory.
pub const MAX_REQUEST_BYTES: usize = dsh_session::reader::MAX_LINE_BYTES;

/// JSON-RPC's error codes, as the reference uses them.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
/// Every error of a method the reference answers: a bad parameter, an unknown session, an
/// unknown method.
pub const INTERNAL_ERROR: i64 = -32603;

/// One line of input.
#[derive(Debug, PartialEq)]
pub enum Line {
    Text(Vec<u8>),
    /// Longer than [`MAX_REQUEST_BYTES`] (this many bytes, newline aside); skipped.
    TooLong(usize),
    End,
}

/// Reads the next line, without its newline; a line over `limit` bytes is consumed and counted,
/// not kept.
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, limit: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut length = 0usize;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match length {
                0 => Line::End,
                _ if length > limit => Line::TooLong(length),
                _ => Line::Text(line),
            });
        }
        let (taken, ended) = match available.iter().position(|&byte| byte == b'\n') {
            Some(at) => (at, true),
            None => (available.len(), false),
        };
        length += taken;
        if length <= limit {
            line.extend_from_slice(&available[..taken]);
        } else {
            line = Vec::new();
        }
        reader.consume(taken + usize::from(ended));
        if ended {
            return Ok(if length > limit { Line::TooLong(length) } else { Line::Text(line) });
        }
    }
}

/// A request's id: a string or a number, echoed back as it came.
pub type Id = Value;

/// What a line asks for.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Id,
        method: String,
        params: Value,
    },
    /// A notification, or a response to nothing dsh asked: nothing to answer.
    Ignored,
}

/// Reads one line as JSON-RPC; `Err` is the error line to answer it with.
pub fn parse(line: &[u8]) -> Result<Incoming, String> {
    let message: Value = serde_json::from_slice(line).map_err(|_| error(&Value::Null, PARSE_ERROR, "Parse error"))?;
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let valid_id = matches!(id, Value::String(_) | Value::Number(_) | Value::Null);
    let method = message.get("method").and_then(Value::as_str);
    if !message.is_object() || message["jsonrpc"] != "2.0" || !valid_id {
        return Err(error(if valid_id { &id } else { &Value::Null }, INVALID_REQUEST, "Invalid request"));
    }
    match (method, id.is_null()) {
        (Some(method), false) => {
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            Ok(Incoming::Request { id, method: method.to_owned(), params })
        }
        (Some(_), true) => Ok(Incoming::Ignored),
        (None, _) if message.get("result").is_some() || message.get("error").is_some() => Ok(Incoming::Ignored),
        (None, _) => Err(error(&id, INVALID_REQUEST, "Invalid request")),
    }
}

/// A response line.
pub fn result(id: &Id, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// An error response line.
pub fn error(id: &Id, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[derive(Serialize)]
struct Notification<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    params: P,
}

/// A notification line.
pub fn notification(method: &str, params: impl Serialize) -> String {
    serde_json::to_string(&Notification { jsonrpc: "2.0", method, params }).expect("a notification serializes")
}

#[derive(Serialize)]
struct SessionEvent<'a> {
    #[serde(rename = "sessionId")]
    session_id: &'a str,
    event: &'a RawValue,
}

/// `session.event {sessionId, event}` carrying a log line as written; `None` for a line that is
/// not JSON (never written by dsh's log).
pub fn session_event(session_id: &str, line: &str) -> Option<String> {
    let event: &RawValue = serde_json::from_str(line).ok()?;
    Some(notification("session.event", SessionEvent { session_id, event }))
}

/// `session.status {sessionId, status}`.
pub fn session_status(session_id: &str, running: bool) -> String {
    let status = if running { "running" } else { "idle" };
    notification("session.status", json!({"sessionId": session_id, "status": status}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Line> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let mut reader = tokio::io::BufReader::with_capacity(7, input);
            let mut lines = Vec::new();
            loop {
                match read_line(&mut reader, limit).await.unwrap() {
                    Line::End => return lines,
                    line => lines.push(line),
                }
            }
        })
    }

    #[test]
    fn a_line_one_byte_over_the_limit_is_skipped_and_the_next_is_read() {
        let input = [b"x".repeat(10), b"y".repeat(11), b"z".repeat(10)].join(&b'\n');
        let read = lines(&input, 10);
        assert_eq!(read, [Line::Text(b"x".repeat(10)), Line::TooLong(11), Line::Text(b"z".repeat(10))]);
    }

    proptest! {
        #[test]
        fn lines_come_back_as_written_whatever_the_buffer_boundaries(
            written in proptest::collection::vec("[a-z{}\":,]{0,30}", 0..8),
            limit in 0usize..40,
        ) {
            let input: Vec<u8> = written.iter().flat_map(|line| format!("{line}\n").into_bytes()).collect();
            let expected: Vec<Line> = written
                .iter()
                .map(|line| match line.len() > limit {
                    true => Line::TooLong(line.len()),
                    false => Line::Text(line.clone().into_bytes()),
                })
                .collect();
            prop_assert_eq!(lines(&input, limit), expected);
        }
    }

    #[test]
    fn bad_json_rpc_gets_the_references_codes() {
        let code = |line: &str| {
            let refused: Value = serde_json::from_str(&parse(line.as_bytes()).unwrap_err()).unwrap();
            (refused["id"].clone(), refused["error"]["code"].as_i64().unwrap())
        };
        assert_eq!(code("{not json"), (Value::Null, PARSE_ERROR));
        assert_eq!(code(r#"{"id":1,"method":"shutdown"}"#), (json!(1), INVALID_REQUEST));
        assert_eq!(code(r#"[1,2]"#), (Value::Null, INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#), (Value::Null, INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"7"}"#), (json!("7"), INVALID_REQUEST));
        let ignored = [r#"{"jsonrpc":"2.0","method":"note"}"#, r#"{"jsonrpc":"2.0","id":3,"result":{}}"#];
        for line in ignored {
            assert_eq!(parse(line.as_bytes()), Ok(Incoming::Ignored), "{line}");
        }
    }

    #[test]
    fn a_session_event_carries_the_log_line_as_written() {
        let line = r#"{"type":"turn/start","seq":4,"time":1,"data":{"turn":1}}"#;
        let sent = session_event("s-1", line).unwrap();
        assert_eq!(
            sent,
            format!(r#"{{"jsonrpc":"2.0","method":"session.event","params":{{"sessionId":"s-1","event":{line}}}}}"#)
        );
    }
}
