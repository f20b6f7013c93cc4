//! A readable timeline of a session log (`dsh session show`): turns, steps, requests, failed
//! attempts, each retry as `retry 2/5 · SERVER · 4.0s` with its failure message, answers and how
//! each turn ended. Reads our logs and DeepSeek Harness's (whose failed attempts are error
//! `finish` chunks).

use dsh_abi::events;

use dsh_abi::js;
use serde_json::Value;

use super::reader::{Damage, ReadError};
use super::store::LogRef;
use super::usage::Tokens;
use super::vocabulary::{message_text, tool_result_failed, tool_result_text};

const PREVIEW_CHARS: usize = 160;

fn preview(text: &str) -> String {
    crate::one_line(text, PREVIEW_CHARS)
}

fn failure_text(failure: Option<&Value>) -> String {
    let field = |key: &str| failure.and_then(|f| f.get(key)).map(|v| js::display(Some(v))).unwrap_or_default();
    format!("{} · {}", field("code"), field("message"))
}

fn end_text(reason: Option<&Value>) -> String {
    let kind = reason.and_then(|r| r.get("kind")).and_then(Value::as_str).unwrap_or("?");
    match kind {
        "error" => format!("ended with an error: {}", failure_text(reason.and_then(|r| r.get("error")))),
        "aborted" => {
            let by =
                reason.and_then(|r| r.get("reason")).and_then(|r| r.get("kind")).and_then(Value::as_str).unwrap_or("?");
            format!("aborted ({by})")
        }
        other => other.to_owned(),
    }
}

/// A delay as every screen shows it, the live countdown included: tenths of a second rounded up
/// below ten seconds (`0.9s` for 918.6 ms), whole seconds rounded up from there, and a delay no
/// clock reaches in exponent form (`1.0e305s`, not 306 digits).
pub fn seconds(ms: f64) -> String {
    if !ms.is_finite() {
        return "∞".to_owned();
    }
    if ms < 10_000.0 {
        format!("{:.1}s", (ms.max(0.0) / 100.0).ceil() / 10.0)
    } else if ms < 1e15 {
        format!("{}s", (ms / 1000.0).ceil())
    } else {
        format!("{:.1e}s", ms / 1000.0)
    }
}

/// A retry record's place in its chain as every screen shows it: `2/5` against `maxRetries`;
/// for an unbounded chain with a schedule (`headRetries`), `2/3, then ∞` in the schedule and
/// `7/∞` after it, so the schedule's last entry never reads like a last attempt.
pub fn retry_count(record: &Value) -> String {
    retry_place(record.get("retry"), record.get("maxRetries"), record.get("headRetries"))
}

/// [`retry_count`] from a record's fields, already read.
pub fn retry_place(retry: Option<&Value>, max_retries: Option<&Value>, head_retries: Option<&Value>) -> String {
    let shown = js::display(retry);
    match (max_retries, head_retries) {
        (Some(max), _) => format!("{shown}/{}", js::display(Some(max))),
        (None, Some(head)) if retry.and_then(Value::as_f64) <= head.as_f64() => {
            format!("{shown}/{}, then ∞", js::display(Some(head)))
        }
        _ => format!("{shown}/∞"),
    }
}

/// Epoch milliseconds as an HTTP date (`Sun, 29 Nov 2026 16:00:00 GMT`), the way every screen
/// shows when a session was created.
pub fn http_date(ms: f64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .ok()
        .and_then(|at| jiff::fmt::rfc2822::DateTimePrinter::new().timestamp_to_rfc9110_string(&at).ok())
        .unwrap_or_else(|| "?".to_owned())
}

/// Renders the log `log` as text lines.
pub fn render(log: &LogRef) -> Result<Vec<String>, ReadError> {
    let mut reader = log.reader()?;
    let header: Value = serde_json::from_str(reader.header()).unwrap_or(Value::Null);
    let mut lines = vec![header_line(&header)];
    let mut timeline = Timeline::default();
    while let Some(next) = reader.next_event() {
        let event = match next? {
            Ok(event) => event,
            Err(damage @ Damage::Torn { .. }) => {
                lines.push(format!("  (note: {})", log.torn_note(&damage)));
                continue;
            }
            Err(damage) => {
                lines.push(format!("  (damaged: {damage})"));
                continue;
            }
        };
        let data: Value = serde_json::from_str(event.data).unwrap_or(Value::Null);
        lines.extend(timeline.line(event.event_type, event.time.unwrap_or(0.0), &data));
    }
    lines.extend(timeline.session_tokens.text().map(|tokens| format!("tokens in all: {tokens}")));
    Ok(lines)
}

