//! `dsh config tools`: every tool the profile's agent offers the model, found by starting the
//! servers of its `mcp` rows and asking each for its tools, with the rule that resolves a call of
//! it whose answer is lost, and why that rule.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::exit::{Exit, Outcome, EXIT_CONFIG};
use crate::agent::assembly as rows;
use crate::profile::{Home, LayerScope};

pub fn run(home: &Home, profile_name: &str, patches: &[PathBuf], json: bool) -> Outcome {
    let (profile, composition) = super::globals::compose(home, profile_name, patches, LayerScope::All)?;
    let resolution = rows::resolve(&profile, &composition);
    let (tools, started) = super::globals::start_servers(&composition, &resolution.servers)?;
    let problems: Vec<String> = resolution
        .problems
        .iter()
        .filter(|problem| problem.row.as_deref().is_some_and(|row| is_mcp_row(&composition, row)))
        .chain(&started)
        .map(ToString::to_string)
        .collect();
    if !problems.is_empty() {
        problems.iter().for_each(|problem| say!("{problem}"));
        return Err(Exit::reported(EXIT_CONFIG));
    }
    if json {
        let listed: Vec<Value> = tools
            .offered()
            .iter()
            .map(|tool| {
                let (rule, why) = tools.rule_of(tool, None);
                json!({"row": tool.row_id, "name": tool.name, "remoteName": tool.remote_name,
                       "description": tool.description, "inputSchema": tool.input_schema,
                       "resolve": {"rule": rule.name(), "why": why, "tasks": tools.tasks_on(tool)}})
            })
            .collect();
        out_raw!("{}", dsh_abi::js::to_string_pretty(&listed))?;
        return Ok(());
    }
    if tools.offered().is_empty() {
        let servers = resolution.servers.len();
        let rows = if servers == 1 { "row" } else { "rows" };
        out!("profile {}: no tools ({servers} MCP server {rows}); an `mcp` row adds a server", profile.name)?;
        return Ok(());
    }
    for tool in tools.offered() {
        out!("{} · {} — {}", tool.row_id, tool.name, crate::one_line(&tool.description, 100))?;
        out!("  input: {}", dsh_abi::js::to_string(&tool.input_schema))?;
        let (rule, why) = tools.rule_of(tool, None);
        out!("  lost answer: {} — {why}", rule.name())?;
        let tasks = match tools.tasks_on(tool) {
            true => "called as an MCP task if the server requires one; a recorded task is polled, not called again",
            false => "off (resolve.tasks): a tool that requires a task is refused",
        };
        out!("  tasks: {tasks}")?;
    }
    Ok(())
}

fn is_mcp_row(composition: &crate::profile::patch::Composition, row_id: &str) -> bool {
    composition.enabled_rows().iter().any(|row| {
        row.get("id").and_then(Value::as_str) == Some(row_id) && row.get("name").and_then(Value::as_str) == Some("mcp")
    })
}
