//! The names the model calls tools by, computed once and in one place: a row's `rename`, else
//! the server's name made acceptable to the model; shared names prefixed with their row; any
//! clash left refused, naming both tools and the fix.

use rmcp::model::Tool;
use serde_json::{json, Value};

use super::config::{McpConfig, MAX_NAME_CHARS};
use super::server::Server;
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
}

/// The names the model calls the listed tools by, computed once: a tool's row `rename`, else its
/// server name made acceptable ([`model_name`]); a name several servers arrive at becomes
/// `<row>__<name>` for each of them. Tools that still share a name are not offered at all, and
/// each such clash is a problem naming both tools and the fix — so a call can only ever reach
/// the one tool it was offered as.
pub(super) fn offered(servers: &[Server], listed: Vec<(usize, Tool)>) -> (Vec<OfferedTool>, Vec<Problem>) {
    let config = |server: usize| &servers[server].config;
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
    let mut offered = Vec::new();
    let mut problems = Vec::new();
    for (index, ((server, tool), name)) in listed.iter().zip(&names).enumerate() {
        let clash = names.iter().enumerate().find(|(other, other_name)| *other != index && *other_name == name);
        match clash {
            Some((other, _)) if other < index => {}
            Some((other, _)) => {
                problems.push(name_clash(name, (config(*server), tool), (config(listed[other].0), &listed[other].1)))
            }
            None => offered.push(OfferedTool {
                name: name.clone(),
                remote_name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object(tool.input_schema.as_ref().clone()),
                row_id: config(*server).row_id.clone(),
            }),
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

    #[test]
    fn model_names_keep_what_openai_accepts() {
        assert_eq!(model_name("files__read.file"), "files__read_file");
        assert_eq!(model_name(&"x".repeat(80)).len(), 64);
    }
}
