//! A readable timeline of a session log (`dsh session show`): turns, steps, requests, failed
//! attempts, each retry as `retry 2/5 · SERVER · 4.0s` with its failure message, answers and how
//! each turn ended. Reads our logs and DeepSeek Harness's (whose failed attempts are error
//! `finish` chunks).

use dsh_abi::events;
use std::time::{Duration, UNIX_EPOCH};

use dsh_abi::js;
use serde_json::Value;

use super::locate::torn_note;
use super::reader::{Damage, LogReader, ReadError};
use super::vocabulary::message_text;

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

/// Renders the log at `path` as text lines.
pub fn render(path: &std::path::Path) -> Result<Vec<String>, ReadError> {
    let mut reader = LogReader::open(path)?;
    let header: Value = serde_json::from_str(reader.header()).unwrap_or(Value::Null);
    let created = header
        .get("createdAt")
        .and_then(Value::as_f64)
        .map(|ms| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(ms as u64)))
        .unwrap_or_else(|| "?".to_owned());
    let mut lines = vec![format!(
        "session {} · created {created}{}",
        js::display(header.get("id")),
        header.get("cwd").and_then(Value::as_str).map(|cwd| format!(" · {cwd}")).unwrap_or_default()
    )];
    let mut retry_times: Vec<(String, f64, f64)> = Vec::new();
    while let Some(next) = reader.next_event() {
        let event = match next? {
            Ok(event) => event,
            Err(damage @ Damage::Torn { .. }) => {
                lines.push(format!("  (note: {})", torn_note(path, &damage)));
                continue;
            }
            Err(damage) => {
                lines.push(format!("  (damaged: {damage})"));
                continue;
            }
        };
        let data: Value = serde_json::from_str(event.data).unwrap_or(Value::Null);
        let get = |key: &str| data.get(key);
        let number = |key: &str| js::display(get(key));
        let time = event.time.unwrap_or(0.0);
        let line = match event.event_type {
            "turn/start" => format!("turn {}", number("turn")),
            "turn/end" => format!("turn {} {}", number("turn"), end_text(get("reason"))),
            "step/start" => format!("  step {}", number("step")),
            "step/end" => format!("  end of step {}", number("step")),
            "user/message" => format!("    user: {}", preview(&message_text(&data))),
            events::REQUEST_HEADER => {
                let config = get("header").and_then(|h| h.get("config"));
                format!(
                    "    request {} · {} ({})",
                    js::display(config.and_then(|c| c.get("provider"))),
                    js::display(config.and_then(|c| c.get("model"))),
                    number("reason")
                )
            }
            "assistant/attempt" => format!("    failed attempt · {}", failure_text(get("failure"))),
            events::ASSISTANT_CHUNK => {
                let chunk = get("chunk");
                let reason = chunk.and_then(|c| c.get("reason"));
                let failed = chunk.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("finish")
                    && reason.and_then(|r| r.get("kind")).and_then(Value::as_str) == Some("error");
                if !failed {
                    continue;
                }
                format!("    failed attempt · {}", failure_text(reason.and_then(|r| r.get("failure"))))
            }
            events::LLM_RETRY => {
                let of = match (get("maxRetries"), get("headRetries")) {
                    (Some(max), _) => js::display(Some(max)),
                    (None, Some(head)) if get("retry").and_then(Value::as_f64) <= head.as_f64() => {
                        js::display(Some(head))
                    }
                    _ => "∞".to_owned(),
                };
                let delay = get("delayMs").and_then(Value::as_f64).unwrap_or(0.0);
                retry_times.push((format!("{}/{}", number("retryId"), number("retry")), time, delay));
                let failure = get("failure");
                format!(
                    "    retry {}/{of} · {} · {} · {}",
                    number("retry"),
                    js::display(failure.and_then(|f| f.get("code"))),
                    seconds(delay),
                    js::display(failure.and_then(|f| f.get("message")))
                )
            }
            "llm/retry-refused" => format!(
                "    retry refused by {} · {}",
                data.get("row").and_then(Value::as_str).unwrap_or("?"),
                preview(data.get("reason").and_then(Value::as_str).unwrap_or(""))
            ),
            events::LLM_RETRY_STARTED => {
                let key = format!("{}/{}", number("retryId"), number("retry"));
                let waited =
                    retry_times.iter().rev().find(|(k, _, _)| *k == key).map(|(_, scheduled, _)| time - scheduled);
                match waited {
                    Some(waited) => format!("    retry {} started after {}", number("retry"), seconds(waited)),
                    None => format!("    retry {} started", number("retry")),
                }
            }
            events::ASSISTANT_MESSAGE => {
                format!("    assistant: {}", preview(&get("message").map(message_text).unwrap_or_default()))
            }
            "tool/call" => format!("    tool call {} ({})", number("name"), number("callId")),
            "tool/result" => format!("    tool result ({})", number("callId")),
            _ => continue,
        };
        lines.push(line);
    }
    Ok(lines)
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
}
