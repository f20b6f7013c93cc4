//! Coming from DeepSeek Harness: the names its users know for retry packages and the bundled
//! packages that replace them, and where the settings of its rows live in dsh.

/// What a DeepSeek Harness package spec becomes in dsh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replacement {
    /// The DeepSeek Harness package, as its users name it.
    pub reference: &'static str,
    /// The bundled package that does its job here.
    pub bundled: &'static str,
    /// Whether the base bundle already runs it, so there is nothing to install.
    pub in_base_bundle: bool,
    /// Where its settings live in dsh.
    pub settings: &'static str,
}

const REPLACEMENTS: [Replacement; 4] = [
    Replacement {
        reference: "@deepseek-ai/dsh-llm-retry",
        bundled: "llm-retry",
        in_base_bundle: true,
        settings: "its settings are each provider row's retryPolicy",
    },
    Replacement {
        reference: "@deepseek-ai/dsh-llm-deepseek",
        bundled: "llm-openai",
        in_base_bundle: true,
        settings: "its row is the base bundle's llm-deepseek, whose config sets provider, baseUrl, model and apiKeyEnv",
    },
    Replacement {
        reference: "@syncended/dsh-retry",
        bundled: "dsh-retry",
        in_base_bundle: false,
        settings: "its settings are its row's config",
    },
    Replacement {
        reference: "imrcpan/dsh-retry",
        bundled: "relay-retry",
        in_base_bundle: false,
        settings: "its settings are its row's config",
    },
];

/// DeepSeek Harness packages dsh has no replacement for, by the start of their name after
/// `@deepseek-ai/`, with what a user does in dsh instead (the first that matches).
const WITHOUT_REPLACEMENT: [(&str, &str); 9] = [
    ("dsh-llm", "each route is a provider row of package llm-openai (the base bundle's llm-deepseek is one)"),
    (
        "dsh-session",
        "dsh always keeps session logs (JSONL under $DSH_HOME/sessions, or PostgreSQL through DSH_SESSIONS): there is \
         nothing to install",
    ),
    ("dsh-web-search", "an MCP server that searches the web gives the agent that tool: add it as an `mcp` row"),
    ("dsh-web-fetch", "an MCP server that fetches pages gives the agent that tool: add it as an `mcp` row"),
    (
        "dsh-tool",
        "dsh's tools come from MCP servers: add an `mcp` row per server (the README's \"Tools from MCP servers\")",
    ),
    ("dsh-mcp", "dsh talks to MCP servers itself: add an `mcp` row per server"),
    ("dsh-headless", "`dsh run \"task\"` runs one task without a terminal user interface"),
    ("dsh-web", "dsh has no browser front end yet: `dsh chat` talks with the agent in the terminal"),
    ("dsh-client", "dsh has no browser front end yet: `dsh chat` talks with the agent in the terminal"),
];

/// What to do in dsh instead of installing the DeepSeek Harness package `spec`, when dsh has no
/// package that replaces it.
pub fn instead_of(spec: &str) -> Option<&'static str> {
    let name = package_name(spec);
    let name = name.strip_prefix("@deepseek-ai/")?;
    WITHOUT_REPLACEMENT.iter().find(|(start, _)| name.starts_with(start)).map(|(_, instead)| *instead)
}

/// The replacement of a DeepSeek Harness package spec: an npm name with an optional version
/// (`@syncended/dsh-retry@1.2.0`) or a GitHub spec (`github:imrcpan/dsh-retry#main`,
/// `imrcpan/dsh-retry`).
pub fn replacement(spec: &str) -> Option<Replacement> {
    let name = package_name(spec);
    REPLACEMENTS.iter().copied().find(|replacement| replacement.reference.eq_ignore_ascii_case(name))
}

/// The package a spec names, without its source prefix, version or git reference.
fn package_name(spec: &str) -> &str {
    let spec = spec.trim().strip_prefix("npm:").unwrap_or(spec.trim());
    let spec = spec.strip_prefix("github:").unwrap_or(spec);
    let spec = spec.split_once('#').map_or(spec, |(name, _)| name);
    match spec.strip_prefix('@') {
        Some(scoped) => &spec[..1 + scoped.find('@').unwrap_or(scoped.len())],
        None => spec.split_once('@').map_or(spec, |(name, _)| name),
    }
}

/// Whether `spec` names an npm or GitHub package rather than a dsh package or a path.
pub fn looks_like_a_reference_package(spec: &str) -> bool {
    spec.starts_with('@') || spec.starts_with("npm:") || spec.starts_with("github:")
}

