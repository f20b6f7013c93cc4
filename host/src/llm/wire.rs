//! What a route adds to each chat-completion request beyond the conversation: thinking,
//! reasoning effort, the output limit and usage reporting, in DeepSeek's dialect.
//!
//! A provider row may set `thinking`, `reasoningEffort`, `maxTokens` and `includeUsage`; a route
//! sends only what its row asks for — except the `deepseek-official` route, which gets DeepSeek
//! Harness's defaults for what its row leaves unset (effort `high`, or `off` when thinking is
//! disabled; 256000 output tokens; usage reported) and its attribution headers. The effective
//! effort and limit are recorded in `request/header`, with `adapterDefaults` marking the ones that
//! came from those defaults, as the reference records them.

use dsh_abi::config::{Key, Kind, Row, MAX_SAFE_INTEGER};
use serde_json::{json, Map, Value};

/// The route whose requests DeepSeek Harness's own adapter sends.
pub const DEEPSEEK_ROUTE: &str = "deepseek-official";
/// The reference's output limit for the DeepSeek route.
pub const DEEPSEEK_MAX_TOKENS: u64 = 256_000;

/// The provider-row keys this module owns (every provider schema lists them).
pub const THINKING: Key = Key::new("thinking", Kind::Choice(&["enabled", "disabled"]), "", "send thinking on or off");
pub const REASONING_EFFORT: Key = Key::new(
    "reasoningEffort",
    Kind::Choice(&["off", "low", "high", "max"]),
    "",
    "the effort asked for; off sends thinking disabled (deepseek-official: high)",
);
pub const MAX_TOKENS: Key =
    Key::new("maxTokens", Kind::integer(1, MAX_SAFE_INTEGER), "", "the output limit (deepseek-official: 256000)");
pub const INCLUDE_USAGE: Key =
    Key::new("includeUsage", Kind::Flag, "", "ask the stream to report token usage (deepseek-official: true)");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    Enabled,
    Disabled,
}

impl Thinking {
    fn as_str(self) -> &'static str {
        match self {
            Thinking::Enabled => "enabled",
            Thinking::Disabled => "disabled",
        }
    }
}

/// DeepSeek's effort levels; `off` is sent as thinking disabled, never as an effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Off,
    Low,
    High,
    Max,
}

impl Effort {
    fn as_str(self) -> &'static str {
        match self {
            Effort::Off => "off",
            Effort::Low => "low",
            Effort::High => "high",
            Effort::Max => "max",
        }
    }
}

/// A route's resolved request options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireOptions {
    /// The row's `thinking`, sent when no effort decides it.
    pub thinking: Option<Thinking>,
    pub effort: Option<Effort>,
    /// The effort is the route's default, not the row's.
    pub effort_defaulted: bool,
    pub max_tokens: Option<u64>,
    pub max_tokens_defaulted: bool,
    /// Ask for `stream_options.include_usage`.
    pub include_usage: bool,
    /// Send DeepSeek Harness's attribution headers (user and session ids).
    pub attribution: bool,
}

/// Reads the wire keys of a provider row for the route `provider`, with every problem noted.
pub fn parse(provider: &str, row: &mut Row<'_>) -> WireOptions {
    let thinking = row.text(THINKING.name).map(|text| match text.as_str() {
        "disabled" => Thinking::Disabled,
        _ => Thinking::Enabled,
    });
    let effort = row.text(REASONING_EFFORT.name).map(|text| match text.as_str() {
        "off" => Effort::Off,
        "low" => Effort::Low,
        "max" => Effort::Max,
        _ => Effort::High,
    });
    if thinking == Some(Thinking::Disabled) && effort.is_some_and(|effort| effort != Effort::Off) {
        row.refuse(REASONING_EFFORT.name, "only \"off\" can be configured when thinking is disabled");
    }
    let max_tokens = row.value(MAX_TOKENS.name).and_then(|value| value.as_u64());
    let include_usage = row.value(INCLUDE_USAGE.name).and_then(|value| value.as_bool());
    let deepseek = provider == DEEPSEEK_ROUTE;
    let default_effort = match thinking {
        Some(Thinking::Disabled) => Effort::Off,
        _ => Effort::High,
    };
    WireOptions {
        thinking,
        effort: effort.or(deepseek.then_some(default_effort)),
        effort_defaulted: deepseek && effort.is_none(),
        max_tokens: max_tokens.or(deepseek.then_some(DEEPSEEK_MAX_TOKENS)),
        max_tokens_defaulted: deepseek && max_tokens.is_none(),
        include_usage: include_usage.unwrap_or(deepseek),
        attribution: deepseek,
    }
}

