//! Token usage, as each `assistant/message` records what its provider reported (`usage`:
//! `inputTokens`, `outputTokens`, and `cacheReadTokens` and `reasoningTokens` when reported),
//! added up over a turn or a session.

use serde_json::{json, Value};

use dsh_abi::events;

/// The tokens of the answers that reported usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input tokens not read from the provider's cache.
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub reasoning: u64,
    /// How many answers reported usage.
    pub answers: u64,
}

impl Tokens {
    /// Adds the `usage` of an `assistant/message`'s data, when it has one.
    pub fn add_message(&mut self, data: &Value) {
        if let Some(usage) = data.get("usage") {
            self.add_usage(usage);
        }
    }

    /// Adds one answer's recorded `usage` (an object; anything else is no report).
    fn add_usage(&mut self, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        self.input = self.input.saturating_add(count("inputTokens"));
        self.output = self.output.saturating_add(count("outputTokens"));
        self.cache_read = self.cache_read.saturating_add(count("cacheReadTokens"));
        self.reasoning = self.reasoning.saturating_add(count("reasoningTokens"));
        self.answers += 1;
    }

    /// Adds the `usage` of an `assistant/message`'s raw data, reading nothing else of it.
    pub fn add_message_data(&mut self, data: &str) {
        #[derive(serde::Deserialize)]
        struct UsageOnly {
            usage: Option<Value>,
        }
        if let Ok(UsageOnly { usage: Some(usage) }) = serde_json::from_str(data) {
            self.add_usage(&usage);
        }
    }

    /// The usage of the assistant messages among `lines` (whole event lines).
    pub fn of_lines<'a>(lines: impl IntoIterator<Item = &'a String>) -> Tokens {
        let mut tokens = Tokens::default();
        for line in lines {
            let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
            if event.get("type").and_then(Value::as_str) == Some(events::ASSISTANT_MESSAGE) {
                tokens.add_message(event.get("data").unwrap_or(&Value::Null));
            }
        }
        tokens
    }

    /// `812 in · 64 out (512 cache read · 20 reasoning)`; `None` when no answer reported usage.
    pub fn text(&self) -> Option<String> {
        if self.answers == 0 {
            return None;
        }
        let mut parts = Vec::new();
        if self.cache_read > 0 {
            parts.push(format!("{} cache read", self.cache_read));
        }
        if self.reasoning > 0 {
            parts.push(format!("{} reasoning", self.reasoning));
        }
        let details = if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(" · ")) };
        Some(format!("{} in · {} out{details}", self.input, self.output))
    }

    /// `{inputTokens, outputTokens, cacheReadTokens, reasoningTokens}`, or `null` when no answer
    /// reported usage.
    pub fn json(&self) -> Value {
        if self.answers == 0 {
            return Value::Null;
        }
        json!({
            "inputTokens": self.input,
            "outputTokens": self.output,
            "cacheReadTokens": self.cache_read,
            "reasoningTokens": self.reasoning,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_that_reported_usage_are_added_up_and_others_are_not_counted() {
        let mut tokens = Tokens::default();
        assert_eq!(tokens.text(), None);
        tokens.add_message(&json!({"usage": {"inputTokens": 300, "outputTokens": 20, "cacheReadTokens": 512}}));
        tokens.add_message(&json!({"usage": {"inputTokens": 12, "outputTokens": 44, "reasoningTokens": 20}}));
        tokens.add_message(&json!({"message": {}}));
        assert_eq!(tokens.answers, 2);
        assert_eq!(tokens.text().unwrap(), "312 in · 64 out (512 cache read · 20 reasoning)");
        assert_eq!(tokens.json()["outputTokens"], 64);
    }

    #[test]
    fn only_assistant_messages_of_the_lines_count() {
        let lines = [
            r#"{"type":"assistant/message","seq":3,"data":{"usage":{"inputTokens":5,"outputTokens":7}}}"#.to_owned(),
            r#"{"type":"user/message","seq":2,"data":{"usage":{"inputTokens":99,"outputTokens":99}}}"#.to_owned(),
            "not json".to_owned(),
        ];
        assert_eq!(Tokens::of_lines(&lines).text().unwrap(), "5 in · 7 out");
    }
}
