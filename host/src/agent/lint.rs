//! Settings that are valid but do nothing, which `dsh config check` warns about: a provider's
//! `retryPolicy` while no enabled row runs `llm-retry` (which applies it), a `providers` or
//! `excludeProviders` filter naming no route, and a failure code no part of dsh produces (codes
//! are case-sensitive: `server` never matches).

use serde_json::{Map, Value};

use crate::llm::classify::ADAPTER_CODES;
use crate::problem::Problem;
use crate::profile::patch::Composition;

/// Codes the host produces besides the adapter's.
const HOST_CODES: [&str; 3] = ["NO_ADAPTER", "ABORTED", "INVARIANT"];

/// Whether a code, or a prefix rule such as `HTTP_*`, can match a failure dsh produces (a bare
/// `*` is left to the plugin that reads it).
fn is_known_code(code: &str) -> bool {
    if let Some(prefix) = code.strip_suffix('*') {
        return prefix.is_empty()
            || ADAPTER_CODES.iter().map(|(known, _)| *known).chain(HOST_CODES).any(|known| known.starts_with(prefix))
            || "HTTP_".starts_with(prefix)
            || prefix.starts_with("HTTP_");
    }
    ADAPTER_CODES.iter().any(|(known, _)| *known == code)
        || HOST_CODES.contains(&code)
        || code
            .strip_prefix("HTTP_")
            .is_some_and(|status| status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()))
}

/// Every setting of the enabled rows of `composition` that has no effect; `routes` are the
/// routes the provider rows serve.
pub fn no_effect(composition: &Composition, routes: &[String]) -> Vec<Problem> {
    let rows = composition.enabled_rows();
    let package = |row: &Map<String, Value>| row.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let id = |row: &Map<String, Value>| row.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
    let llm_retry_runs = rows.iter().any(|row| package(row) == "llm-retry");
    let mut warnings = Vec::new();
    for row in &rows {
        let row_id = id(row);
        let layer = composition.config_layer(&row_id).map(str::to_owned);
        let warn = |key: String, message: String| Problem {
            file: layer.clone(),
            row: Some(row_id.clone()),
            key: Some(key),
            message,
            hint: None,
        };
        let Some(Value::Object(config)) = row.get("config") else { continue };
        if matches!(package(row).as_str(), "llm-openai" | "llm-mock")
            && config.contains_key("retryPolicy")
            && !llm_retry_runs
        {
            warnings.push(warn(
                "config.retryPolicy".to_owned(),
                "has no effect: no enabled row runs llm-retry, the executor that applies it".to_owned(),
            ));
        }
        for key in ["providers", "excludeProviders"] {
            let Some(Value::Array(names)) = config.get(key) else { continue };
            for (index, name) in names.iter().enumerate() {
                if let Some(name) = name.as_str().filter(|name| !routes.iter().any(|route| route == name)) {
                    warnings.push(warn(
                        format!("config.{key}[{index}]"),
                        format!("names \"{name}\", which is no route of this profile (routes: {})", routes.join(", ")),
                    ));
                }
            }
        }
        let mut codes = Vec::new();
        collect_codes(&Value::Object(config.clone()), "config", &mut codes);
        for (key, code) in codes.into_iter().filter(|(_, code)| !is_known_code(code)) {
            let upper = code.to_ascii_uppercase();
            let hint =
                if is_known_code(&upper) { format!(" (codes are case-sensitive: {upper})") } else { String::new() };
            warnings
                .push(warn(key, format!("\"{code}\" is not a failure code dsh produces{hint}, so it never matches")));
        }
    }
    warnings
}

/// The strings of every `…codes` / `…Codes` list below `value`, with their key paths.
fn collect_codes(value: &Value, path: &str, found: &mut Vec<(String, String)>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                let child_path = format!("{path}.{key}");
                let lists_codes = key == "codes" || key.ends_with("Codes");
                match child {
                    Value::Array(items) if lists_codes => {
                        for (index, item) in items.iter().enumerate() {
                            if let Some(code) = item.as_str() {
                                found.push((format!("{child_path}[{index}]"), code.to_owned()));
                            }
                        }
                    }
                    _ => collect_codes(child, &child_path, found),
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                collect_codes(item, &format!("{path}[{index}]"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::patch::{compose, Layer};

    fn warnings(layer: &str) -> Vec<String> {
        let layer = Layer::parse("user.yml", "user.yml", layer).unwrap();
        let composition = compose(Vec::new(), "cordis.yml", &[layer]);
        no_effect(&composition, &["deepseek-official".to_owned()]).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_policy_without_llm_retry_a_filter_naming_no_route_and_a_lowercase_code_are_named() {
        let found = warnings(
            "- insert:\n    - {id: p, name: llm-openai, config: {provider: deepseek-official, retryPolicy: {mode: normal, retryableCodes: [server, HTTP_418]}}}\n    - {id: f, name: dsh-retry, config: {providers: [deepseek, deepseek-official]}}\n",
        );
        assert_eq!(
            found,
            [
                "user.yml: row \"p\": config.retryPolicy: has no effect: no enabled row runs llm-retry, the executor that applies it",
                "user.yml: row \"p\": config.retryPolicy.retryableCodes[0]: \"server\" is not a failure code dsh produces (codes are case-sensitive: SERVER), so it never matches",
                "user.yml: row \"f\": config.providers[0]: names \"deepseek\", which is no route of this profile (routes: deepseek-official)",
            ]
        );
    }

    #[test]
    fn a_policy_with_llm_retry_running_is_fine() {
        assert!(warnings(
            "- insert:\n    - {id: p, name: llm-openai, config: {retryPolicy: {mode: normal}}}\n    - {id: r, name: llm-retry}\n"
        )
        .is_empty());
    }
}
