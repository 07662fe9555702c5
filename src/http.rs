//! The HTTP endpoints (axum): `/healthcheck` and `/rlconfig`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::limiter::Limiter;

/// What the HTTP handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// The limiter (for its current rules).
    pub limiter: Arc<Limiter>,
    /// Set once shutdown begins: health turns 503 at once.
    pub draining: Arc<AtomicBool>,
}

/// The HTTP router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/rlconfig", get(rlconfig))
        .with_state(state)
}

/// 200 `OK` while serving; 503 once draining.
async fn healthcheck(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "OK")
    }
}

/// The loaded rules, one line per limited node.
async fn rlconfig(State(state): State<HttpState>) -> String {
    let mut text = state.limiter.rules().rlconfig_lines().join("\n");
    text.push('\n');
    text
}
