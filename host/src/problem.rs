//! Configuration problems: the one type every validator's findings become — built-in rows and
//! plugins alike — with where each one is (file, row, key path) and one way to print it:
//! `profiles/web/cordis.patch.yml: row "relay-retry": config.schedule[2]: must be a non-negative
//! integer, got -5`, and on a second line, for a setting carried over from DeepSeek Harness, where
//! it lives now.

use std::fmt;

use dsh_abi::ConfigError;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The file to edit, as the user knows it (`$DSH_HOME/…`).
    pub file: Option<String>,
    /// The row id.
    pub row: Option<String>,
    /// The key path, e.g. `config.retryPolicy.backoff.jitterRatio`.
    pub key: Option<String>,
    pub message: String,
    /// Where the setting lives now, for settings carried over from DeepSeek Harness.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Problem {
    /// A problem that belongs to no file or row.
    pub fn general(message: impl Into<String>) -> Self {
        Problem { file: None, row: None, key: None, message: message.into(), hint: None }
    }

    /// A problem with a row as a whole (its package, its library, its place).
    pub fn row(file: Option<&str>, row: &str, message: impl Into<String>) -> Self {
        Problem {
            file: file.map(str::to_owned),
            row: Some(row.to_owned()),
            key: None,
            message: message.into(),
            hint: None,
        }
    }

    /// A validator's finding about a row's config: `error.path` is relative to the config (`""`
    /// for the config as a whole).
    pub fn config(file: Option<&str>, row: &str, error: &ConfigError) -> Self {
        Problem {
            file: file.map(str::to_owned),
            row: Some(row.to_owned()),
            key: Some(config_key(error.path.as_str())),
            message: error.message.to_string(),
            hint: None,
        }
    }

    /// Adds where the setting lives now.
    pub fn with_hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }

    /// A finding about a key of a file that is not a row (a mock script).
    pub fn in_file(file: &str, key: &str, message: impl Into<String>) -> Self {
        Problem {
            file: Some(file.to_owned()),
            row: None,
            key: Some(key.to_owned()),
            message: message.into(),
            hint: None,
        }
    }
}

/// `config`, `config.retryPolicy.mode`, `config.script[1].status`.
fn config_key(path: &str) -> String {
    match path {
        "" => "config".to_owned(),
        _ if path.starts_with('[') => format!("config{path}"),
        _ => format!("config.{path}"),
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if let Some(row) = &self.row {
            write!(f, "row {}: ", dsh_abi::js::to_string(row))?;
        }
        if let Some(key) = self.key.as_deref().filter(|key| !key.is_empty()) {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Prefixes every error's path with `prefix` (`retryPolicy` + `mode` = `retryPolicy.mode`).
pub fn nest(prefix: &str, errors: Vec<ConfigError>) -> impl Iterator<Item = ConfigError> + '_ {
    errors.into_iter().map(move |error| {
        let path = error.path.as_str();
        let nested = match path {
            "" => prefix.to_owned(),
            _ if path.starts_with('[') => format!("{prefix}{path}"),
            _ => format!("{prefix}.{path}"),
        };
        ConfigError::new(nested, error.message.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_names_its_file_row_and_key() {
        let error = ConfigError::new("schedule[2]", "must be a non-negative integer, got -5");
        assert_eq!(
            Problem::config(Some("profiles/web/cordis.patch.yml"), "relay-retry", &error).to_string(),
            "profiles/web/cordis.patch.yml: row \"relay-retry\": config.schedule[2]: must be a non-negative integer, got -5"
        );
        assert_eq!(
            Problem::config(None, "llm-retry", &ConfigError::new("", "llm-retry: configuration must be an object"))
                .to_string(),
            "row \"llm-retry\": config: llm-retry: configuration must be an object"
        );
        assert_eq!(Problem::general("no enabled agent row").to_string(), "no enabled agent row");
    }

    #[test]
    fn nested_paths_join_keys_and_indices() {
        let nested: Vec<String> = nest(
            "script",
            vec![ConfigError::new("[1].status", "m"), ConfigError::new("", "n"), ConfigError::new("mode", "o")],
        )
        .map(|error| error.path.into_string())
        .collect();
        assert_eq!(nested, ["script[1].status", "script", "script.mode"]);
    }
}
