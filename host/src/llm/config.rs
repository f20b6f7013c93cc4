//! Provider rows: the configs of the built-in `llm-openai` service (an OpenAI-compatible endpoint)
//! and `llm-mock` (a route served by the in-process mock server), validated with every problem
//! reported, each message naming its key path.

use std::time::Duration;

use dsh_abi::{ConfigError, RetryPolicy};
use serde_json::{Map, Value};

use super::mock::{self, MockStep};
use super::policy;
use super::wire::{self, WireOptions, WIRE_KEYS};
use crate::problem::nest;

pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// The whole attempt — connecting, waiting, streaming — ends by then: 30 minutes, longer than any
/// answer a model streams, shorter than forever (keep-alive comments cannot extend it).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 1_800_000;

/// Where a route's requests go.
#[derive(Debug, Clone, PartialEq)]
pub enum Endpoint {
    /// An OpenAI-compatible base URL (`…/v1`); requests go to `<baseUrl>/chat/completions`.
    Url(String),
    /// The in-process mock server, started with this script.
    Mock(Vec<MockStep>),
}

/// One provider route.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    pub row_id: String,
    /// The route name, e.g. `deepseek-official`.
    pub provider: String,
    pub model: String,
    pub endpoint: Endpoint,
    /// The environment variable holding the API key, read at request time.
    pub api_key_env: Option<String>,
    pub headers: Vec<(String, String)>,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    /// The deadline of a whole attempt.
    pub request_timeout: Duration,
    pub retry_policy: RetryPolicy,
    /// Thinking, effort, output limit and usage reporting (see [`wire`]).
    pub wire: WireOptions,
}

/// The keys every provider row takes (besides [`WIRE_KEYS`]).
const ROUTE_KEYS: [&str; 6] =
    ["provider", "model", "connectTimeoutMs", "idleTimeoutMs", "requestTimeoutMs", "retryPolicy"];
const OPENAI_KEYS: [&str; 3] = ["baseUrl", "apiKeyEnv", "headers"];
const MOCK_KEYS: [&str; 1] = ["script"];

/// Refuses the keys of a provider row that are neither shared by every route nor in `own`.
fn unknown_route_keys(object: &Map<String, Value>, own: &[&str], errors: &mut Vec<ConfigError>) {
    let allowed: Vec<&str> = ROUTE_KEYS.iter().chain(&WIRE_KEYS).chain(own).copied().collect();
    unknown_keys(object, &allowed, errors);
}

/// A built-in row's config as an object (`null`, no config, is an empty one); anything else is
/// the error `must be a mapping`.
pub(crate) fn config_object<'a>(
    config: &'a Value,
    empty: &'a Map<String, Value>,
    errors: &mut Vec<ConfigError>,
) -> &'a Map<String, Value> {
    match config {
        Value::Object(object) => object,
        Value::Null => empty,
        _ => {
            errors.push(ConfigError::new("", "must be a mapping"));
            empty
        }
    }
}

pub(crate) fn unknown_keys(object: &Map<String, Value>, allowed: &[&str], errors: &mut Vec<ConfigError>) {
    for key in object.keys().filter(|key| !allowed.contains(&key.as_str())) {
        errors.push(ConfigError::new(key.as_str(), format!("unknown key \"{key}\"")));
    }
}

pub(crate) fn required_string(object: &Map<String, Value>, key: &str, errors: &mut Vec<ConfigError>) -> String {
    match object.get(key) {
        Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
        Some(_) => {
            errors.push(ConfigError::new(key, "must be a non-empty string"));
            String::new()
        }
        None => {
            errors.push(ConfigError::new(key, "is required"));
            String::new()
        }
    }
}

fn timeout(object: &Map<String, Value>, key: &str, default_ms: u64, errors: &mut Vec<ConfigError>) -> Duration {
    let Some(value) = object.get(key) else {
        return Duration::from_millis(default_ms);
    };
    match dsh_abi::js::as_safe_u64(value) {
        Some(ms) if ms > 0 && ms <= dsh_abi::retry::MAX_DELAY_MS_INTEGER => Duration::from_millis(ms),
        _ => {
            errors.push(ConfigError::new(
                key,
                "must be a positive integer number of milliseconds no greater than 2147483647",
            ));
            Duration::from_millis(default_ms)
        }
    }
}

