//! `dsh web`: the browser front end and its HTTP API, a server on the session service
//! ([`crate::service`]) — the one the SDK's runtime and `dsh chat` run on. It owns the routes
//! ([`api`]), who may use them ([`guard`]) and the page, whose files are built into the binary
//! (no Node, no network at build or run time).

pub mod api;
pub mod guard;

use std::future::Future;
use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

pub use api::Web;
pub use guard::{Guard, TOKEN_PARAMETER};

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
        .route("/api/sessions/{id}/events", get(api::events));
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
