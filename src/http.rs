//! The HTTP endpoints (axum): `/healthcheck`, `/metrics`, `POST /json`, `/rlconfig`, the
//! operator page under `/ui` (`ui/`); and the router of a separate metrics listener. Their
//! connections are bounded in number and time by `serve.rs`; which calls a browser may make is
//! `guard.rs`'s to say.

pub mod guard;
pub mod serve;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

use crate::insight::Insight;
use crate::limiter::{Code, LimitError, Limiter};
use crate::proto::RateLimitRequest;
use crate::{service, ui};

/// Whether the server is healthy: `Ok`, or the reason it is not (the body of the 503).
pub type HealthCheck = Arc<dyn Fn() -> Result<(), &'static str> + Send + Sync>;

/// What the HTTP handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// The limiter (its rules and metrics too).
    pub limiter: Arc<Limiter>,
    /// Live traffic figures, fed by `/json` too and shown by `/ui`.
    pub insight: Arc<Insight>,
    /// Health, as `/healthcheck` reports it.
    pub health: HealthCheck,
    /// The RLQS wing, whose shares `/ui` shows.
    pub rlqs: crate::rlqs::Rlqs,
    /// The host names a browser may reach this server by (`/json` and `/ui`'s POSTs).
    pub hosts: Arc<guard::AllowedHosts>,
}

/// The HTTP router.
pub fn router(state: HttpState) -> Router {
    let ui = ui::router(ui::UiState {
        limiter: state.limiter.clone(),
        insight: state.insight.clone(),
        rlqs: state.rlqs.clone(),
        hosts: state.hosts.clone(),
    });
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(metrics_of))
        // Any method, as envoyproxy/ratelimit serves it (its handler does not check it).
        .route("/json", any(json))
        .route("/rlconfig", get(rlconfig))
        .with_state(state)
        .merge(ui)
}

/// The router of a listener that serves only metrics, on `path`.
pub fn metrics_router(limiter: Arc<Limiter>, path: &str) -> Router {
    Router::new().route(path, get(metrics)).with_state(limiter)
}

/// 200 `OK` while healthy; 503 with the reason otherwise (see `app`'s health). One of several
/// regions adds a line on its global store: a region cut off from it serves on its portions and
/// floors, degraded but healthy.
async fn healthcheck(State(state): State<HttpState>) -> (StatusCode, String) {
    match (state.health)() {
        Ok(()) => match state.limiter.region_health() {
            Some(detail) => (StatusCode::OK, format!("OK\n{detail}\n")),
            None => (StatusCode::OK, "OK".to_owned()),
        },
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_owned()),
    }
}

async fn metrics_of(State(state): State<HttpState>) -> impl IntoResponse {
    metrics(State(state.limiter)).await
}

/// Prometheus text format.
async fn metrics(State(limiter): State<Arc<Limiter>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        limiter.metrics().render(),
    )
}

/// envoyproxy/ratelimit's JSON API: a protojson `RateLimitRequest` in, a protojson
/// `RateLimitResponse` out; 200 OK, 429 OVER_LIMIT, 400 for a bad body or request, 503 when the
/// counter store is unavailable. A browser's call only from this server's own page, through
/// one of its names, with a JSON body; any other client's as envoyproxy/ratelimit takes it
/// (see [`guard`]).
async fn json(State(state): State<HttpState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refusal) = guard::check(&headers, &state.hosts, "/json") {
        return refusal.into_response();
    }
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
        Err(e) => {
            state.insight.observe_invalid();
            return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
        }
    };
    let result = state.limiter.check(&request).await;
    state.insight.observe(&request, &result);
    match result {
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
