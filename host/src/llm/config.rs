//! Provider rows: the configs of the built-in `llm-openai` service (an OpenAI-compatible endpoint)
//! and `llm-mock` (a route served by the in-process mock server), validated with every problem
//! reported, each message naming its key path.

use std::time::Duration;

use dsh_abi::config::{Key, Kind, Row, Schema};
use dsh_abi::retry::MAX_DELAY_MS_INTEGER;
use dsh_abi::{ConfigError, RetryPolicy};
use serde_json::Value;

use super::mock::{self, MockStep};
use super::policy;
use super::wire::{self, WireOptions};
use crate::problem::nest;

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
    /// Headers whose values are read from environment variables at request time:
    /// `(header, variable)`.
    pub header_env: Vec<(String, String)>,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    /// The deadline of a whole attempt.
    pub request_timeout: Duration,
    pub retry_policy: RetryPolicy,
    /// Thinking, effort, output limit and usage reporting (see [`wire`]).
    pub wire: WireOptions,
    /// The most tokens a request to this route may hold, when the row says.
    pub context_window: Option<u64>,
    /// A gateway in front of the route may retry on its own ([`super::gateway`]); `false` when
    /// the row says its retries are off, so dsh says nothing of it.
    pub gateway_retries: bool,
}

const TIMEOUT: Kind = Kind::integer(1, MAX_DELAY_MS_INTEGER);
const TIMEOUT_RULE: &str = "must be a positive integer number of milliseconds no greater than 2147483647";

/// The route name every provider row gives (and the agent row names).
pub const PROVIDER: Key = Key::new("provider", Kind::Text, "", "the route's name, e.g. deepseek-official");
const MODEL: Key = Key::new("model", Kind::Text, "", "the model its requests ask for");
const CONNECT_TIMEOUT: Key =
    Key::new("connectTimeoutMs", TIMEOUT, "10000", "the deadline to connect, in ms").refused_as(TIMEOUT_RULE);
const IDLE_TIMEOUT: Key =
    Key::new("idleTimeoutMs", TIMEOUT, "300000", "the longest silence inside a stream, in ms").refused_as(TIMEOUT_RULE);
/// The whole attempt — connecting, waiting, streaming — ends by then: 30 minutes, longer than any
/// answer a model streams, shorter than forever (keep-alive comments cannot extend it).
const REQUEST_TIMEOUT: Key =
    Key::new("requestTimeoutMs", TIMEOUT, "1800000", "the deadline of a whole attempt, in ms").refused_as(TIMEOUT_RULE);
const RETRY_POLICY: Key = Key::new("retryPolicy", Kind::Any, "", "the route's retry policy (see llm-retry)");
/// What a failover row matches a request's size against.
const CONTEXT_WINDOW: Key = Key::new(
    "contextWindow",
    Kind::integer(1, dsh_abi::config::MAX_SAFE_INTEGER),
    "",
    "the most tokens a request to the route may hold (route-failover never sends a step to a smaller route)",
)
.refused_as("must be a positive whole number of tokens");

/// The keys of a provider row: its own, then those every route takes.
macro_rules! route_keys {
    ($($own:expr),* $(,)?) => {
        &[
            PROVIDER,
            MODEL,
            $($own,)*
            CONNECT_TIMEOUT,
            IDLE_TIMEOUT,
            REQUEST_TIMEOUT,
            RETRY_POLICY,
            CONTEXT_WINDOW,
            wire::THINKING,
            wire::REASONING_EFFORT,
            wire::MAX_TOKENS,
            wire::INCLUDE_USAGE,
        ]
    };
}

/// An `llm-openai` row: an OpenAI-compatible endpoint.
pub const OPENAI: Schema = Schema::row(
    "llm-openai",
    route_keys![
        Key::new("baseUrl", Kind::Text, "", "an http or https URL ending before /chat/completions"),
        Key::new("apiKeyEnv", Kind::Text, "", "the environment variable holding the API key"),
        Key::new("headers", HEADER_MAP, "{}", "extra request headers"),
        HEADER_ENV,
        Key::new(
            "gatewayRetries",
            Kind::Flag,
            "true",
            "whether a gateway in front of it retries on its own (false: its retries are off, dsh says nothing of it)"
        ),
    ],
);

/// A header's name, as the HTTP client takes it.
const HEADER_NAME: Kind =
    Kind::matching("a valid header name", |name| reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok());
/// A header's value, as the HTTP client takes it.
const HEADER_VALUE: Kind = Kind::matching("a header value (a string of visible characters)", |value| {
    reqwest::header::HeaderValue::from_str(value).is_ok()
});
/// The name of an environment variable.
pub(crate) const ENV_NAME: Kind = Kind::matching("a variable name (letters, digits, _)", is_env_name);

/// Headers and their values, as the HTTP client takes them.
pub(crate) const HEADER_MAP: Kind = Kind::map_of(&HEADER_NAME, &HEADER_VALUE);

/// Headers sent from the environment, so a credential header needs no value in a layer.
pub const HEADER_ENV: Key = Key::new(
    "headerEnv",
    Kind::map_of(&HEADER_NAME, &ENV_NAME),
    "{}",
    "{HEADER: VARIABLE}: headers whose values are read from environment variables when sent",
);