impl WireOptions {
    /// Adds the options to a request body that already holds `model`, `messages` and `stream`.
    pub fn extend_body(&self, body: &mut Map<String, Value>) {
        if self.include_usage {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        let (thinking, effort) = match self.effort {
            Some(Effort::Off) => (Some(Thinking::Disabled), None),
            Some(effort) => (Some(Thinking::Enabled), Some(effort)),
            None => (self.thinking, None),
        };
        if let Some(thinking) = thinking {
            body.insert("thinking".into(), json!({"type": thinking.as_str()}));
        }
        if let Some(effort) = effort {
            body.insert("reasoning_effort".into(), Value::from(effort.as_str()));
        }
        if let Some(tokens) = self.max_tokens {
            body.insert("max_tokens".into(), Value::from(tokens));
        }
    }

    /// Adds `maxTokens` and `reasoningEffort` to a `request/header` config; returns the
    /// header's `adapterDefaults`, when any option came from the route's defaults.
    pub fn extend_header_config(&self, config: &mut Map<String, Value>) -> Option<Value> {
        if let Some(tokens) = self.max_tokens {
            config.insert("maxTokens".into(), Value::from(tokens));
        }
        if let Some(effort) = self.effort {
            config.insert("reasoningEffort".into(), Value::from(effort.as_str()));
        }
        let mut defaults = Map::new();
        if self.effort_defaulted {
            defaults.insert("reasoningEffort".into(), Value::Bool(true));
        }
        if self.max_tokens_defaulted {
            defaults.insert("maxTokens".into(), Value::Bool(true));
        }
        (!defaults.is_empty()).then_some(Value::Object(defaults))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(provider: &str, config: Value) -> Result<WireOptions, Vec<String>> {
        let mut row = crate::llm::config::OPENAI.read(&config).unwrap();
        let options = parse(provider, &mut row);
        row.finish(options).map_err(|errors| errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect())
    }

    fn body(options: &WireOptions) -> Value {
        let mut body = Map::new();
        options.extend_body(&mut body);
        Value::Object(body)
    }

    #[test]
    fn the_deepseek_route_sends_the_reference_defaults() {
        let options = options(DEEPSEEK_ROUTE, json!({})).unwrap();
        assert_eq!(
            body(&options),
            json!({"stream_options": {"include_usage": true}, "thinking": {"type": "enabled"}, "reasoning_effort": "high", "max_tokens": 256000})
        );
        let mut config = Map::new();
        let defaults = options.extend_header_config(&mut config);
        assert_eq!(Value::Object(config), json!({"maxTokens": 256000, "reasoningEffort": "high"}));
        assert_eq!(defaults, Some(json!({"reasoningEffort": true, "maxTokens": true})));
        assert!(options.attribution);
    }

    #[test]
    fn another_route_sends_only_what_its_row_asks_for() {
        assert_eq!(body(&options("relay", json!({})).unwrap()), json!({}));
        let asked = options("relay", json!({"maxTokens": 4096, "includeUsage": true})).unwrap();
        assert_eq!(body(&asked), json!({"stream_options": {"include_usage": true}, "max_tokens": 4096}));
        let mut config = Map::new();
        assert_eq!(asked.extend_header_config(&mut config), None);
        assert!(!asked.attribution);
    }

    #[test]
    fn effort_off_or_disabled_thinking_turns_thinking_off() {
        let off = options(DEEPSEEK_ROUTE, json!({"reasoningEffort": "off"})).unwrap();
        assert_eq!(body(&off)["thinking"], json!({"type": "disabled"}));
        assert!(body(&off).get("reasoning_effort").is_none());
        let disabled = options(DEEPSEEK_ROUTE, json!({"thinking": "disabled", "maxTokens": 8})).unwrap();
        assert_eq!(body(&disabled)["thinking"], json!({"type": "disabled"}));
        let mut config = Map::new();
        assert_eq!(disabled.extend_header_config(&mut config), Some(json!({"reasoningEffort": true})));
        assert_eq!(config["reasoningEffort"], "off");
        let max = options("relay", json!({"reasoningEffort": "max"})).unwrap();
        assert_eq!(body(&max), json!({"thinking": {"type": "enabled"}, "reasoning_effort": "max"}));
    }

    #[test]
    fn bad_values_are_named() {
        let errors = options(
            "relay",
            json!({"thinking": "on", "reasoningEffort": "medium", "maxTokens": 1.5, "includeUsage": "yes"}),
        )
        .unwrap_err();
        assert_eq!(
            errors,
            [
                "thinking: must be \"enabled\" or \"disabled\", got \"on\"",
                "reasoningEffort: must be one of \"off\", \"low\", \"high\", or \"max\", got \"medium\"",
                "maxTokens: must be an integer from 1 to 9007199254740991, got 1.5",
                "includeUsage: must be true or false, got \"yes\"",
            ]
        );
        let errors = options("relay", json!({"thinking": "disabled", "reasoningEffort": "low"})).unwrap_err();
        assert_eq!(errors, ["reasoningEffort: only \"off\" can be configured when thinking is disabled"]);
    }
}
