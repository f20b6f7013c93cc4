//! `dsh config …`: compose a profile and print it (`dump`), validate every enabled row (`check`),
//! print the `agent/request-error` listener order (`waterfall`), or say who handles each failure
//! code on each route (`explain`).

use super::exit::{Exit, Outcome};
use super::shown::plural;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use dsh_abi::Hooks;
use serde_json::Value;

use super::globals::{compose, Globals};
use super::EXIT_CONFIG;
use crate::agent::assembly::{self as rows, LoadedPlugin};
use crate::agent::lint;
use crate::counters::Stores;
use crate::problem::Problem;
use crate::profile::patch::Composition;
use crate::profile::{yaml, Home, LayerScope};

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The profile to compose.
    #[arg(long, global = true, default_value = "web", value_name = "NAME", add = super::complete::profiles())]
    profile: String,

    /// An extra patch layer, applied after every other layer (repeatable, in order).
    #[arg(long = "patch", global = true, value_name = "FILE")]
    patches: Vec<PathBuf>,

    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the composed row list (never resolves or loads packages).
    Dump {
        /// Precede each run of rows with a comment naming the layer that inserted it and the
        /// layers that changed it.
        #[arg(long)]
        origins: bool,
        /// Compose the bundle layers only (user layers are not read).
        #[arg(long)]
        bundles_only: bool,
        /// Print a JSON array of rows instead of YAML.
        #[arg(long)]
        json: bool,
    },
    /// Load every enabled row and validate every config; report every problem, and warn about
    /// settings that have no effect.
    Check {
        /// Print `{profile, valid, problems, warnings, …}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the agent/request-error listener order: index, row id, package, library.
    Waterfall {
        /// Print a JSON array of `{index, row, package, library}`.
        #[arg(long)]
        json: bool,
    },
    /// The shared counters of the stores the profile's rows keep them in (a retry budget's
    /// tokens, per route and per host), with `--reset` to forget them.
    Counters(super::counters::CountersArgs),
    /// Every tool the agent offers the model: each `mcp` row's server is started and asked for
    /// its tools (server row, name as sent to the model, description, input schema).
    Tools {
        /// Print a JSON array of `{row, name, remoteName, description, inputSchema}`.
        #[arg(long)]
        json: bool,
    },
    /// For each provider route: its retry policy and, for every failure code the adapter
    /// produces, which row handles it and what it does — asked of the real listeners.
    Explain {
        /// Print a JSON array of routes `{provider, model, policy, codes: {CODE: {row, action, …}}}`.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(globals: &Globals, args: ConfigArgs) -> Outcome {
    let home = globals.home()?;
    match args.command {
        ConfigCommand::Dump { origins, bundles_only, json } => {
            let scope = if bundles_only { LayerScope::BundlesOnly } else { LayerScope::All };
            let patches = if bundles_only { &[][..] } else { &args.patches[..] };
            let (_, mut composition) = compose(&home, &args.profile, patches, scope)?;
            let redacted = take_inline_credentials(&mut composition.rows);
            if !redacted.is_empty() {
                say!(
                    "dsh: config dump: credentials written inline are shown as {} ({}); give them through the environment",
                    dsh_session::redact::REDACTED,
                    redacted.join(", ")
                );
            }
            out_text!("{}", render_dump(&composition, origins, json))?;
            Ok(())
        }
        ConfigCommand::Check { json } => check(&home, &args.profile, &args.patches, json),
        ConfigCommand::Waterfall { json } => waterfall(&home, &args.profile, &args.patches, json),
        ConfigCommand::Explain { json } => explain(globals, &home, &args.profile, &args.patches, json),
        ConfigCommand::Tools { json } => super::tools::run(&home, &args.profile, &args.patches, json),
        ConfigCommand::Counters(counters) => super::counters::run(&home, &args.profile, &args.patches, &counters),
    }
}

/// Replaces every credential written inline in the rows' configs by the redaction mark, so a
/// dump pasted into a bug report holds none; returns `row config.path` for each.
fn take_inline_credentials(rows: &mut [Value]) -> Vec<String> {
    let mut taken = Vec::new();
    for row in rows {
        let id = row.get("id").and_then(Value::as_str).unwrap_or("?").to_owned();
        let Some(config) = row.get_mut("config") else { continue };
        let found = dsh_session::redact::take_inline_credentials(config);
        taken.extend(found.into_iter().map(|credential| format!("{id} config.{}", credential.path)));
    }
    taken
}

fn render_dump(composition: &Composition, origins: bool, json: bool) -> String {
    let rows: Vec<Value> = composition.rows.clone();
    if json && origins {
        let rows: Vec<Value> = rows
            .into_iter()
            .zip(&composition.provenance)
            .map(|(row, provenance)| {
                serde_json::json!({"row": row, "origin": provenance.origin, "patchedBy": provenance.patched_by})
            })
            .collect();
        return format!("{}\n", dsh_abi::js::to_string_pretty(&rows));
    }
    if json {
        return format!("{}\n", dsh_abi::js::to_string_pretty(&rows));
    }
    if !origins {
        return if rows.is_empty() { "[]\n".to_owned() } else { yaml::to_string(&Value::Array(rows)) };
    }
    let mut out = String::new();
    let mut run: Vec<Value> = Vec::new();
    let mut label: Option<String> = None;
    let flush = |out: &mut String, label: &Option<String>, run: &mut Vec<Value>| {
        if let (Some(label), false) = (label, run.is_empty()) {
            out.push_str(&format!("# == {label}\n"));
            out.push_str(&yaml::to_string(&Value::Array(std::mem::take(run))));
        }
    };
    for (row, provenance) in rows.into_iter().zip(&composition.provenance) {
        let row_label = provenance.label();
        if label.as_deref() != Some(row_label.as_str()) {
            flush(&mut out, &label, &mut run);
            label = Some(row_label);
        }
        run.push(row);
    }
    flush(&mut out, &label, &mut run);
    if out.is_empty() {
        out.push_str("[]\n");
    }
    out
}

/// What `check` warns about: settings without effect, unknown keys, inline credentials, failover
/// rows that can bounce.
fn check_warnings(composition: &Composition, routes: &[String]) -> Vec<String> {
    let mut warnings: Vec<String> = lint::no_effect(composition, routes).iter().map(ToString::to_string).collect();
    warnings.extend(composition.unknown_keys.iter().map(ToString::to_string));
    warnings.extend(lint::inline_credentials(composition).iter().map(ToString::to_string));
    warnings.extend(lint::bouncing_failover(composition).iter().map(ToString::to_string));
    warnings
}

fn check(home: &Home, profile_name: &str, patches: &[PathBuf], json: bool) -> Outcome {
    let (profile, composition) = match compose(home, profile_name, patches, LayerScope::All) {
        Ok(composed) => composed,
        Err(err) if json => {
            // The document has its usual shape, with the reason nothing could be composed.
            let document = serde_json::json!({
                "profile": profile_name, "valid": false, "enabledRows": 0, "providers": [], "plugins": [],
                "problems": [], "warnings": [], "skippedEntries": [], "error": format!("{err:#}"),
            });
            out_raw!("{}", dsh_abi::js::to_string_pretty(&document))?;
            return Err(Exit::reported(super::exit::exit_code_of(&err)));
        }
        Err(err) => return Err(err.into()),
    };
    let rows::Checked { resolution, plugins: loaded, problems, store_problems } =
        rows::check(&profile, &composition, &Stores::at(home.root()));
    // A profile without MCP servers builds no runtime: `check` stays a quick, synchronous command.
    let server_problems = match resolution.servers.is_empty() {
        true => Vec::new(),
        false => super::globals::start_servers(&composition, &resolution.servers)?.1,
    };
    let problems: Vec<&Problem> = problems.iter().chain(&store_problems).chain(&server_problems).collect();
    let routes: Vec<String> = resolution.providers.iter().map(|provider| provider.provider.clone()).collect();
    let warnings = check_warnings(&composition, &routes);
    let plugins: Vec<&str> = loaded.iter().map(|plugin| plugin.row.row_id.as_str()).collect();
    if json {
        out_raw!(
            "{}",
            dsh_abi::js::to_string_pretty(&serde_json::json!({
                "profile": profile.name,
                "valid": problems.is_empty(),
                "enabledRows": composition.enabled_rows().len(),
                "providers": routes,
                "plugins": plugins,
                "problems": problems,
                "warnings": warnings,
                "skippedEntries": composition.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }))
        )?;
        return Exit::unless(problems.is_empty(), EXIT_CONFIG);
    }
    for warning in &warnings {
        say!("dsh: warning: {warning}");
    }
    if problems.is_empty() {
        out!(
            "profile {}: {} enabled rows valid ({} provider{}; plugins: {})",
            profile.name,
            composition.enabled_rows().len(),
            resolution.providers.len(),
            plural(resolution.providers.len()),
            if plugins.is_empty() { "none".to_owned() } else { plugins.join(", ") }
        )?;
        return Ok(());
    }
    for problem in &problems {
        say!("{problem}");
    }
    say!("dsh: profile {}: {} problem{} found", profile.name, problems.len(), plural(problems.len()));
    Err(Exit::reported(EXIT_CONFIG))
}

fn explain(globals: &Globals, home: &Home, profile_name: &str, patches: &[PathBuf], json: bool) -> Outcome {
    let (profile, composition) = compose(home, profile_name, patches, LayerScope::All)?;
    let scratch = std::sync::Arc::new(crate::counters::MemoryStore::default());
    let counters = Stores::Scratch(scratch.clone());
    let built = super::globals::runtime()?.block_on(async {
        crate::agent::Assembly::build(home, &profile, &composition, globals.verbose(), &counters).await
    });
    let assembly = match built {
        Ok(assembly) => assembly,
        Err(problems) => {
            for problem in problems {
                say!("{problem}");
            }
            return Err(Exit::reported(EXIT_CONFIG));
        }
    };
    let routes = crate::agent::explain::explain(&assembly, &scratch);
    let layer = home.display(&profile.dir.join("cordis.patch.yml"));
    if json {
        return explain_json(&profile.name, &layer, &assembly, &routes);
    }
    out!("profile {} — change it in {layer}", profile.name)?;
    let listeners: Vec<&str> = assembly.listeners.iter().map(|row| row.row_id()).collect();
    out!(
        "request-error listeners, outermost first: {}",
        if listeners.is_empty() { "none".to_owned() } else { listeners.join(", ") }
    )?;
    let applied = assembly.listeners.iter().any(|row| row.package() == "llm-retry");
    let unused = if applied { "" } else { " (unused: no enabled row runs llm-retry, which applies it)" };
    for route in &routes {
        out!("")?;
        let agent = if route.provider == assembly.agent.provider { ", the agent's route" } else { "" };
        out!(
            "route {} (model {}{agent}): retryPolicy {}{unused}",
            route.provider,
            route.model,
            crate::agent::explain::describe_policy(&route.policy)
        )?;
        explain_codes(route)?;
    }
    out!("")?;
    out!("Delays are those of random samples at their midpoint (no jitter); the first row named decides.")?;
    Ok(())
}

fn explain_json(
    profile: &str,
    layer: &str,
    assembly: &crate::agent::Assembly,
    routes: &[crate::agent::explain::RouteHandling],
) -> Outcome {
    let routes: Vec<Value> = routes
        .iter()
        .map(|route| {
            let mut value = route.to_json();
            value["agentRoute"] = Value::Bool(route.provider == assembly.agent.provider);
            value
        })
        .collect();
    let document = serde_json::json!({"profile": profile, "layer": layer, "routes": routes});
    out_raw!("{}", dsh_abi::js::to_string_pretty(&document))?;
    Ok(())
}

/// A route's lines: per failure code, the row that decides and what it does.
fn explain_codes(route: &crate::agent::explain::RouteHandling) -> Outcome {
    for handling in &route.codes {
        if let Some(failover) = &handling.failover {
            out!("  {:24} {:20} switches to {} right away", handling.code, failover.row, failover.route)?;
        }
        let code = if handling.failover.is_some() { "" } else { handling.code };
        let then = if handling.failover.is_some() { "otherwise: " } else { "" };
        out!(
            "  {:24} {:20} {then}{}",
            code,
            handling.row.as_deref().unwrap_or("-"),
            crate::agent::explain::describe(&handling.action)
        )?;
        for (row, message) in &handling.failures {
            out!("  {:24} {:20} (failed: {message})", "", row)?;
        }
    }
    Ok(())
}

fn waterfall(home: &Home, profile_name: &str, patches: &[PathBuf], json: bool) -> Outcome {
    let (profile, composition) = compose(home, profile_name, patches, LayerScope::All)?;
    let resolution = rows::resolve(&profile, &composition);
    let rows::Loaded { plugins: loaded, problems: load_problems, .. } =
        rows::load_plugins(&resolution.plugins, false, &Stores::scratch());
    let problems: Vec<&Problem> = resolution.unresolved.iter().chain(&load_problems).collect();
    if !problems.is_empty() {
        for problem in problems {
            say!("{problem}");
        }
        return Err(Exit::reported(EXIT_CONFIG));
    }
    let listeners: Vec<&LoadedPlugin> =
        loaded.iter().filter(|plugin| plugin.library.manifest.hooks.contains(Hooks::REQUEST_ERROR)).collect();
    if json {
        let entries: Vec<Value> = listeners
            .iter()
            .enumerate()
            .map(|(index, plugin)| {
                serde_json::json!({
                    "index": index + 1, "row": plugin.row.row_id, "package": plugin.row.package,
                    "library": plugin.library.path.display().to_string(),
                })
            })
            .collect();
        out_raw!("{}", dsh_abi::js::to_string_pretty(&entries))?;
        return Ok(());
    }
    let id_width = listeners.iter().map(|plugin| plugin.row.row_id.len()).max().unwrap_or(0);
    let package_width = listeners.iter().map(|plugin| plugin.row.package.len()).max().unwrap_or(0);
    for (index, plugin) in listeners.iter().enumerate() {
        out!(
            "{}  {:id_width$}  {:package_width$}  {}",
            index + 1,
            plugin.row.row_id,
            plugin.row.package,
            plugin.library.path.display()
        )?;
    }
    Ok(())
}
