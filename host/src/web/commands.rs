//! The plugins and routes page's requests, answered by the `dsh` commands that answer them on a
//! terminal (`config waterfall|explain|dump`, `plugin list|add|remove|enable|disable`, `profile
//! list`, `session replay --vs`), run as child processes of this server with `--json`: the page
//! shows exactly what the command line says, under the same profile locks, and a plugin that
//! crashes while it is loaded takes down a child, never the server. A command has a deadline;
//! its exit code becomes the answer's status, its stderr the error.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{internal, ApiError};
use super::state::Web;

/// How long a command may run (`plugin add` may build a crate: longer).
const COMMAND_DEADLINE: Duration = Duration::from_secs(120);
const BUILD_DEADLINE: Duration = Duration::from_secs(900);

/// `GET /api/profiles`: `{profiles, default}`, `dsh profile list --json` and the profile new
/// sessions run with.
pub async fn profiles(State(web): State<Web>) -> Result<Json<Value>, ApiError> {
    let listed = web.commands.json(&["profile", "list", "--json"], COMMAND_DEADLINE, false).await?;
    Ok(Json(json!({"profiles": listed, "default": web.profile})))
}

/// `GET /api/profiles/{profile}/waterfall`: the composed `agent/request-error` order.
pub async fn waterfall(State(web): State<Web>, Path(profile): Path<String>) -> Result<Json<Value>, ApiError> {
    let args = ["config", "--profile", &profile, "waterfall", "--json"];
    Ok(Json(web.commands.json(&args, COMMAND_DEADLINE, false).await?))
}

/// `GET /api/profiles/{profile}/explain`: per route, what each failure code meets.
pub async fn explain(State(web): State<Web>, Path(profile): Path<String>) -> Result<Json<Value>, ApiError> {
    let args = ["config", "--profile", &profile, "explain", "--json"];
    Ok(Json(web.commands.json(&args, COMMAND_DEADLINE, false).await?))
}

/// `GET /api/profiles/{profile}/rows`: the composed rows, disabled ones included, as `config
/// dump --json` prints them: with every credential written inline in a config taken out.
pub async fn rows(State(web): State<Web>, Path(profile): Path<String>) -> Result<Json<Value>, ApiError> {
    let args = ["config", "--profile", &profile, "dump", "--json"];
    Ok(Json(json!({"rows": web.commands.json(&args, COMMAND_DEADLINE, false).await?})))
}

/// `GET /api/profiles/{profile}/plugins`: `dsh plugin list --json`.
pub async fn plugins(State(web): State<Web>, Path(profile): Path<String>) -> Result<Json<Value>, ApiError> {
    let args = ["plugin", "--profile", &profile, "list", "--json"];
    Ok(Json(json!({"packages": web.commands.json(&args, COMMAND_DEADLINE, false).await?})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Package {
    package: String,
}

/// `POST /api/profiles/{profile}/plugins {"package"}`: `dsh plugin add PACKAGE`.
pub async fn add(
    State(web): State<Web>,
    Path(profile): Path<String>,
    Json(body): Json<Package>,
) -> Result<Json<Value>, ApiError> {
    let args = ["plugin", "--profile", &profile, "add", "--json", "--", &body.package];
    Ok(Json(web.commands.json(&args, BUILD_DEADLINE, false).await?))
}

/// `DELETE /api/profiles/{profile}/plugins/{package}`: `dsh plugin remove PACKAGE`.
pub async fn remove(
    State(web): State<Web>,
    Path((profile, package)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let args = ["plugin", "--profile", &profile, "remove", "--json", "--", &package];
    Ok(Json(web.commands.json(&args, COMMAND_DEADLINE, false).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toggle {
    enabled: bool,
}

/// `POST /api/profiles/{profile}/rows/{row} {"enabled"}`: `dsh plugin enable|disable ROW`.
pub async fn toggle(
    State(web): State<Web>,
    Path((profile, row)): Path<(String, String)>,
    Json(body): Json<Toggle>,
) -> Result<Json<Value>, ApiError> {
    let verb = if body.enabled { "enable" } else { "disable" };
    let args = ["plugin", "--profile", &profile, verb, "--json", "--", &row];
    Ok(Json(web.commands.json(&args, COMMAND_DEADLINE, false).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versus {
    /// A profile to replay against (default: the session's own).
    profile: Option<String>,
    /// A patch layer's text, applied over that profile.
    layer: Option<String>,
}

/// `POST /api/sessions/{id}/replay {"profile"?, "layer"?}`: `dsh session replay ID --vs …
/// --json`, the session's own configuration beside the candidate: one object per turn, then the
/// summary.
pub async fn replay(
    State(web): State<Web>,
    Path(id): Path<String>,
    Json(body): Json<Versus>,
) -> Result<Json<Value>, ApiError> {
    web.log_of(&id)?;
    let layer = body.layer.filter(|layer| !layer.trim().is_empty()).map(layer_file).transpose()?;
    let profile = body.profile.filter(|profile| !profile.is_empty()).unwrap_or_default();
    if profile.contains([':', ',']) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("{profile:?} is not a profile name")));
    }
    let versus = match &layer {
        Some(file) => format!("{profile}:{}", file.path().display()),
        None if profile.is_empty() => {
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "name a profile or a layer".into()))
        }
        None => profile,
    };
    let args = ["session", "replay", "--json", "--vs", &versus, "--", &id];
    let lines = web.commands.json(&args, COMMAND_DEADLINE, true).await?;
    Ok(Json(json!({"candidate": versus_label(&versus, layer.is_some()), "results": lines})))
}

fn layer_file(text: String) -> Result<tempfile::NamedTempFile, ApiError> {
    let mut file = tempfile::Builder::new().prefix("dsh-web-layer-").suffix(".yml").tempfile().map_err(internal)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(internal)?;
    Ok(file)
}

fn versus_label(versus: &str, layer: bool) -> String {
    match versus.split_once(':') {
        Some((profile, _)) if layer && profile.is_empty() => "the session's profile with the layer".to_owned(),
        Some((profile, _)) if layer => format!("profile {profile} with the layer"),
        _ => format!("profile {versus}"),
    }
}