/// DeepSeek Harness base rows (its `dsh-base` bundle) whose job is done elsewhere in dsh, and
/// where: a patch entry naming one of them finds no row, and the warning says where to look.
const FORMER_ROWS: [(&str, &str); 7] = [
    (
        "agent-default-model",
        "the agent's route is the `agent` row's config.provider, and its model is the `model` of that provider's row \
         (`llm-deepseek` in the base bundle)",
    ),
    ("agent-loop", "turns are run by the `agent` row (config.provider, maxSteps)"),
    ("llm", "each route is a provider row of package llm-openai (`llm-deepseek` in the base bundle)"),
    ("llm-pi-ai", "each route is a provider row of package llm-openai: add one row per provider"),
    ("settings", "provider settings live in provider rows (`llm-deepseek` in the base bundle), set in patch layers"),
    ("credentials", "each provider row's config.apiKeyEnv names the environment variable that holds its key"),
    ("session-persistence-jsonl", "session logs always live under $DSH_HOME/sessions"),
];

/// Where the job of the DeepSeek Harness row `id` is done in dsh, when dsh has no such row.
pub fn former_row(id: &str) -> Option<String> {
    let (_, instead) = FORMER_ROWS.iter().find(|(former, _)| *former == id)?;
    Some(format!("{id} is a DeepSeek Harness row; in dsh {instead}"))
}

/// Where a key that `package`'s row refuses lives in dsh, for keys DeepSeek Harness users carry
/// over from its retry packages.
pub fn config_hint(package: &str, key: &str) -> Option<String> {
    let top = key.split(['.', '[']).next().unwrap_or(key);
    match (package, top) {
        ("llm-retry", "") => None,
        ("llm-retry", _) => Some(
            "llm-retry takes no config: each provider row's retryPolicy sets its route's retries (mode, maxRetries, \
             retryableCodes, backoff: {initialDelayMs, maxDelayMs, jitterRatio}), e.g. config.retryPolicy.maxRetries \
             on the llm-deepseek row"
                .to_owned(),
        ),
        ("dsh-retry", "schedule" | "tailDelayMs") => Some(
            "a fixed wait schedule is relay-retry's (DeepSeek Harness's imrcpan/dsh-retry is relay-retry here): run \
             `dsh plugin add relay-retry` and set schedule on its row"
                .to_owned(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_specs_of_every_form_find_their_replacement() {
        let bundled = |spec: &str| replacement(spec).map(|replacement| replacement.bundled);
        assert_eq!(bundled("@deepseek-ai/dsh-llm-retry"), Some("llm-retry"));
        assert_eq!(bundled("@deepseek-ai/dsh-llm-retry@0.1.0-rc.8"), Some("llm-retry"));
        assert_eq!(bundled("npm:@syncended/dsh-retry@^1"), Some("dsh-retry"));
        assert_eq!(bundled("github:imrcpan/dsh-retry"), Some("relay-retry"));
        assert_eq!(bundled("imrcpan/dsh-retry#v2"), Some("relay-retry"));
        assert_eq!(bundled("@someone/else"), None);
        assert_eq!(bundled("dsh-retry"), None);
        assert_eq!(bundled("@deepseek-ai/dsh-llm-deepseek@0.2.1"), Some("llm-openai"));
    }

    #[test]
    fn reference_packages_without_a_replacement_say_what_to_do_instead() {
        assert!(instead_of("@deepseek-ai/dsh-tools").unwrap().contains("`mcp` row"));
        assert!(instead_of("@deepseek-ai/dsh-web-search-deepseek@0.2.1").unwrap().contains("searches the web"));
        assert!(instead_of("npm:@deepseek-ai/dsh-session-persistence-jsonl").unwrap().contains("nothing to install"));
        assert!(instead_of("@deepseek-ai/dsh-web").unwrap().contains("`dsh chat`"));
        assert_eq!(instead_of("@someone/dsh-tools"), None);
    }

    #[test]
    fn old_retry_keys_point_to_where_they_live_now() {
        assert!(config_hint("llm-retry", "maxTransientRetries").unwrap().contains("retryPolicy"));
        assert!(config_hint("dsh-retry", "schedule[0]").unwrap().contains("relay-retry"));
        assert_eq!(config_hint("dsh-retry", "maxRetries"), None);
        assert_eq!(config_hint("relay-retry", "schedule"), None);
    }
}
