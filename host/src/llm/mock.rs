//! The mock server's script: a YAML list of responses served in order (then the last repeats).
//!
//! ```yaml
//! - ok: "Hello there"        # 200, the text streamed as several chunks, then [DONE]
//! - status: 503              # an HTTP error; body: a string (sent as is) or a mapping (sent as JSON)
//!   headers: {content-type: text/html}
//!   body: "<html><head><title>503 Service Unavailable</title></head></html>"
//! - reset: true              # close the connection without a response
//! - truncate: "partial answ" # stream this text, then close without [DONE]
//! - malformed: true          # a frame that is not valid JSON
//! - empty: true              # 200, a finish chunk and [DONE], no content
//! - stall: 5000              # the 200 headers, then nothing for N ms
//! ```
//!
//! Every item may add `delayMs: N` (wait before answering) and `headers: {name: value}`.

use serde_json::Value;

/// What the server does for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum MockAction {
    Ok(String),
    Status { status: u16, body: Option<Value> },
    Reset,
    Truncate(String),
    Malformed,
    Empty,
    Stall(u64),
}

/// One scripted response.
#[derive(Debug, Clone, PartialEq)]
pub struct MockStep {
    pub action: MockAction,
    pub delay_ms: u64,
    pub headers: Vec<(String, String)>,
}

const ACTIONS: [&str; 7] = ["ok", "status", "reset", "truncate", "malformed", "empty", "stall"];
const OPTIONS: [&str; 3] = ["delayMs", "headers", "body"];

/// Parses a script; errors are `[N].key message` (items numbered from 1), every problem found.
pub fn parse_script(script: &Value) -> Result<Vec<MockStep>, Vec<String>> {
    let Some(items) = script.as_array() else {
        return Err(vec![" must be a list of responses".to_owned()]);
    };
    if items.is_empty() {
        return Err(vec![" must list at least one response".to_owned()]);
    }
    let mut errors = Vec::new();
    let steps = items.iter().enumerate().filter_map(|(index, item)| parse_step(index + 1, item, &mut errors)).collect();
    if errors.is_empty() {
        Ok(steps)
    } else {
        Err(errors)
    }
}

fn parse_step(number: usize, item: &Value, errors: &mut Vec<String>) -> Option<MockStep> {
    let Some(fields) = item.as_object() else {
        errors.push(format!("[{number}] must be a mapping with one of: {}", ACTIONS.join(", ")));
        return None;
    };
    let before = errors.len();
    for key in fields.keys().filter(|key| !ACTIONS.contains(&key.as_str()) && !OPTIONS.contains(&key.as_str())) {
        errors.push(format!("[{number}]: unknown key \"{key}\""));
    }
    let actions: Vec<&str> = ACTIONS.iter().copied().filter(|action| fields.contains_key(*action)).collect();
    let action = match actions.as_slice() {
        [action] => *action,
        [] => {
            errors.push(format!("[{number}] must have one of: {}", ACTIONS.join(", ")));
            return None;
        }
        several => {
            errors.push(format!("[{number}] has several actions ({}); give exactly one", several.join(", ")));
            return None;
        }
    };
    let value = &fields[action];
    let flag = |errors: &mut Vec<String>| {
        if value != &Value::Bool(true) {
            errors.push(format!("[{number}].{action} must be true"));
        }
    };
    let text = |errors: &mut Vec<String>| match value {
        Value::String(text) => text.clone(),
        _ => {
            errors.push(format!("[{number}].{action} must be a string"));
            String::new()
        }
    };
    let action = match action {
        "ok" => MockAction::Ok(text(errors)),
        "truncate" => MockAction::Truncate(text(errors)),
        "reset" => {
            flag(errors);
            MockAction::Reset
        }
        "malformed" => {
            flag(errors);
            MockAction::Malformed
        }
        "empty" => {
            flag(errors);
            MockAction::Empty
        }
        "stall" => MockAction::Stall(millis(value, &format!("[{number}].stall"), errors)),
        _ => {
            let status = value.as_u64().filter(|status| (100..=599).contains(status)).unwrap_or_else(|| {
                errors.push(format!("[{number}].status must be an HTTP status from 100 through 599"));
                500
            });
            MockAction::Status { status: status as u16, body: fields.get("body").cloned() }
        }
    };
    if fields.contains_key("body") && !matches!(action, MockAction::Status { .. }) {
        errors.push(format!("[{number}].body only goes with status"));
    }
    let delay_ms = fields.get("delayMs").map_or(0, |delay| millis(delay, &format!("[{number}].delayMs"), errors));
    let headers = match fields.get("headers") {
        None => Vec::new(),
        Some(Value::Object(headers)) => headers
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    Value::String(text) => text.clone(),
                    Value::Number(_) | Value::Bool(_) => value.to_string(),
                    _ => {
                        errors.push(format!("[{number}].headers.{name} must be a string"));
                        String::new()
                    }
                };
                (name.clone(), value)
            })
            .collect(),
        Some(_) => {
            errors.push(format!("[{number}].headers must be a mapping"));
            Vec::new()
        }
    };
    (errors.len() == before).then_some(MockStep { action, delay_ms, headers })
}

fn millis(value: &Value, path: &str, errors: &mut Vec<String>) -> u64 {
    dsh_abi::js::as_safe_u64(value).unwrap_or_else(|| {
        errors.push(format!("{path} must be a non-negative integer number of milliseconds"));
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_documented_response_kind_parses() {
        let script = json!([
            {"ok": "Hello there"},
            {"status": 503, "headers": {"content-type": "text/html"}, "body": "<html></html>"},
            {"status": 429, "headers": {"retry-after": 1}, "body": {"error": {"message": "slow down"}}},
            {"reset": true},
            {"truncate": "partial answ", "delayMs": 5},
            {"malformed": true},
            {"empty": true},
            {"stall": 5000},
        ]);
        let steps = parse_script(&script).unwrap();
        assert_eq!(steps.len(), 8);
        assert_eq!(steps[2].headers, [("retry-after".to_owned(), "1".to_owned())]);
        assert_eq!(steps[4].delay_ms, 5);
        assert_eq!(steps[7].action, MockAction::Stall(5000));
    }

    #[test]
    fn bad_items_are_all_reported_by_number() {
        let errors =
            parse_script(&json!([{"ok": "x", "reset": true}, "text", {"stall": -1}, {"teapot": 1}])).unwrap_err();
        assert_eq!(
            errors,
            [
                "[1] has several actions (ok, reset); give exactly one",
                "[2] must be a mapping with one of: ok, status, reset, truncate, malformed, empty, stall",
                "[3].stall must be a non-negative integer number of milliseconds",
                "[4]: unknown key \"teapot\"",
                "[4] must have one of: ok, status, reset, truncate, malformed, empty, stall",
            ]
        );
    }
}