fn common(
    row_id: &str,
    object: &Map<String, Value>,
    endpoint: Endpoint,
    errors: &mut Vec<ConfigError>,
) -> ProviderConfig {
    let provider = required_string(object, "provider", errors);
    let model = required_string(object, "model", errors);
    let connect_timeout = timeout(object, "connectTimeoutMs", DEFAULT_CONNECT_TIMEOUT_MS, errors);
    let idle_timeout = timeout(object, "idleTimeoutMs", DEFAULT_IDLE_TIMEOUT_MS, errors);
    let request_timeout = timeout(object, "requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS, errors);
    let retry_policy = policy::resolve(object.get("retryPolicy")).unwrap_or_else(|found| {
        errors.extend(nest("retryPolicy", found));
        policy::default_policy()
    });
    let wire = wire::parse(&provider, object, errors);
    ProviderConfig {
        row_id: row_id.to_owned(),
        provider,
        model,
        endpoint,
        api_key_env: None,
        headers: Vec::new(),
        connect_timeout,
        idle_timeout,
        request_timeout,
        retry_policy,
        wire,
    }
}

/// An `llm-openai` row: `{provider, baseUrl, model, apiKeyEnv?, headers?, connectTimeoutMs?,
/// idleTimeoutMs?, retryPolicy?}`.
pub fn parse_openai(row_id: &str, config: &Value) -> Result<ProviderConfig, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let empty = Map::new();
    let object = config_object(config, &empty, &mut errors);
    unknown_route_keys(object, &OPENAI_KEYS, &mut errors);
    let base_url = required_string(object, "baseUrl", &mut errors);
    if !base_url.is_empty() {
        match reqwest::Url::parse(&base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => errors.push(ConfigError::new("baseUrl", format!("must be an http or https URL, got {base_url:?}"))),
        }
    }
    let mut provider = common(row_id, object, Endpoint::Url(base_url.trim_end_matches('/').to_owned()), &mut errors);
    provider.api_key_env = match object.get("apiKeyEnv") {
        None => None,
        Some(Value::String(name)) if is_env_name(name) => Some(name.clone()),
        Some(other) => {
            errors.push(ConfigError::new(
                "apiKeyEnv",
                format!("must name an environment variable (letters, digits, _), got {other}"),
            ));
            None
        }
    };
    provider.headers = match object.get("headers") {
        None => Vec::new(),
        Some(Value::Object(headers)) => headers
            .iter()
            .filter_map(|(name, value)| match value {
                Value::String(text) if reqwest::header::HeaderValue::from_str(text).is_ok() => {
                    Some((name.clone(), text.clone()))
                }
                _ => {
                    errors.push(ConfigError::new(
                        format!("headers.{name}"),
                        "must be a header value (a string of visible characters)",
                    ));
                    None
                }
            })
            .collect(),
        Some(_) => {
            errors.push(ConfigError::new("headers", "must be a mapping of header names to values"));
            Vec::new()
        }
    };
    for (name, _) in &provider.headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            errors.push(ConfigError::new("headers", format!("{name:?} is not a valid header name")));
        }
    }
    if errors.is_empty() {
        Ok(provider)
    } else {
        Err(errors)
    }
}

/// An `llm-mock` row: `{provider, model, script, connectTimeoutMs?, idleTimeoutMs?,
/// retryPolicy?}`; the route is served by an in-process mock server running `script`.
pub fn parse_mock(row_id: &str, config: &Value) -> Result<ProviderConfig, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let empty = Map::new();
    let object = config_object(config, &empty, &mut errors);
    unknown_route_keys(object, &MOCK_KEYS, &mut errors);
    let script = match object.get("script") {
        None => {
            errors.push(ConfigError::new("script", "is required"));
            Vec::new()
        }
        Some(script) => mock::parse_script(script).unwrap_or_else(|found| {
            errors.extend(nest("script", found));
            Vec::new()
        }),
    };
    let provider = common(row_id, object, Endpoint::Mock(script), &mut errors);
    if errors.is_empty() {
        Ok(provider)
    } else {
        Err(errors)
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown(errors: Vec<ConfigError>) -> Vec<String> {
        errors.iter().map(|error| format!("{}: {}", error.path, error.message)).collect()
    }

    #[test]
    fn the_base_bundle_provider_row_parses_with_defaults() {
        let config = json!({"provider": "deepseek-official", "baseUrl": "https://api.deepseek.com/v1/", "model": "deepseek-chat", "apiKeyEnv": "DEEPSEEK_API_KEY"});
        let provider = parse_openai("llm-deepseek", &config).unwrap();
        assert_eq!(provider.endpoint, Endpoint::Url("https://api.deepseek.com/v1".into()));
        assert_eq!(provider.api_key_env.as_deref(), Some("DEEPSEEK_API_KEY"));
        assert_eq!(provider.connect_timeout, Duration::from_secs(10));
        assert_eq!(provider.idle_timeout, Duration::from_secs(300));
        assert_eq!(provider.retry_policy, policy::default_policy());
    }

    #[test]
    fn every_problem_of_a_provider_row_is_reported() {
        let config = json!({"provider": "", "baseUrl": "ftp://x", "apiKeyEnv": "1BAD", "idleTimeoutMs": 0, "colour": "red", "retryPolicy": {"mode": "never"}});
        let errors = shown(parse_openai("llm", &config).unwrap_err());
        assert_eq!(
            errors,
            [
                "colour: unknown key \"colour\"",
                "baseUrl: must be an http or https URL, got \"ftp://x\"",
                "provider: must be a non-empty string",
                "model: is required",
                "idleTimeoutMs: must be a positive integer number of milliseconds no greater than 2147483647",
                "retryPolicy.mode: must be \"normal\" or \"always\"",
                "apiKeyEnv: must name an environment variable (letters, digits, _), got \"1BAD\"",
            ]
        );
    }

    #[test]
    fn a_mock_row_needs_a_valid_script() {
        let errors =
            parse_mock("llm-demo", &json!({"provider": "demo", "model": "m", "script": [{"status": 99}]})).unwrap_err();
        assert_eq!(shown(errors), ["script[1].status: must be an HTTP status from 100 through 599"]);
        let provider =
            parse_mock("llm-demo", &json!({"provider": "demo", "model": "m", "script": [{"ok": "hi"}]})).unwrap();
        assert!(matches!(provider.endpoint, Endpoint::Mock(ref script) if script.len() == 1));
    }
}
