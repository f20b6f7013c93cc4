//! Settings that are valid but do nothing, which `dsh config check` warns about: a provider's
//! `retryPolicy` while no enabled row runs `llm-retry` (which applies it), a `providers` or
//! `excludeProviders` filter naming no route, and a failure code no part of dsh produces (codes
//! are case-sensitive: `server` never matches).

use serde_json::{Map, Value};

use crate::llm::classify::ADAPTER_CODES;
use crate::problem::Problem;
use crate::profile::patch::Composition;

/// Codes the host produces besides the adapter's.
const HOST_CODES: [&str; 4] = ["NO_ADAPTER", "ABORTED", "INVARIANT", "FAILOVER_LOOP"];

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

/// Every credential written inline in an enabled row's config: it is kept out of everything dsh
/// writes and shows, but a layer file is read by whoever can read it, and the way to give it
/// through the environment is said.
pub fn inline_credentials(composition: &Composition) -> Vec<Problem> {
    let mut warnings = Vec::new();
    for row in composition.enabled_rows() {
        let (Some(row_id), Some(config)) = (row.get("id").and_then(Value::as_str), row.get("config")) else {
            continue;
        };
        for found in dsh_session::redact::inline_credentials(config) {
            warnings.push(Problem {
                file: composition.config_layer(row_id).map(str::to_owned),
                row: Some(row_id.to_owned()),
                key: Some(format!("config.{}", found.path)),
                message: "holds a credential written inline in the layer (dsh keeps it out of its logs, output and \
                          the session's copies of --patch layers)"
                    .to_owned(),
                hint: Some(instead(&found)),
            });
        }
    }
    warnings
}

/// Pairs of enabled rows whose route lists (`routes`) order two routes oppositely: when both
/// routes fail, one row sends the step to the other route and the other sends it back — a step
/// then ends with `FAILOVER_LOOP` after [`crate::agent::turn::MAX_HOPS_IN_A_ROW`] hops.
pub fn bouncing_failover(composition: &Composition) -> Vec<Problem> {
    let rows: Vec<(&str, Vec<&str>)> = composition
        .enabled_rows()
        .into_iter()
        .filter_map(|row| {
            let routes = row.get("config")?.get(dsh_abi::config::ROUTES_KEY)?.as_array()?;
            Some((row.get("id")?.as_str()?, routes.iter().filter_map(Value::as_str).collect()))
        })
        .collect();
    let mut warnings = Vec::new();
    for (index, (first, first_routes)) in rows.iter().enumerate() {
        for (second, second_routes) in &rows[index + 1..] {
            if let Some((a, b)) = opposite_pair(first_routes, second_routes) {
                warnings.push(Problem {
                    file: composition.config_layer(second).map(str::to_owned),
                    row: Some((*second).to_owned()),
                    key: Some(format!("config.{}", dsh_abi::config::ROUTES_KEY)),
                    message: format!(
                        "orders {b} before {a}, which row \"{first}\" orders the other way: when both fail, the rows send a step back and forth (it ends with FAILOVER_LOOP after {} hops in a row)",
                        crate::agent::turn::MAX_HOPS_IN_A_ROW
                    ),
                    hint: Some("list the routes in the same order in both rows, or keep one row".to_owned()),
                });
            }
        }
    }
    warnings
}

/// Two routes `first` lists as `a` before `b` and `second` lists as `b` before `a`.
fn opposite_pair<'a>(first: &[&'a str], second: &[&str]) -> Option<(&'a str, &'a str)> {
    let position = |route: &str| second.iter().position(|listed| *listed == route);
    first.iter().enumerate().find_map(|(at, a)| {
        let a_second = position(a)?;
        first[at + 1..].iter().find(|b| position(b).is_some_and(|b_second| b_second < a_second)).map(|b| (*a, *b))
    })
}

/// How to give an inline credential through the environment instead.
fn instead(found: &dsh_session::redact::InlineCredential) -> String {
    use dsh_session::redact::Holder;
    let key = found.path.rsplit('.').next().unwrap_or(&found.path);
    match &found.holder {
        Holder::Header(name) => {
            format!("headerEnv: {{{name}: VARIABLE}} sends it from the environment variable VARIABLE")
        }
        Holder::Env(name) => format!("passEnv: [{name}] passes dsh's own {name} to the server"),
        Holder::Url if key == "baseUrl" => {
            "apiKeyEnv: VARIABLE sends the key from the environment variable VARIABLE".to_owned()
        }
        Holder::Url if key == "url" => {
            "tokenEnv: VARIABLE sends the token from the environment variable VARIABLE".to_owned()
        }
        Holder::Url if key == dsh_abi::config::COUNTER_STORE_KEY => {
            format!("leave the password out of the URL and set {}", crate::counters::redis::PASSWORD_ENV)
        }
        Holder::Url => "give it through an environment variable instead".to_owned(),
    }
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
