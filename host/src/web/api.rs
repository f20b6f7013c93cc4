//! The HTTP API under `/api/` (JSON), over the session service: sessions listed, created and
//! shown, a prompt, a cancel, a resume, and a session's events as Server-Sent Events whose `id`
//! is the log's `seq`, so a client that reconnects with `Last-Event-ID` gets every event after
//! the last it saw, once.

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::error::{internal, ApiError};
use super::state::Web;
use crate::agent::target::resolve_for;
use crate::service::{Seen, Subscription};
use dsh_session::meta::RunOverrides;
use dsh_session::summary;

/// `GET /api/sessions`: every session, the newest first, as `session list --json` shows them.
pub async fn list(State(web): State<Web>) -> Result<Json<Value>, ApiError> {
    let store = web.store.clone();
    let listed = tokio::task::spawn_blocking(move || summary::newest_first(&store, |_, _| {})).await;
    let summaries = listed.map_err(internal)?.map_err(internal)?;
    let sessions: Vec<Value> = summaries.iter().map(|(summary, _)| summary.json()).collect();
    Ok(Json(json!({"sessions": sessions})))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    profile: Option<String>,
    /// The route (provider row) and model the session runs on, as `--provider`/`--model` set them.
    provider: Option<String>,
    model: Option<String>,
}

/// `POST /api/sessions {"profile"?, "provider"?, "model"?}`: a new session, open on this server.
pub async fn create(State(web): State<Web>, body: Option<Json<NewSession>>) -> Result<Json<Value>, ApiError> {
    let asked = body.map(|Json(body)| body).unwrap_or_default();
    let profile = asked.profile.filter(|profile| !profile.is_empty()).unwrap_or(web.profile);
    let nonempty = |value: Option<String>| value.filter(|value| !value.trim().is_empty());
    let overrides = RunOverrides { provider: nonempty(asked.provider), model: nonempty(asked.model), system: None };
    let target = resolve_for(web.store, None, Some(&profile), &web.patches, &overrides).map_err(internal)?;
    let id = web.service.open(target).await?;
    Ok(Json(json!({"id": id, "profile": profile, "provider": overrides.provider, "model": overrides.model})))
}

/// `GET /api/sessions/{id}`: the session's summary, and (`pending`) how many requests this
/// server's worker of it has in hand (null when none serves it).
pub async fn show(State(web): State<Web>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let log = web.log_of(&id)?;
    let summarized = tokio::task::spawn_blocking(move || summary::summarize(&log)).await;
    let summary = summarized.map_err(internal)?.map_err(|err| internal(format!("{err:#}")))?;
    let mut shown = summary.json();
    shown["pending"] = json!(web.service.pending(&id));
    Ok(Json(shown))
}

#[derive(Deserialize)]
pub struct Prompt {
    text: String,
}

/// `POST /api/sessions/{id}/prompt {"text"}`: runs a turn, after those asked for; answers the
/// message's id once it is durably received.
pub async fn prompt(
    State(web): State<Web>,
    Path(id): Path<String>,
    Json(prompt): Json<Prompt>,
) -> Result<Json<Value>, ApiError> {
    let message_id = web.service.prompt(&id, prompt.text).await?;
    Ok(Json(json!({"messageId": message_id})))
}

/// `POST /api/sessions/{id}/cancel`: cancels the running turn, as Ctrl-C does.
pub async fn cancel(State(web): State<Web>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let cancelled = web.service.cancel(&id)?;
    Ok(Json(json!({"cancelled": cancelled})))
}

/// `POST /api/sessions/{id}/resume`: opens the session (repairing a turn a crash left open) and
/// runs the continuations its rows ask for.
pub async fn resume(State(web): State<Web>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    web.service.resume(&id).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct After {
    after: Option<u64>,
    /// Only the last `turns` turns' events of the log (when neither `Last-Event-ID` nor `after`
    /// says where to start).
    turns: Option<usize>,
}

/// `GET /api/sessions/{id}/events[?after=SEQ|?turns=N]`: the session's events after
/// `Last-Event-ID` (or `after`; or from the start of its last `turns` turns), then each as it
/// becomes durable; `status` events say when a turn runs.
pub async fn events(
    State(web): State<Web>,
    Path(id): Path<String>,
    Query(query): Query<After>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let last_seen = headers.get("last-event-id").and_then(|value| value.to_str().ok()?.trim().parse().ok());
    let after = match (last_seen.or(query.after), query.turns) {
        (None, Some(turns)) => before_last_turns(&web, &id, turns).await?,
        (after, _) => after,
    };
    let subscription = web.service.subscribe(&id, after).await?;
    let stream = futures_util::stream::unfold((subscription, web.stopping), next_event);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The seq just before the first event of session `id`'s last `turns` turns (`None`: it has no
/// more turns than that, or no log yet).
async fn before_last_turns(web: &Web, id: &str, turns: usize) -> Result<Option<u64>, ApiError> {
    let Ok(log) = web.log_of(id) else { return Ok(None) };
    let first = web
        .trajectories
        .with(log, move |trajectory| {
            let starts: Vec<u64> =
                trajectory.spans.iter().filter(|span| span.kind == "turn").map(|span| span.seqs[0]).collect();
            starts.len().checked_sub(turns.max(1)).map(|index| starts[index])
        })
        .await?;
    Ok(first.and_then(|seq| seq.checked_sub(1)))
}

type Following = (Subscription, watch::Receiver<bool>);

async fn next_event((mut subscription, mut stopping): Following) -> Option<(Result<Event, Infallible>, Following)> {
    let seen = tokio::select! {
        seen = subscription.next() => seen?,
        _ = stopping.wait_for(|stopping| *stopping) => return None,
    };
    let event = match seen {
        Ok(Seen::Event { seq, line }) => Event::default().id(seq.to_string()).event("event").data(line),
        Ok(Seen::Status { running }) => Event::default().event("status").data(json!({"running": running}).to_string()),
        Ok(Seen::Text { text, whole }) => {
            Event::default().event("text").data(json!({"text": text, "whole": whole}).to_string())
        }
        Ok(Seen::Tools { servers }) => Event::default().event("tools").data(servers.to_string()),
        Ok(Seen::Note { text }) => Event::default().event("note").data(json!({"text": text}).to_string()),
        Ok(Seen::AttemptEnded { completed }) => {
            Event::default().event("attempt-end").data(json!({"completed": completed}).to_string())
        }
        Err(err) => Event::default().event("problem").data(json!({"error": err.to_string()}).to_string()),
    };
    Some((Ok(event), (subscription, stopping)))
}
