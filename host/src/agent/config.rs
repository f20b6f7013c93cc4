//! The `agent` row: which provider route the agent's turns use, and optionally a model override
//! and a system prompt.

use dsh_abi::ConfigError;
use serde_json::{Map, Value};

use crate::llm::config::{config_object, required_string, unknown_keys};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub row_id: String,
    /// The route its turns use.
    pub provider: String,
    /// Overrides the route's model.
    pub model: Option<String>,
    pub system: Option<String>,
}

const AGENT_KEYS: [&str; 3] = ["provider", "model", "system"];

/// `{provider, model?, system?}`; unknown keys are refused.
pub fn parse_agent(row_id: &str, config: &Value) -> Result<AgentConfig, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let empty = Map::new();
    let object = config_object(config, &empty, &mut errors);
    unknown_keys(object, &AGENT_KEYS, &mut errors);
    let provider = required_string(object, "provider", &mut errors);
    let mut optional = |key: &str| match object.get(key) {
        None => None,
        Some(Value::String(text)) if !text.is_empty() => Some(text.clone()),
        Some(_) => {
            errors.push(ConfigError::new(key, "must be a non-empty string"));
            None
        }
    };
    let model = optional("model");
    let system = optional("system");
    if errors.is_empty() {
        Ok(AgentConfig { row_id: row_id.to_owned(), provider, model, system })
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_agent_row_names_its_route() {
        let agent = parse_agent("agent", &json!({"provider": "deepseek-official"})).unwrap();
        assert_eq!(agent.provider, "deepseek-official");
        assert_eq!(agent.model, None);
    }

    #[test]
    fn unknown_keys_and_a_missing_provider_are_refused() {
        let errors = parse_agent("agent", &json!({"tools": []})).unwrap_err();
        let shown: Vec<String> = errors.iter().map(|error| format!("{}: {}", error.path, error.message)).collect();
        assert_eq!(shown, ["tools: unknown key \"tools\"", "provider: is required"]);
    }
}
