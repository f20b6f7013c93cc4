//! The HTTP API under `/api/` (JSON), over the session service: sessions listed, created and
//! shown, a prompt, a cancel, a resume, and a session's events as Server-Sent Events whose `id`
//! is the log's `seq`, so a client that reconnects with `Last-Event-ID` gets every event after
//! the last it saw, once.

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::agent::target::resolve_for;
use crate::service::{Seen, ServiceError, SessionService, Subscription};
use dsh_session::lock::{Busy, LockError};
use dsh_session::meta::RunOverrides;
use dsh_session::store::SessionStore;
use dsh_session::summary;

/// What the handlers share.
#[derive(Clone)]
pub struct Web {
    pub service: SessionService,
    pub store: SessionStore,
    /// The profile and extra layers new sessions run with.
    pub profile: String,
    pub patches: Vec<std::path::PathBuf>,
    /// Becomes `true` when the server stops: the event streams end.
    pub stopping: watch::Receiver<bool>,
}

/// A failed request: its status and what it says.
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> ApiError {
        let status = match &error {
            ServiceError::NotFound(_) | ServiceError::Unknown(_) => StatusCode::NOT_FOUND,
            ServiceError::AlreadyOpen(_) => StatusCode::CONFLICT,
            ServiceError::Invalid(_) => StatusCode::BAD_REQUEST,
            ServiceError::Config { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ServiceError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ServiceError::Failed(err) if is_busy(err) => StatusCode::CONFLICT,
            ServiceError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, error.to_string())
    }
}

fn is_busy(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.is::<Busy>() || matches!(cause.downcast_ref::<LockError>(), Some(LockError::Busy(_))))
}

fn internal(error: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

/// `GET /api/sessions`: every session, the newest first, as `session list --json` shows them.
pub async fn list(State(web): State<Web>) -> Result<Json<Value>, ApiError> {
    let store = web.store.clone();
    let listed = tokio::task::spawn_blocking(move || summary::newest_first(&store, |_, _| {})).await;
    let summaries = listed.map_err(internal)?.map_err(internal)?;
    let sessions: Vec<Value> = summaries.iter().map(|(summary, _)| summary.json()).collect();
    Ok(Json(json!({"sessions": sessions})))
}

#[derive(Deserialize, Default)]
pub struct NewSession {
    profile: Option<String>,
}

/// `POST /api/sessions {"profile"?}`: a new session, open on this server.
pub async fn create(State(web): State<Web>, body: Option<Json<NewSession>>) -> Result<Json<Value>, ApiError> {
    let asked = body.map(|Json(body)| body).unwrap_or_default();
    let profile = asked.profile.unwrap_or(web.profile);
    let target =
        resolve_for(web.store, None, Some(&profile), &web.patches, &RunOverrides::default()).map_err(internal)?;
    let id = web.service.open(target).await?;
    Ok(Json(json!({"id": id, "profile": profile})))
}

/// `GET /api/sessions/{id}`: the session's summary.
pub async fn show(State(web): State<Web>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let log = web.store.session_by_id(&id).map_err(|err| ApiError(StatusCode::NOT_FOUND, err.to_string()))?;
    let summarized = tokio::task::spawn_blocking(move || summary::summarize(&log)).await;
    let summary = summarized.map_err(internal)?.map_err(|err| internal(format!("{err:#}")))?;
    Ok(Json(summary.json()))
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
}

/// `GET /api/sessions/{id}/events[?after=SEQ]`: the session's events after `Last-Event-ID` (or
/// `after`), then each as it becomes durable; `status` events say when a turn runs.
pub async fn events(
    State(web): State<Web>,
    Path(id): Path<String>,
    Query(query): Query<After>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let last_seen = headers.get("last-event-id").and_then(|value| value.to_str().ok()?.trim().parse().ok());
    let subscription = web.service.subscribe(&id, last_seen.or(query.after)).await?;
    let stream = futures_util::stream::unfold((subscription, web.stopping), next_event);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
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
        Err(err) => Event::default().event("problem").data(json!({"error": err.to_string()}).to_string()),
    };
    Some((Ok(event), (subscription, stopping)))
}
