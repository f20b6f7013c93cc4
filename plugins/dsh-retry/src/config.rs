//! The `model-error-retry` row config: defaults, normalisation, and validation in the documented
//! order, each message `dsh-retry: <message>`.

use dsh_abi::config::{Key, Kind, Row, Schema, MAX_SAFE_INTEGER};
use dsh_abi::retry::{sorted_codes, MAX_DELAY_MS};
use dsh_abi::{js, ConfigError};
use serde_json::Value;

pub const DEFAULT_RESUME_PROMPT: &str = "The host running this session stopped before your previous work finished. \
Continue from the durable conversation history above. Before you act, re-check the current state of the \
workspace and of any external systems, because some of your earlier actions may or may not have taken effect; \
do not blindly repeat tool calls that have side effects.";

const SAFE_COUNT: Kind = Kind::integer(0, MAX_SAFE_INTEGER);
const DELAY: Kind = Kind::number(0.0, MAX_DELAY_MS);
/// Strings, normalised once read ([`strings`]); a list holding anything else is refused with its
/// key's message.
const STRINGS: Kind = Kind::list_of(&Kind::String);

/// The row's keys. The messages for a value of the wrong kind are the reference's.
pub const SCHEMA: Schema = Schema::plugin(
    "dsh-retry",
    &[
        Key::new("maxRetries", SAFE_COUNT, "2", "request retries; 0 disables them")
            .refused_as("maxRetries must be a non-negative safe integer"),
        Key::new("overloadMaxRetries", SAFE_COUNT, "5", "retries of an overloaded provider")
            .refused_as("overloadMaxRetries must be a non-negative safe integer"),
        Key::new(
            "retryableCodes",
            STRINGS,
            r#"["STREAM_CLOSED", "MALFORMED_RESPONSE", "PI_AI_ERROR", "API_ERROR", "MODEL_ERROR", "INTERNAL_ERROR",
                "PROVIDER_ERROR", "UNKNOWN"]"#,
            "codes, trimmed and upper-cased; \"*\" matches any",
        )
        .refused_as("retryableCodes must be a list of strings"),
        Key::new("initialDelayMs", DELAY, "500", "first wait, in ms")
            .refused_as("initialDelayMs must be between 0 and 2147483647"),
        Key::new("overloadInitialDelayMs", DELAY, "2000", "first wait for an overloaded provider, in ms")
            .refused_as("overloadInitialDelayMs must be between 0 and 2147483647"),
        Key::new("maxDelayMs", DELAY, "10000", "the longest wait, at least both initial delays")
            .refused_as(MAX_DELAY_RULE),
        Key::new("jitterRatio", Kind::number(0.0, 1.0), "0.1", "random spread of each wait")
            .refused_as("jitterRatio must be between 0 and 1"),
        Key::new("providers", STRINGS, "[]", "route names to serve; empty serves all")
            .refused_as("providers must be a list of strings"),
        Key::new("excludeProviders", STRINGS, "[]", "route names never served; wins over providers")
            .refused_as("excludeProviders must be a list of strings"),
        Key::new("respectRetryAfter", Kind::Flag, "true", "honour a provider hint up to maxDelayMs")
            .refused_as("respectRetryAfter must be true or false"),
        Key::new("resumeInterrupted", Kind::Flag, "true", "continue provably unfinished work on cold resume")
            .refused_as("resumeInterrupted must be true or false"),
        Key::new("resumeDisposed", Kind::Flag, "false", "also treat a turn aborted by disposal as unfinished")
            .refused_as("resumeDisposed must be true or false"),
        Key::new("resumeMaxAgeMs", SAFE_COUNT, "86400000", "older proofs of interrupted work are ignored")
            .refused_as("resumeMaxAgeMs must be a non-negative safe integer"),
        Key::new("resumePrompt", Kind::Text, "", "the message that continues interrupted work (default: dsh's own)")
            .refused_as("resumePrompt must not be empty"),
    ],
);
const MAX_DELAY_RULE: &str = "maxDelayMs must be at least both initial delays and at most 2147483647";

/// A resolved config.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackConfig {
    pub max_retries: u64,
    pub overload_max_retries: u64,
    /// Trimmed, upper-cased, deduplicated; `*` matches any code.
    pub retryable_codes: Vec<String>,
    pub initial_delay_ms: f64,
    pub overload_initial_delay_ms: f64,
    pub max_delay_ms: f64,
    pub jitter_ratio: f64,
    pub providers: Vec<String>,
    pub exclude_providers: Vec<String>,
    pub respect_retry_after: bool,
    pub resume_interrupted: bool,
    pub resume_disposed: bool,
    pub resume_max_age_ms: f64,
    pub resume_prompt: String,
}

