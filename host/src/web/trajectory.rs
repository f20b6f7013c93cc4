//! The Trajectory view's data: a session's spans ([`dsh_session::trajectory`]) a window at a
//! time, so a page over a session of any length loads only the rows it shows, and the events a
//! selected span covers.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::{internal, ApiError};
use super::state::Web;
use dsh_session::store::LogRef;
use dsh_session::trajectory::{Lane, Trajectory};

/// The most spans one request answers.
pub const MAX_SPANS_PER_WINDOW: usize = 2_000;
/// The slices the timing overview divides a session's time into.
pub const OVERVIEW_SLICES: usize = 120;
/// The most events one request for a span's events answers.
pub const MAX_EVENTS_PER_RANGE: u64 = 2_000;

#[derive(Deserialize)]
pub struct Window {
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

/// `GET /api/sessions/{id}/trajectory[?offset=N&limit=M]`: `{start, end, total, offset, spans,
/// turns, overview}` — the spans from `offset` on (at most [`MAX_SPANS_PER_WINDOW`]), the bounds
/// of each turn they belong to (`[start, end]`, `end` null while it runs: the axis they are drawn
/// on), and where the session's time went ([`Trajectory::overview`], [`OVERVIEW_SLICES`] slices).
pub async fn window(
    State(web): State<Web>,
    Path(id): Path<String>,
    Query(window): Query<Window>,
) -> Result<Json<Value>, ApiError> {
    let log = web.log_of(&id)?;
    let limit = window.limit.unwrap_or(MAX_SPANS_PER_WINDOW).min(MAX_SPANS_PER_WINDOW);
    let answer = web.trajectories.with(log, move |trajectory| window_of(trajectory, window.offset, limit)).await?;
    Ok(Json(answer))
}

fn window_of(trajectory: &Trajectory, offset: usize, limit: usize) -> Value {
    let spans = trajectory.spans.iter().skip(offset).take(limit);
    let mut turns = Map::new();
    for span in spans.clone() {
        turns.entry(span.turn.to_string()).or_insert_with(|| turn_bounds(trajectory, span.turn));
    }
    json!({
        "start": trajectory.start,
        "end": trajectory.end,
        "total": trajectory.spans.len(),
        "offset": offset,
        "spans": spans.collect::<Vec<_>>(),
        "turns": turns,
        "overview": trajectory.overview(OVERVIEW_SLICES),
    })
}

/// Where turn `turn`'s rows are drawn: from its start to its end (or the log's last event).
fn turn_bounds(trajectory: &Trajectory, turn: u64) -> Value {
    let span = trajectory.spans.iter().find(|span| span.lane == Lane::Turn && span.kind == "turn" && span.turn == turn);
    match span {
        Some(span) => json!([span.start, span.end]),
        None => json!([trajectory.start, trajectory.end]),
    }
}

#[derive(Deserialize)]
pub struct Range {
    from: u64,
    to: u64,
}

/// `GET /api/sessions/{id}/log?from=A&to=B`: `{events}`, the log's events with `seq` from `A`
/// to `B` as written (at most [`MAX_EVENTS_PER_RANGE`]).
pub async fn range(
    State(web): State<Web>,
    Path(id): Path<String>,
    Query(range): Query<Range>,
) -> Result<Json<Value>, ApiError> {
    if range.to < range.from || range.to - range.from >= MAX_EVENTS_PER_RANGE {
        let message = format!("from..to must name at most {MAX_EVENTS_PER_RANGE} events, from ≤ to");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, message));
    }
    let log = web.log_of(&id)?;
    let read = tokio::task::spawn_blocking(move || events_between(&log, range)).await;
    let events = read.map_err(internal)??;
    Ok(Json(json!({"events": events})))
}

fn events_between(log: &LogRef, range: Range) -> Result<Vec<Value>, ApiError> {
    let mut reader = log.reader().map_err(internal)?;
    let mut events = Vec::new();
    while let Some(next) = reader.next_event() {
        let Ok(event) = next.map_err(internal)? else { break };
        let Some(seq) = event.seq.map(|seq| seq as u64) else { continue };
        if seq > range.to {
            break;
        }
        if seq >= range.from {
            events.push(serde_json::from_str(event.line).unwrap_or(Value::Null));
        }
    }
    Ok(events)
}