fn header_line(header: &Value) -> String {
    let created = header.get("createdAt").and_then(Value::as_f64).map(http_date).unwrap_or_else(|| "?".to_owned());
    format!(
        "session {} · created {created}{}",
        js::display(header.get("id")),
        header.get("cwd").and_then(Value::as_str).map(|cwd| format!(" · {cwd}")).unwrap_or_default()
    )
}

/// The timeline so far: when each retry (`retryId/retry`) was scheduled, and for how long; the
/// tokens of the turn and of the session.
#[derive(Default)]
struct Timeline {
    retries: Vec<(String, f64, f64)>,
    turn_tokens: Tokens,
    session_tokens: Tokens,
}

fn field(data: &Value, key: &str) -> String {
    js::display(data.get(key))
}

/// `assistant: TEXT`, with `· asks for N tool calls` when it does.
fn assistant_line(message: &Value) -> String {
    let calls = dsh_abi::events::tool_call_ids(message).count();
    let asks = match calls {
        0 => String::new(),
        1 => " · asks for 1 tool call".to_owned(),
        calls => format!(" · asks for {calls} tool calls"),
    };
    match message_text(message) {
        text if text.is_empty() && !asks.is_empty() => format!("    assistant{asks}"),
        text => format!("    assistant: {}{asks}", preview(&text)),
    }
}

/// `developer: tools added a, b · removed c`, or the message's text.
fn developer_line(message: &Value) -> String {
    let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
    let named = |kind: &str| {
        let names = blocks.clone().filter(|block| block.get("type").and_then(Value::as_str) == Some(kind));
        names.filter_map(|block| block.get("toolName")?.as_str()).collect::<Vec<_>>().join(", ")
    };
    let changes = [("tools added", named("tool-addition")), ("removed", named("tool-removal"))]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what} {names}"))
        .collect::<Vec<_>>();
    match changes.is_empty() {
        true => format!("    developer: {}", preview(&message_text(message))),
        false => format!("    developer: {}", changes.join(" · ")),
    }
}

/// `tool result (CALL) · TEXT`, or `tool result (CALL) · error CODE · TEXT`.
fn tool_result_line(data: &Value) -> String {
    let message = data.get("message").unwrap_or(&Value::Null);
    let call = events::answered_call(data).map(Value::from);
    let error = match data.pointer("/error/code").and_then(Value::as_str) {
        Some(code) => format!(" · error {code}"),
        None if tool_result_failed(message) => " · error".to_owned(),
        None => String::new(),
    };
    format!("    tool result ({}){error} · {}", js::display(call.as_ref()), preview(&tool_result_text(message)))
}

