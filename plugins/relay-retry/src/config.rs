//! The `relay-retry` row config: validated with every problem reported, each naming its key.

use dsh_abi::retry::{sorted_codes, MAX_DELAY_MS_INTEGER};
use dsh_abi::{js, ConfigError};
use serde_json::Value;

use dsh_abi::config::{Key, Kind, Row, Schema};

/// The row's keys: defaults, checks and the manifest's docs all come from here.
pub const SCHEMA: Schema = Schema::plugin(
    "relay-retry",
    &[
        Key::new(
            "schedule",
            Kind::list_of(&WAIT),
            "[2000, 5000, 5000, 5000, 10000]",
            "waits before retries 1..n in ms; its length is the bounded head",
        ),
        Key::new("tailDelayMs", WAIT, "20000", "wait before every later retry, in ms"),
        Key::new(
            "retryableCodes",
            Kind::list_of(&Kind::Text).distinct().non_empty(),
            r#"["EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT", "STREAM_CLOSED", "PI_AI_ERROR",
                "AUTH", "QUOTA", "ACCOUNT_QUOTA", "ACCOUNT_TOKEN_INVALID", "INVALID_CREDENTIAL",
                "MALFORMED_RESPONSE", "HTTP_*"]"#,
            "exact failure codes, or prefix rules ending in * such as HTTP_*",
        )
        .repeats_refused_as("duplicate code {item}"),
        Key::new("respectRetryAfter", Kind::Flag, "false", "a longer provider hint replaces the scheduled wait"),
    ],
);
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

const WAIT: Kind = Kind::integer(0, MAX_DELAY_MS_INTEGER);

impl RelayConfig {
    pub fn parse(config: &Value) -> Result<RelayConfig, Vec<ConfigError>> {
        let mut row = SCHEMA.read(config)?;
        let schedule = row.list("schedule").iter().filter_map(js::as_safe_u64).collect();
        let tail_delay_ms = row.integer("tailDelayMs");
        let respect_retry_after = row.flag("respectRetryAfter");
        let (codes, prefixes) = split_rules(codes(&mut row));
        row.finish(RelayConfig { schedule, tail_delay_ms, codes, prefixes, respect_retry_after })
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

/// The codes and prefix rules, each in the same pass as the schema's checks: a bare `*` is
/// refused with its reason, a `*` anywhere but at the end of a rule by the rule.
fn codes(row: &mut Row<'_>) -> Vec<String> {
    let rules = row.list_where("retryableCodes", |row, path, code| match code.as_str() {
        Some("*") => {
            row.refuse("retryableCodes", BARE_STAR);
            false
        }
        Some(rule) if rule.find('*').is_some_and(|star| star != rule.len() - 1) => {
            row.refuse(path, format!("\"*\" may only end a prefix rule such as \"HTTP_*\", got \"{rule}\""));
            false
        }
        _ => true,
    });
    rules.into_iter().filter_map(|rule| rule.as_str().map(str::to_owned)).collect()
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
        assert_eq!(config.schedule, [2000, 5000, 5000, 5000, 10000]);
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
    fn the_schema_is_well_formed() {
        assert_eq!(SCHEMA.faults(), Vec::<String>::new());
    }

    #[test]
    fn a_bare_star_is_refused_with_the_reason() {
        assert_eq!(
            problems(json!({"retryableCodes": ["*"]})),
            [("retryableCodes".into(), format!("relay-retry: {BARE_STAR}"))]
        );
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
                ("colour", "unknown key \"colour\""),
                ("schedule[1]", "must be an integer from 0 to 2147483647, got -5"),
                ("schedule[2]", "must be an integer from 0 to 2147483647, got 1.5"),
                ("schedule[3]", "must be an integer from 0 to 2147483647, got 2147483648"),
                ("schedule[4]", "must be an integer from 0 to 2147483647, got \"10\""),
                ("tailDelayMs", "must be an integer from 0 to 2147483647, got -1"),
                ("respectRetryAfter", "must be true or false, got \"yes\""),
                ("retryableCodes[1]", "duplicate code \"SERVER\""),
                ("retryableCodes[2]", "must be a non-empty string, got \"\""),
                ("retryableCodes[3]", "\"*\" may only end a prefix rule such as \"HTTP_*\", got \"A*B\""),
                ("retryableCodes[4]", "must be a non-empty string, got 7"),
            ]
            .map(|(path, message)| (path.to_owned(), format!("relay-retry: {message}")))
        );
        assert_eq!(
            problems(json!({"retryableCodes": []})),
            [("retryableCodes".to_owned(), "relay-retry: must not be empty".to_owned())]
        );
    }

    #[test]
    fn an_empty_schedule_is_all_tail() {
        let config = RelayConfig::parse(&json!({"schedule": [], "tailDelayMs": 0})).unwrap();
        assert!(config.schedule.is_empty());
        assert_eq!(config.policy_key().split(',').nth(1), Some("[]"));
    }
}
