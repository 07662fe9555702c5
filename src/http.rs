//! The HTTP endpoints (axum): `/healthcheck`, `/metrics`, `POST /json`, `/rlconfig`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::limiter::{Code, LimitError, Limiter};
use crate::proto::RateLimitRequest;
use crate::service;

/// What the HTTP handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// The limiter (its rules and metrics too).
    pub limiter: Arc<Limiter>,
    /// Set once shutdown begins: health turns 503 at once.
    pub draining: Arc<AtomicBool>,
}

/// The HTTP router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(metrics))
        .route("/json", post(json))
        .route("/rlconfig", get(rlconfig))
        .with_state(state)
}

/// 200 `OK` while serving; 503 once draining, before the first rules arrive (xDS), or while
/// the counter store is unhealthy (for Redis: its circuit breaker has stayed open for a while,
/// so a blip does not flap it).
async fn healthcheck(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if state.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else if !state.limiter.has_rules() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no rate limit configuration loaded",
        )
    } else if !state.limiter.store_healthy() {
        (StatusCode::SERVICE_UNAVAILABLE, "counter store unavailable")
    } else {
        (StatusCode::OK, "OK")
    }
}

/// Prometheus text format.
async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.limiter.metrics().render(),
    )
}

/// envoyproxy/ratelimit's JSON API: a protojson `RateLimitRequest` in, a protojson
/// `RateLimitResponse` out; 200 OK, 429 OVER_LIMIT, 400 for a bad body or request, 503 when the
/// counter store is unavailable.
async fn json(State(state): State<HttpState>, body: Bytes) -> Response {
    let request: RateLimitRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("invalid RateLimitRequest JSON: {e}\n"),
            )
                .into_response();
        }
    };
    let request = match service::to_domain(request) {
        Ok(request) => request,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    match state.limiter.check(&request).await {
        Ok(decision) => {
            let status = match decision.code {
                Code::Ok => StatusCode::OK,
                Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
            };
            let body = serde_json::to_string(&service::to_proto(decision)).unwrap_or_default();
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(LimitError::Invalid(e)) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
        Err(e @ (LimitError::Store(_) | LimitError::NoRules)) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
        }
    }
}

/// The loaded rules, one line per limited node; rules from xDS are preceded by a
/// `# xds version <version>` line.
async fn rlconfig(State(state): State<HttpState>) -> String {
    let rules = state.limiter.rules();
    let mut text = String::new();
    if let Some(version) = &rules.version {
        text = format!("# xds version {version}\n");
    }
    text.push_str(&rules.rlconfig_lines().join("\n"));
    text.push('\n');
    text
}