/// A list of strings, trimmed and deduplicated (first kept), blanks dropped; `upper` also
/// upper-cases.
fn strings(row: &mut Row<'_>, key: &str, upper: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for text in row.strings(key) {
        let text = if upper { text.trim().to_uppercase() } else { text.trim().to_owned() };
        if !text.is_empty() && !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

impl FallbackConfig {
    pub fn parse(config: &Value) -> Result<FallbackConfig, Vec<ConfigError>> {
        let mut row = SCHEMA.read(config)?;
        let max_retries = row.integer("maxRetries");
        let overload_max_retries = row.integer("overloadMaxRetries");
        let initial_delay_ms = row.number("initialDelayMs");
        let overload_initial_delay_ms = row.number("overloadInitialDelayMs");
        let mut max_delay_ms = row.number("maxDelayMs");
        if row.given("maxDelayMs").is_some_and(Value::is_number)
            && (max_delay_ms < initial_delay_ms || max_delay_ms < overload_initial_delay_ms)
        {
            row.refuse("maxDelayMs", MAX_DELAY_RULE);
            max_delay_ms = 10_000.0;
        }
        let jitter_ratio = row.number("jitterRatio");
        let resume_max_age_ms = row.integer("resumeMaxAgeMs") as f64;
        let resume_prompt = row.text("resumePrompt").unwrap_or_else(|| DEFAULT_RESUME_PROMPT.to_owned());
        let retryable_codes = strings(&mut row, "retryableCodes", true);
        if max_retries > 0 && retryable_codes.is_empty() && row.given("retryableCodes").is_some_and(Value::is_array) {
            row.refuse("retryableCodes", "retryableCodes must not be empty when retries are enabled");
        }
        let config = FallbackConfig {
            max_retries,
            overload_max_retries,
            retryable_codes,
            initial_delay_ms,
            overload_initial_delay_ms,
            max_delay_ms,
            jitter_ratio,
            providers: strings(&mut row, "providers", false),
            exclude_providers: strings(&mut row, "excludeProviders", false),
            respect_retry_after: row.flag("respectRetryAfter"),
            resume_interrupted: row.flag("resumeInterrupted"),
            resume_disposed: row.flag("resumeDisposed"),
            resume_max_age_ms,
            resume_prompt,
        };
        row.finish(config)
    }

    /// `["dsh-retry/v1",maxRetries,overloadMaxRetries,[codes sorted],initialDelayMs,
    /// overloadInitialDelayMs,maxDelayMs,jitterRatio,[providers sorted],[excludeProviders
    /// sorted],respectRetryAfter]`: a config change starts fresh chains.
    pub fn policy_key(&self) -> String {
        fn sorted(items: &[String]) -> Vec<&str> {
            sorted_codes(items.iter().map(String::as_str))
        }
        js::to_string(&(
            "dsh-retry/v1",
            self.max_retries,
            self.overload_max_retries,
            sorted(&self.retryable_codes),
            self.initial_delay_ms,
            self.overload_initial_delay_ms,
            self.max_delay_ms,
            self.jitter_ratio,
            sorted(&self.providers),
            sorted(&self.exclude_providers),
            self.respect_retry_after,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(config: Value) -> Vec<String> {
        FallbackConfig::parse(&config)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|error| error.message.into_string())
            .collect()
    }

    #[test]
    fn defaults() {
        let config = FallbackConfig::parse(&Value::Null).unwrap();
        assert_eq!((config.max_retries, config.overload_max_retries), (2, 5));
        assert_eq!(
            config.retryable_codes,
            [
                "STREAM_CLOSED",
                "MALFORMED_RESPONSE",
                "PI_AI_ERROR",
                "API_ERROR",
                "MODEL_ERROR",
                "INTERNAL_ERROR",
                "PROVIDER_ERROR",
                "UNKNOWN"
            ]
        );
        assert_eq!(SCHEMA.faults(), Vec::<String>::new());
        assert_eq!(
            (config.initial_delay_ms, config.overload_initial_delay_ms, config.max_delay_ms, config.jitter_ratio),
            (500.0, 2000.0, 10000.0, 0.1)
        );
        assert!(config.respect_retry_after && config.resume_interrupted && !config.resume_disposed);
        assert_eq!(config.resume_max_age_ms, 86_400_000.0);
        assert_eq!(
            config.policy_key(),
            r#"["dsh-retry/v1",2,5,["API_ERROR","INTERNAL_ERROR","MALFORMED_RESPONSE","MODEL_ERROR","PI_AI_ERROR","PROVIDER_ERROR","STREAM_CLOSED","UNKNOWN"],500,2000,10000,0.1,[],[],true]"#
        );
    }

    #[test]
    fn codes_and_providers_are_normalised() {
        let config = FallbackConfig::parse(
            &json!({"retryableCodes": [" server ", "SERVER", "", "pi_ai_error"], "providers": [" a ", "a", "b"]}),
        )
        .unwrap();
        assert_eq!(config.retryable_codes, ["SERVER", "PI_AI_ERROR"]);
        assert_eq!(config.providers, ["a", "b"]);
    }

    #[test]
    fn errors_come_in_the_documented_order() {
        assert_eq!(
            messages(json!({
                "retryableCodes": [], "resumePrompt": "  ", "resumeMaxAgeMs": -1, "jitterRatio": 2,
                "maxDelayMs": 100, "overloadInitialDelayMs": -1, "initialDelayMs": 3e9, "overloadMaxRetries": 1.5, "maxRetries": "2",
            })),
            [
                "dsh-retry: maxRetries must be a non-negative safe integer",
                "dsh-retry: overloadMaxRetries must be a non-negative safe integer",
                "dsh-retry: initialDelayMs must be between 0 and 2147483647",
                "dsh-retry: overloadInitialDelayMs must be between 0 and 2147483647",
                "dsh-retry: maxDelayMs must be at least both initial delays and at most 2147483647",
                "dsh-retry: jitterRatio must be between 0 and 1",
                "dsh-retry: resumeMaxAgeMs must be a non-negative safe integer",
                "dsh-retry: resumePrompt must not be empty",
                "dsh-retry: retryableCodes must not be empty when retries are enabled",
            ]
        );
    }

    #[test]
    fn empty_codes_are_fine_when_retries_are_off_and_unknown_keys_are_refused() {
        assert!(messages(json!({"maxRetries": 0, "retryableCodes": []})).is_empty());
        assert_eq!(messages(json!({"colour": 1})), ["dsh-retry: unknown key \"colour\""]);
    }
}
