//! The `agent` row: which provider route the agent's turns use, and optionally a model override
//! and a system prompt (DeepSeek Harness's default one when unset; `""` sends none).

use dsh_abi::config::{Key, Kind, Schema};
use dsh_abi::ConfigError;
use serde_json::Value;

use crate::llm::config::{required_text, PROVIDER};
use crate::profile::patch::Composition;
use dsh_session::meta::RunOverrides;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    pub row_id: String,
    /// The route its turns use.
    pub provider: String,
    /// Overrides the route's model.
    pub model: Option<String>,
    /// The system message of every request; `None` sends none.
    pub system: Option<String>,
    /// The most steps (model requests answered) one turn may take.
    pub max_steps: u64,
    /// The most tool calls of one step that run at once.
    pub max_parallel_tools: usize,
}

/// The system prompt when the row sets none: DeepSeek Harness's, word for word.
pub const DEFAULT_SYSTEM: &str = "You are an AI agent powered by DeepSeek Harness.";

/// The agent row's keys.
pub const AGENT: Schema = Schema::row(
    "agent",
    &[
        PROVIDER,
        Key::new("model", Kind::Text, "", "overrides the route's model"),
        Key::new("system", Kind::String, "", "the system prompt; \"\" sends none (default: DeepSeek Harness's)")
            .refused_as("must be a string (\"\" sends no system message)"),
        Key::new("maxSteps", Kind::integer(1, 10_000), "50", "the most steps one turn may take")
            .refused_as("must be a whole number from 1 through 10000"),
        Key::new("maxParallelTools", Kind::integer(1, 1_000), "10", "the most tool calls of one step run at once")
            .refused_as("must be a whole number from 1 through 1000"),
    ],
);

/// `{provider, model?, system?}`; unknown keys are refused.
pub fn parse_agent(row_id: &str, config: &Value) -> Result<AgentConfig, Vec<ConfigError>> {
    let mut row = AGENT.read(config)?;
    let provider = required_text(&mut row, "provider");
    let model = row.text("model");
    let system = match row.is_set("system") {
        false => Some(DEFAULT_SYSTEM.to_owned()),
        true => row.text("system").filter(|text| !text.is_empty()),
    };
    let max_steps = row.integer("maxSteps");
    let max_parallel_tools = row.integer("maxParallelTools") as usize;
    row.finish(AgentConfig { row_id: row_id.to_owned(), provider, model, system, max_steps, max_parallel_tools })
}

/// Sets what `--provider`, `--model` and `--system` give on every enabled agent row, after every
/// layer; the checks then hold them to the agent row's keys, naming the option (typed now, or
/// recorded with the session) in a message about one.
pub fn apply_overrides(composition: &mut Composition, overrides: &RunOverrides, typed: &RunOverrides) {
    for ((key, value), (_, given)) in overrides.fields().into_iter().zip(typed.fields()) {
        let Some(value) = value else { continue };
        let source = match given {
            Some(_) => format!("the command line (--{key})"),
            None => format!("the session's own --{key} (given when it was created)"),
        };
        composition.set_enabled_config("agent", key, &Value::from(value.as_str()), &source);
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
        assert_eq!(agent.system.as_deref(), Some(DEFAULT_SYSTEM));
        assert_eq!((agent.max_steps, agent.max_parallel_tools), (50, 10));
        let errors = parse_agent("agent", &json!({"provider": "p", "maxSteps": 0})).unwrap_err();
        assert_eq!(errors[0].message, "must be a whole number from 1 through 10000");
    }

    #[test]
    fn an_empty_system_prompt_sends_none() {
        let agent = parse_agent("agent", &json!({"provider": "p", "system": ""})).unwrap();
        assert_eq!(agent.system, None);
        let errors = parse_agent("agent", &json!({"provider": "p", "system": 1})).unwrap_err();
        assert_eq!(errors[0].message, "must be a string (\"\" sends no system message)");
    }

    #[test]
    fn unknown_keys_and_a_missing_provider_are_refused() {
        let errors = parse_agent("agent", &json!({"tools": []})).unwrap_err();
        let shown: Vec<String> = errors.iter().map(|error| format!("{}: {}", error.path, error.message)).collect();
        assert_eq!(shown, ["tools: unknown key \"tools\"", "provider: is required"]);
    }
}
