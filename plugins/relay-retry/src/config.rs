//! The `relay-retry` row config: validated with every problem reported, each naming its key.

use dsh_abi::retry::{sorted_codes, MAX_DELAY_MS_INTEGER};
use dsh_abi::{js, ConfigError};
use serde_json::Value;

pub const DEFAULT_SCHEDULE: [u64; 5] = [2000, 5000, 5000, 5000, 10000];
pub const DEFAULT_TAIL_DELAY_MS: u64 = 20_000;
pub const DEFAULT_CODES: [&str; 14] = [
    "EMPTY_RESPONSE",
    "RATE_LIMIT",
    "SERVER",
    "TIMEOUT",
    "TRANSPORT",
    "STREAM_CLOSED",
    "PI_AI_ERROR",
    "AUTH",
    "QUOTA",
    "ACCOUNT_QUOTA",
    "ACCOUNT_TOKEN_INVALID",
    "INVALID_CREDENTIAL",
    "MALFORMED_RESPONSE",
    "HTTP_*",
];
const KEYS: [&str; 4] = ["schedule", "tailDelayMs", "retryableCodes", "respectRetryAfter"];
const BARE_STAR: &str = "a bare \"*\" would retry every failure, including cancellations and configuration errors; list codes or prefixes such as \"HTTP_*\"";

/// A resolved relay config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    pub schedule: Vec<u64>,
    pub tail_delay_ms: u64,
    /// Exact codes.
    pub codes: Vec<String>,
    /// Prefix rules, without their trailing `*`.
    pub prefixes: Vec<String>,
    pub respect_retry_after: bool,
}

fn wait(value: &Value, path: &str, errors: &mut Vec<ConfigError>) -> u64 {
    match value.as_f64() {
        Some(ms) if js::is_safe_integer(ms) && ms >= 0.0 && ms <= MAX_DELAY_MS_INTEGER as f64 => ms as u64,
        Some(ms) if js::is_safe_integer(ms) && ms > MAX_DELAY_MS_INTEGER as f64 => {
            errors.push(ConfigError::new(
                path,
                format!("must be at most {MAX_DELAY_MS_INTEGER} ms, got {}", js::number(ms)),
            ));
            0
        }
        _ => {
            errors.push(ConfigError::new(path, format!("must be a non-negative integer, got {value}")));
            0
        }
    }
}

impl RelayConfig {
    pub fn parse(config: &Value) -> Result<RelayConfig, Vec<ConfigError>> {
        let object = dsh_abi::config_object("relay-retry", config)?;
        let mut errors: Vec<ConfigError> = object
            .keys()
            .filter(|key| !KEYS.contains(&key.as_str()))
            .map(|key| ConfigError::new(key.as_str(), format!("unknown key \"{key}\"")))
            .collect();
        let schedule = match object.get("schedule") {
            None => DEFAULT_SCHEDULE.to_vec(),
            Some(Value::Array(waits)) => waits
                .iter()
                .enumerate()
                .map(|(index, value)| wait(value, &format!("schedule[{index}]"), &mut errors))
                .collect(),
            Some(other) => {
                errors.push(ConfigError::new(
                    "schedule",
                    format!("must be a list of waits in milliseconds, got {other}"),
                ));
                Vec::new()
            }
        };
        let tail_delay_ms =
            object.get("tailDelayMs").map_or(DEFAULT_TAIL_DELAY_MS, |value| wait(value, "tailDelayMs", &mut errors));
        let respect_retry_after = match object.get("respectRetryAfter") {
            None => false,
            Some(Value::Bool(flag)) => *flag,
            Some(other) => {
                errors.push(ConfigError::new("respectRetryAfter", format!("must be true or false, got {other}")));
                false
            }
        };
        let (codes, prefixes) = match object.get("retryableCodes") {
            None => split_rules(DEFAULT_CODES.iter().map(|code| (*code).to_owned()).collect()),
            Some(value) => split_rules(codes(value, &mut errors)),
        };
        if errors.is_empty() {
            Ok(RelayConfig { schedule, tail_delay_ms, codes, prefixes, respect_retry_after })
        } else {
            Err(errors)
        }
    }

    /// Whether a failure code is retried: an exact code, or a prefix rule.
    pub fn matches(&self, code: &str) -> bool {
        self.codes.iter().any(|exact| exact == code)
            || self.prefixes.iter().any(|prefix| code.starts_with(prefix.as_str()))
    }

    /// `["relay",[schedule…],tailDelayMs,[codes sorted],respectRetryAfter]`.
    pub fn policy_key(&self) -> String {
        let rules: Vec<String> =
            self.codes.iter().cloned().chain(self.prefixes.iter().map(|prefix| format!("{prefix}*"))).collect();
        let rules = sorted_codes(rules.iter().map(String::as_str));
        js::to_string(&("relay", &self.schedule, self.tail_delay_ms, rules, self.respect_retry_after))
    }
}

