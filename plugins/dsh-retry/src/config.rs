//! The `model-error-retry` row config: defaults, normalisation, and validation in the documented
//! order, each message `dsh-retry: <message>`.

use dsh_abi::retry::{sorted_codes, MAX_DELAY_MS};
use dsh_abi::{js, ConfigError};
use serde_json::Value;

pub const DEFAULT_CODES: [&str; 8] = [
    "STREAM_CLOSED",
    "MALFORMED_RESPONSE",
    "PI_AI_ERROR",
    "API_ERROR",
    "MODEL_ERROR",
    "INTERNAL_ERROR",
    "PROVIDER_ERROR",
    "UNKNOWN",
];
pub const DEFAULT_RESUME_PROMPT: &str = "The host running this session stopped before your previous work finished. \
Continue from the durable conversation history above. Before you act, re-check the current state of the \
workspace and of any external systems, because some of your earlier actions may or may not have taken effect; \
do not blindly repeat tool calls that have side effects.";

const KEYS: [&str; 14] = [
    "maxRetries",
    "overloadMaxRetries",
    "retryableCodes",
    "initialDelayMs",
    "overloadInitialDelayMs",
    "maxDelayMs",
    "jitterRatio",
    "providers",
    "excludeProviders",
    "respectRetryAfter",
    "resumeInterrupted",
    "resumeDisposed",
    "resumeMaxAgeMs",
    "resumePrompt",
];

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

fn error(message: impl std::fmt::Display) -> String {
    format!("dsh-retry: {message}")
}

/// Trims and deduplicates (first kept), dropping blanks; `upper` also upper-cases.
fn normalise(values: &[Value], upper: bool) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for value in values {
        let text = value.as_str()?.trim();
        let text = if upper { text.to_uppercase() } else { text.to_owned() };
        if !text.is_empty() && !out.contains(&text) {
            out.push(text);
        }
    }
    Some(out)
}

impl FallbackConfig {
    pub fn parse(config: &Value) -> Result<FallbackConfig, Vec<ConfigError>> {
        let object = dsh_abi::config_object("dsh-retry", config)?;
        let mut errors: Vec<ConfigError> = Vec::new();
        let get = |key: &str| object.get(key);
        let safe_integer = |key: &str, default: u64, errors: &mut Vec<ConfigError>| match get(key) {
            None => default,
            Some(value) => js::as_safe_u64(value).unwrap_or_else(|| {
                errors.push(ConfigError::new(key, error(format!("{key} must be a non-negative safe integer"))));
                default
            }),
        };
        let number = |key: &str, default: f64| get(key).map_or(Some(default), Value::as_f64);
        let max_retries = safe_integer("maxRetries", 2, &mut errors);
        let overload_max_retries = safe_integer("overloadMaxRetries", 5, &mut errors);
        let delay = |key: &str, default: f64, errors: &mut Vec<ConfigError>| match number(key, default) {
            Some(ms) if (0.0..=MAX_DELAY_MS).contains(&ms) => ms,
            _ => {
                errors.push(ConfigError::new(key, error(format!("{key} must be between 0 and 2147483647"))));
                default
            }
        };
        let initial_delay_ms = delay("initialDelayMs", 500.0, &mut errors);
        let overload_initial_delay_ms = delay("overloadInitialDelayMs", 2000.0, &mut errors);
        let max_delay_ms = match number("maxDelayMs", 10_000.0) {
            Some(ms) if ms >= initial_delay_ms && ms >= overload_initial_delay_ms && ms <= MAX_DELAY_MS => ms,
            _ => {
                errors.push(ConfigError::new(
                    "maxDelayMs",
                    error("maxDelayMs must be at least both initial delays and at most 2147483647"),
                ));
                10_000.0
            }
        };
        let jitter_ratio = match number("jitterRatio", 0.1) {
            Some(ratio) if (0.0..=1.0).contains(&ratio) => ratio,
            _ => {
                errors.push(ConfigError::new("jitterRatio", error("jitterRatio must be between 0 and 1")));
                0.1
            }
        };
        let resume_max_age_ms = safe_integer("resumeMaxAgeMs", 86_400_000, &mut errors) as f64;
        let resume_prompt = match get("resumePrompt") {
            None => DEFAULT_RESUME_PROMPT.to_owned(),
            Some(Value::String(prompt)) if !prompt.trim().is_empty() => prompt.clone(),
            Some(_) => {
                errors.push(ConfigError::new("resumePrompt", error("resumePrompt must not be empty")));
                DEFAULT_RESUME_PROMPT.to_owned()
            }
        };
        let list = |key: &str, upper: bool, default: &[&str], errors: &mut Vec<ConfigError>| match get(key) {
            None => default.iter().map(|item| (*item).to_owned()).collect(),
            Some(value) => match value.as_array().and_then(|items| normalise(items, upper)) {
                Some(items) => items,
                None => {
                    errors.push(ConfigError::new(key, error(format!("{key} must be a list of strings"))));
                    Vec::new()
                }
            },
        };
        let retryable_codes = list("retryableCodes", true, &DEFAULT_CODES, &mut errors);
        if max_retries > 0 && retryable_codes.is_empty() && get("retryableCodes").is_some_and(Value::is_array) {
            errors.push(ConfigError::new(
                "retryableCodes",
                error("retryableCodes must not be empty when retries are enabled"),
            ));
        }
        let providers = list("providers", false, &[], &mut errors);
        let exclude_providers = list("excludeProviders", false, &[], &mut errors);
        let flag = |key: &str, default: bool, errors: &mut Vec<ConfigError>| match get(key) {
            None => default,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => {
                errors.push(ConfigError::new(key, error(format!("{key} must be true or false"))));
                default
            }
        };
        let respect_retry_after = flag("respectRetryAfter", true, &mut errors);
        let resume_interrupted = flag("resumeInterrupted", true, &mut errors);
        let resume_disposed = flag("resumeDisposed", false, &mut errors);
        for key in object.keys().filter(|key| !KEYS.contains(&key.as_str())) {
            errors.push(ConfigError::new(key.as_str(), error(format!("unknown key \"{key}\""))));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(FallbackConfig {
            max_retries,
            overload_max_retries,
            retryable_codes,
            initial_delay_ms,
            overload_initial_delay_ms,
            max_delay_ms,
            jitter_ratio,
            providers,
            exclude_providers,
            respect_retry_after,
            resume_interrupted,
            resume_disposed,
            resume_max_age_ms,
            resume_prompt,
        })
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
        assert_eq!(config.retryable_codes, DEFAULT_CODES);
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
