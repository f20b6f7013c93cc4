//! `dsh web`: the browser front end and its HTTP API, a server on the session service
//! ([`crate::service`]) — the one the SDK's runtime and `dsh chat` run on. It owns the routes:
//! sessions and their events ([`api`]), trajectories ([`trajectory`], read once per log change by
//! [`cache`]), plugins and routes ([`commands`], answered by `dsh` commands through [`runner`]);
//! what handlers share ([`state`]) and how they fail ([`error`]); who may use them ([`guard`]);
//! and the page, whose files are built into the binary (no Node, no network at build or run
//! time).

pub mod api;
pub mod cache;
pub mod commands;
pub mod error;
pub mod guard;
pub mod runner;
pub mod state;
pub mod trajectory;

use std::future::Future;
use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

pub use guard::{Guard, TOKEN_PARAMETER};
pub use state::Web;

/// The page and its files: (path, content type, body).
const ASSETS: [(&str, &str, &str); 3] = [
    ("/", "text/html; charset=utf-8", include_str!("assets/index.html")),
    ("/app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("/app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
];

/// Every route, behind the guard.
pub fn router(web: Web, guard: Guard) -> Router {
    let mut router = Router::new()
        .route("/api/sessions", get(api::list).post(api::create))
        .route("/api/sessions/{id}", get(api::show))
        .route("/api/sessions/{id}/prompt", post(api::prompt))
        .route("/api/sessions/{id}/cancel", post(api::cancel))
        .route("/api/sessions/{id}/resume", post(api::resume))
        .route("/api/sessions/{id}/events", get(api::events))
        .route("/api/sessions/{id}/trajectory", get(trajectory::window))
        .route("/api/sessions/{id}/log", get(trajectory::range))
        .route("/api/sessions/{id}/replay", post(commands::replay))
        .route("/api/profiles", get(commands::profiles))
        .route("/api/profiles/{profile}/waterfall", get(commands::waterfall))
        .route("/api/profiles/{profile}/explain", get(commands::explain))
        .route("/api/profiles/{profile}/rows", get(commands::rows))
        .route("/api/profiles/{profile}/rows/{row}", post(commands::toggle))
        .route("/api/profiles/{profile}/plugins", get(commands::plugins).post(commands::add))
        .route("/api/profiles/{profile}/plugins/{package}", axum::routing::delete(commands::remove));
    for (path, content_type, body) in ASSETS {
        router = router
            .route(path, get(move || async move { ([(header::CONTENT_TYPE, content_type)], body).into_response() }));
    }
    router.with_state(web).layer(axum::middleware::from_fn_with_state(Arc::new(guard), guard::check))
}

/// Serves `router` on `listener` until `stop` completes; the connections still open are then
/// closed once their answers are out (the event streams end first).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(stop).await
}