impl Timeline {
    /// The line an event shows as, if it shows.
    fn line(&mut self, event_type: &str, time: f64, data: &Value) -> Option<String> {
        let number = |key: &str| field(data, key);
        Some(match event_type {
            events::TURN_START => {
                self.turn_tokens = Tokens::default();
                format!("turn {}", number("turn"))
            }
            events::TURN_END => {
                let tokens = self.turn_tokens.text().map(|tokens| format!(" · tokens {tokens}")).unwrap_or_default();
                format!("turn {} {}{tokens}", number("turn"), end_text(data.get("reason")))
            }
            events::STEP_START => format!("  step {}", number("step")),
            events::STEP_END => format!("  end of step {}", number("step")),
            events::USER_MESSAGE => format!("    user: {}", preview(&message_text(data))),
            events::REQUEST_HEADER => {
                let config = data.get("header").and_then(|h| h.get("config"));
                format!(
                    "    request {} · {} ({})",
                    js::display(config.and_then(|c| c.get("provider"))),
                    js::display(config.and_then(|c| c.get("model"))),
                    number("reason")
                )
            }
            events::ASSISTANT_ATTEMPT => {
                format!("    failed attempt · {}", failure_text(events::attempt_failure(data)))
            }
            events::SYSTEM_MESSAGE => {
                format!("    system prompt: {}", preview(&message_text(data.get("message").unwrap_or(&Value::Null))))
            }
            events::DEVELOPER_MESSAGE => developer_line(data.get("message").unwrap_or(&Value::Null)),
            events::ASSISTANT_CHUNK => failed_chunk_line(data)?,
            events::LLM_RETRY => self.retry_line(time, data),
            events::LLM_RETRY_REFUSED => format!(
                "    retry refused by {} · {}",
                data.get("row").and_then(Value::as_str).unwrap_or("?"),
                preview(data.get("reason").and_then(Value::as_str).unwrap_or(""))
            ),
            events::LLM_RETRY_STARTED => self.started_line(time, data),
            events::ROUTE_SWITCH => format!(
                "    switched to {} · {} · {}",
                js::display(data.get("to")),
                js::display(data.get("row")),
                preview(data.get("reason").and_then(Value::as_str).unwrap_or(""))
            ),
            events::ASSISTANT_MESSAGE => {
                self.turn_tokens.add_message(data);
                self.session_tokens.add_message(data);
                assistant_line(data.get("message").unwrap_or(&Value::Null))
            }
            events::TOOL_CALL => {
                let arguments = preview(data.get("arguments").and_then(Value::as_str).unwrap_or_default());
                format!("    tool call {} {arguments} ({})", number("name"), number("callId"))
            }
            events::TOOL_RESULT => tool_result_line(data),
            events::TOOL_TASK => format!("    tool task {} ({})", number("taskId"), number("callId")),
            events::TOOL_RESOLUTION => format!(
                "    tool call ({}) resolved by rule {} · {}",
                number("callId"),
                number("rule"),
                preview(data.get("reason").and_then(Value::as_str).unwrap_or(""))
            ),
            _ => return None,
        })
    }

    fn retry_line(&mut self, time: f64, data: &Value) -> String {
        let get = |key: &str| data.get(key);
        let delay = get("delayMs").and_then(Value::as_f64).unwrap_or(0.0);
        self.retries.push((format!("{}/{}", field(data, "retryId"), field(data, "retry")), time, delay));
        let failure = get("failure");
        format!(
            "    retry {} · {} · {} · {}",
            retry_count(data),
            js::display(failure.and_then(|f| f.get("code"))),
            seconds(delay),
            js::display(failure.and_then(|f| f.get("message")))
        )
    }

    fn started_line(&self, time: f64, data: &Value) -> String {
        let key = format!("{}/{}", field(data, "retryId"), field(data, "retry"));
        let waited = self.retries.iter().rev().find(|(k, _, _)| *k == key).map(|(_, scheduled, _)| time - scheduled);
        match waited {
            Some(waited) => format!("    retry {} started after {}", field(data, "retry"), seconds(waited)),
            None => format!("    retry {} started", field(data, "retry")),
        }
    }
}

/// A DeepSeek Harness failed attempt: an error `finish` chunk (other chunks do not show).
fn failed_chunk_line(data: &Value) -> Option<String> {
    let chunk = data.get("chunk");
    let reason = chunk.and_then(|c| c.get("reason"));
    let failed = chunk.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("finish")
        && reason.and_then(|r| r.get("kind")).and_then(Value::as_str) == Some("error");
    failed.then(|| format!("    failed attempt · {}", failure_text(reason.and_then(|r| r.get("failure")))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_shown_rounded_up_one_way_everywhere_and_huge_ones_stay_short() {
        assert_eq!(seconds(918.6), "1.0s");
        assert_eq!(seconds(900.0), "0.9s");
        assert_eq!(seconds(2151.0), "2.2s");
        assert_eq!(seconds(12_100.0), "13s");
        assert_eq!(seconds(1e308), "1.0e305s");
        assert_eq!(seconds(f64::INFINITY), "∞");
    }

    #[test]
    fn a_scheduled_chain_never_shows_its_last_entry_as_a_last_attempt() {
        let count = |record: Value| retry_count(&record);
        assert_eq!(count(serde_json::json!({"retry": 2, "maxRetries": 5})), "2/5");
        assert_eq!(count(serde_json::json!({"retry": 2, "headRetries": 2})), "2/2, then ∞");
        assert_eq!(count(serde_json::json!({"retry": 3, "headRetries": 2})), "3/∞");
        assert_eq!(count(serde_json::json!({"retry": 3})), "3/∞");
    }
}
