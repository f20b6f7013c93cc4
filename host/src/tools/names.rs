//! The names the model calls tools by, computed once and in one place: a row's `rename`, else
//! the server's name made acceptable to the model; shared names prefixed with their row; any
//! clash left refused, naming both tools and the fix.

use std::collections::HashMap;

use rmcp::model::Tool;
use serde_json::{json, Value};

use super::config::{McpConfig, MAX_NAME_CHARS};
use crate::problem::Problem;

/// A tool the model is offered.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The `mcp` row of its server.
    pub row_id: String,
    /// The name the model calls it by: its row's `rename`, else the server's (characters the
    /// model refuses made `_`), or `<row>__<name>` when several servers offer that name.
    pub name: String,
    /// The name its server knows it by.
    pub remote_name: String,
    pub description: String,
    pub input_schema: Value,
    /// The server annotates it `readOnlyHint: true`.
    pub read_only_hint: bool,
    /// The server annotates it `idempotentHint: true`.
    pub idempotent_hint: bool,
}

/// The names the model calls the listed tools by, computed once: a tool's row `rename`, else its
/// server name made acceptable ([`model_name`]); a name several servers arrive at becomes
/// `<row>__<name>` for each of them. Tools that still share a name are not offered at all, and
/// each such clash is a problem naming both tools and the fix — so a call can only ever reach
/// the one tool it was offered as.
pub(super) fn offered(configs: &[&McpConfig], listed: Vec<(usize, Tool)>) -> (Vec<OfferedTool>, Vec<Problem>) {
    let config = |server: usize| configs[server];
    let base: Vec<(String, bool)> = listed
        .iter()
        .map(|(server, tool)| match config(*server).rename.get(tool.name.as_ref()) {
            Some(renamed) => (renamed.clone(), true),
            None => (model_name(&tool.name), false),
        })
        .collect();
    let rows_offering = |name: &str| {
        let mut rows: Vec<&str> = listed
            .iter()
            .zip(&base)
            .filter(|(_, (base, _))| base == name)
            .map(|((server, _), _)| config(*server).row_id.as_str())
            .collect();
        rows.dedup();
        rows.len()
    };
    let names: Vec<String> = listed
        .iter()
        .zip(&base)
        .map(|((server, _), (name, renamed))| match !renamed && rows_offering(name) > 1 {
            true => model_name(&format!("{}__{name}", config(*server).row_id)),
            false => name.clone(),
        })
        .collect();
    let mut holders: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, name) in names.iter().enumerate() {
        holders.entry(name).or_default().push(index);
    }
    let mut offered = Vec::new();
    let mut problems = Vec::new();
    for (index, ((server, tool), name)) in listed.iter().zip(&names).enumerate() {
        match holders[name.as_str()].as_slice() {
            [_] => offered.push(OfferedTool {
                name: name.clone(),
                remote_name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object(tool.input_schema.as_ref().clone()),
                row_id: config(*server).row_id.clone(),
                read_only_hint: tool.annotations.as_ref().and_then(|hints| hints.read_only_hint) == Some(true),
                idempotent_hint: tool.annotations.as_ref().and_then(|hints| hints.idempotent_hint) == Some(true),
            }),
            // Every tool after the first of a shared name is a problem naming the first.
            [first, ..] if *first != index => {
                problems.push(name_clash(name, (config(listed[*first].0), &listed[*first].1), (config(*server), tool)))
            }
            _ => {}
        }
    }
    (offered, problems)
}

/// Two tools the model would call by one name: a problem of the first one's row, with the fix.
fn name_clash(name: &str, first: (&McpConfig, &Tool), second: (&McpConfig, &Tool)) -> Problem {
    let shown =
        |(config, tool): (&McpConfig, &Tool)| format!("tool {} of server \"{}\"", json!(tool.name), config.row_id);
    let message = format!(
        "{} and {} would both be offered to the model as \"{name}\", so a call could reach the wrong one; \
         neither is offered",
        shown(first),
        shown(second)
    );
    let hint = format!(
        "give one of them another name in its row, e.g. rename: {{{}: {}_2}} in row \"{}\"",
        json!(second.1.name),
        name,
        second.0.row_id
    );
    Problem::row(None, &first.0.row_id, message).with_hint(Some(hint))
}