/// An `llm-mock` row: a route served by the in-process mock server.
pub const MOCK: Schema = Schema::row(
    "llm-mock",
    route_keys![Key::new("script", Kind::Any, "", "the steps the mock server answers, in order")],
);

/// The value of a key that has no default and must be given.
pub(crate) fn required_text(row: &mut Row<'_>, key: &str) -> String {
    if !row.is_set(key) {
        row.refuse(key, "is required");
    }
    row.text(key).unwrap_or_default()
}

fn timeout(row: &mut Row<'_>, key: &str) -> Duration {
    Duration::from_millis(row.integer(key))
}

fn common(row_id: &str, row: &mut Row<'_>, endpoint: Endpoint) -> ProviderConfig {
    let provider = required_text(row, "provider");
    let model = required_text(row, "model");
    let connect_timeout = timeout(row, "connectTimeoutMs");
    let idle_timeout = timeout(row, "idleTimeoutMs");
    let request_timeout = timeout(row, "requestTimeoutMs");
    let retry_policy = policy::resolve(row.given("retryPolicy")).unwrap_or_else(|found| {
        for error in found {
            row.refuse(error.path.as_str(), error.message);
        }
        policy::default_policy()
    });
    let wire = wire::parse(&provider, row);
    let context_window = row.value("contextWindow").and_then(|tokens| dsh_abi::js::as_safe_u64(&tokens));
    ProviderConfig {
        row_id: row_id.to_owned(),
        provider,
        model,
        endpoint,
        api_key_env: None,
        headers: Vec::new(),
        header_env: Vec::new(),
        connect_timeout,
        idle_timeout,
        request_timeout,
        retry_policy,
        wire,
        context_window,
        gateway_retries: true,
    }
}

/// An `llm-openai` row: `{provider, baseUrl, model, apiKeyEnv?, headers?, connectTimeoutMs?,
/// idleTimeoutMs?, requestTimeoutMs?, retryPolicy?}` and the wire keys.
pub fn parse_openai(row_id: &str, config: &Value) -> Result<ProviderConfig, Vec<ConfigError>> {
    let mut row = OPENAI.read(config)?;
    let base_url = required_text(&mut row, "baseUrl");
    if !base_url.is_empty() {
        match reqwest::Url::parse(&base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => row.refuse("baseUrl", format!("must be an http or https URL, got {base_url:?}")),
        }
    }
    let mut provider = common(row_id, &mut row, Endpoint::Url(base_url.trim_end_matches('/').to_owned()));
    provider.api_key_env = row.text("apiKeyEnv");
    if let Some(name) = provider.api_key_env.as_ref().filter(|name| !is_env_name(name)) {
        row.refuse("apiKeyEnv", format!("must name an environment variable (letters, digits, _), got \"{name}\""));
    }
    provider.headers = headers(&mut row);
    provider.header_env = header_env(&mut row);
    provider.gateway_retries = row.flag("gatewayRetries");
    row.finish(provider)
}

/// The row's `headers` mapping, each a valid header name and value.
pub(crate) fn headers(row: &mut Row<'_>) -> Vec<(String, String)> {
    row.string_entries("headers")
}

/// The row's `headerEnv` mapping, each a valid header name and an environment variable's name.
pub(crate) fn header_env(row: &mut Row<'_>) -> Vec<(String, String)> {
    row.string_entries(HEADER_ENV.name)
}

/// An `llm-mock` row: `{provider, model, script, …}`; the route is served by an in-process mock
/// server running `script`.
pub fn parse_mock(row_id: &str, config: &Value) -> Result<ProviderConfig, Vec<ConfigError>> {
    let mut row = MOCK.read(config)?;
    let script = match row.given("script").cloned() {
        None => {
            row.refuse("script", "is required");
            Vec::new()
        }
        Some(script) => mock::parse_script(&script).unwrap_or_else(|found| {
            for error in nest("script", found) {
                row.refuse(error.path.as_str(), error.message);
            }
            Vec::new()
        }),
    };
    let provider = common(row_id, &mut row, Endpoint::Mock(script));
    row.finish(provider)
}

pub(crate) fn is_env_name(name: &str) -> bool {
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
    fn the_provider_schemas_are_well_formed() {
        assert_eq!((OPENAI.faults(), MOCK.faults()), (vec![], vec![]));
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
                "provider: must be a non-empty string, got \"\"",
                "model: is required",
                "idleTimeoutMs: must be a positive integer number of milliseconds no greater than 2147483647",
                "retryPolicy.mode: must be \"normal\" or \"always\"",
                "apiKeyEnv: must name an environment variable (letters, digits, _), got \"1BAD\"",
            ]
        );
    }

    #[test]
    fn a_context_window_is_a_positive_whole_number_of_tokens() {
        let row = |window: Value| {
            let config =
                serde_json::json!({"provider": "p", "model": "m", "script": [{"ok": "x"}], "contextWindow": window});
            parse_mock("r", &config).map(|provider| provider.context_window).map_err(shown)
        };
        assert_eq!(row(Value::from(128_000)), Ok(Some(128_000)));
        for bad in [Value::from(0), Value::from(-1), Value::from(1.5), Value::from("big")] {
            assert_eq!(row(bad), Err(vec!["contextWindow: must be a positive whole number of tokens".to_owned()]));
        }
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