fn codes(value: &Value, errors: &mut Vec<ConfigError>) -> Vec<String> {
    let Some(items) = value.as_array() else {
        errors.push(ConfigError::new("retryableCodes", format!("must be a list of failure codes, got {value}")));
        return Vec::new();
    };
    if items.is_empty() {
        errors.push(ConfigError::new("retryableCodes", "must not be empty"));
    }
    let mut seen: Vec<String> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("retryableCodes[{index}]");
        let Some(code) = item.as_str().filter(|code| !code.trim().is_empty()) else {
            errors.push(ConfigError::new(path, format!("must be a non-empty string, got {item}")));
            continue;
        };
        if code == "*" {
            errors.push(ConfigError::new("retryableCodes", BARE_STAR));
        } else if code.find('*').is_some_and(|star| star != code.len() - 1) {
            errors.push(ConfigError::new(
                path,
                format!("\"*\" may only end a prefix rule such as \"HTTP_*\", got \"{code}\""),
            ));
        } else if seen.iter().any(|earlier| earlier == code) {
            errors.push(ConfigError::new(path, format!("duplicate code \"{code}\"")));
        } else {
            seen.push(code.to_owned());
        }
    }
    seen
}

fn split_rules(rules: Vec<String>) -> (Vec<String>, Vec<String>) {
    let (prefixes, codes): (Vec<String>, Vec<String>) = rules.into_iter().partition(|rule| rule.ends_with('*'));
    (codes, prefixes.into_iter().map(|rule| rule.trim_end_matches('*').to_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(config: Value) -> Vec<(String, String)> {
        RelayConfig::parse(&config)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|error| (error.path.into_string(), error.message.into_string()))
            .collect()
    }

    #[test]
    fn defaults_match_the_documented_schedule_and_codes() {
        let config = RelayConfig::parse(&Value::Null).unwrap();
        assert_eq!(config.schedule, DEFAULT_SCHEDULE);
        assert_eq!(config.tail_delay_ms, 20_000);
        assert!(!config.respect_retry_after);
        for code in ["AUTH", "QUOTA", "HTTP_404", "HTTP_422", "STREAM_CLOSED", "PI_AI_ERROR"] {
            assert!(config.matches(code), "{code}");
        }
        for code in [
            "CONTEXT_WINDOW_EXCEEDED",
            "INVALID_REQUEST",
            "NO_ADAPTER",
            "MISSING_CREDENTIAL",
            "ABORTED",
            "UNKNOWN",
            "server",
        ] {
            assert!(!config.matches(code), "{code}");
        }
    }

    #[test]
    fn a_bare_star_is_refused_with_the_reason() {
        assert_eq!(problems(json!({"retryableCodes": ["*"]})), [("retryableCodes".into(), BARE_STAR.into())]);
    }

    #[test]
    fn every_problem_is_reported() {
        assert_eq!(
            problems(json!({
                "schedule": [2000, -5, 1.5, 2147483648u64, "10"],
                "tailDelayMs": -1,
                "retryableCodes": ["SERVER", "SERVER", "", "A*B", 7],
                "respectRetryAfter": "yes",
                "colour": "red",
            })),
            [
                ("colour".to_owned(), "unknown key \"colour\"".to_owned()),
                ("schedule[1]".into(), "must be a non-negative integer, got -5".into()),
                ("schedule[2]".into(), "must be a non-negative integer, got 1.5".into()),
                ("schedule[3]".into(), "must be at most 2147483647 ms, got 2147483648".into()),
                ("schedule[4]".into(), "must be a non-negative integer, got \"10\"".into()),
                ("tailDelayMs".into(), "must be a non-negative integer, got -1".into()),
                ("respectRetryAfter".into(), "must be true or false, got \"yes\"".into()),
                ("retryableCodes[1]".into(), "duplicate code \"SERVER\"".into()),
                ("retryableCodes[2]".into(), "must be a non-empty string, got \"\"".into()),
                ("retryableCodes[3]".into(), "\"*\" may only end a prefix rule such as \"HTTP_*\", got \"A*B\"".into()),
                ("retryableCodes[4]".into(), "must be a non-empty string, got 7".into()),
            ]
        );
        assert_eq!(
            problems(json!({"retryableCodes": []})),
            [("retryableCodes".to_owned(), "must not be empty".to_owned())]
        );
    }

    #[test]
    fn an_empty_schedule_is_all_tail() {
        let config = RelayConfig::parse(&json!({"schedule": [], "tailDelayMs": 0})).unwrap();
        assert!(config.schedule.is_empty());
        assert_eq!(config.policy_key().split(',').nth(1), Some("[]"));
    }
}