/// `name` with every character OpenAI refuses replaced by `_`, at most 64 characters.
fn model_name(name: &str) -> String {
    let kept = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    name.chars().map(|c| if kept(c) { c } else { '_' }).take(MAX_NAME_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn model_names_keep_what_openai_accepts() {
        assert_eq!(model_name("files__read.file"), "files__read_file");
        assert_eq!(model_name(&"x".repeat(80)).len(), 64);
    }

    fn row(row_id: &str, rename: BTreeMap<String, String>) -> McpConfig {
        let config = json!({"command": ["true"]});
        let mut config = crate::tools::config::parse_mcp(row_id, &config).expect("a valid row");
        config.rename = rename;
        config
    }

    /// Names chosen to collide: once made acceptable, once prefixed, once cut at 64 characters.
    fn colliding_name() -> impl Strategy<Value = String> {
        let long = "x".repeat(62);
        prop::sample::select(vec![
            "wipe.all".to_owned(),
            "wipe_all".to_owned(),
            "wipe-all".to_owned(),
            "a__wipe_all".to_owned(),
            format!("{long}.a"),
            format!("{long}_b"),
            "é".to_owned(),
            "_".to_owned(),
        ])
    }

    fn servers() -> impl Strategy<Value = Vec<(String, BTreeSet<String>, BTreeMap<String, String>)>> {
        let rows = prop::sample::select(vec!["a", "b", "a_", "x"]);
        let server = (rows, prop::collection::btree_set(colliding_name(), 1..5), any::<prop::sample::Index>());
        prop::collection::vec(server, 1..4).prop_map(|servers| {
            let mut seen = BTreeSet::new();
            servers
                .into_iter()
                .filter(|(row, ..)| seen.insert(*row))
                .map(|(row, tools, pick)| {
                    let renamed = tools.iter().nth(pick.index(tools.len())).cloned();
                    let rename = renamed.map(|name| (name, "wipe_all".to_owned())).into_iter().collect();
                    (row.to_owned(), tools, rename)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn every_offered_name_reaches_one_tool_and_every_clash_is_refused(servers in servers()) {
            let configs: Vec<McpConfig> = servers.iter().map(|(row_id, _, rename)| row(row_id, rename.clone())).collect();
            let listed: Vec<(usize, Tool)> = servers
                .iter()
                .enumerate()
                .flat_map(|(server, (_, tools, _))| {
                    tools.iter().map(move |name| (server, Tool::new(name.clone(), "", serde_json::Map::new())))
                })
                .collect();
            let count = listed.len();
            let (offered, problems) = offered(&configs.iter().collect::<Vec<_>>(), listed);
            let names: BTreeSet<&str> = offered.iter().map(|tool| tool.name.as_str()).collect();
            prop_assert_eq!(names.len(), offered.len(), "two tools offered under one name: {:?}", offered);
            let kept = |name: &str| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            prop_assert!(offered.iter().all(|tool| kept(&tool.name) && tool.name.len() <= MAX_NAME_CHARS));
            // Every tool withheld is named by a problem.
            for (row_id, tools, _) in &servers {
                for name in tools {
                    let named = format!("tool {} of server \"{row_id}\"", json!(name));
                    let is_offered = offered.iter().any(|tool| &tool.row_id == row_id && &tool.remote_name == name);
                    prop_assert!(is_offered || problems.iter().any(|problem| problem.message.contains(&named)), "{named} is neither offered nor refused");
                }
            }
            prop_assert!(offered.len() + problems.len() <= count);
        }
    }
}
