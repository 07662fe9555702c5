//! The HTTP endpoints (axum): `/healthcheck`, `/metrics`, `POST /json`, `/rlconfig`, the
//! operator page under `/ui` (`ui/`); and the router of a separate metrics listener. Their
//! connections are bounded in number and time by `serve.rs`.

pub mod serve;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

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
}

/// The HTTP router.
pub fn router(state: HttpState) -> Router {
    let ui = ui::router(ui::UiState {
        limiter: state.limiter.clone(),
        insight: state.insight.clone(),
        rlqs: state.rlqs.clone(),
    });
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(metrics_of))
        .route("/json", post(json))
        .route("/rlconfig", get(rlconfig))
        .with_state(state)
        .merge(ui)
}

/// The router of a listener that serves only metrics, on `path`.
pub fn metrics_router(limiter: Arc<Limiter>, path: &str) -> Router {
    Router::new().route(path, get(metrics)).with_state(limiter)
}

/// 200 `OK` while healthy; 503 with the reason otherwise (see `app`'s health).
async fn healthcheck(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    match (state.health)() {
        Ok(()) => (StatusCode::OK, "OK"),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
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
/// counter store is unavailable. Only JSON bodies from no browser origin but the server's own
/// (see [`json_call_allowed`]).
async fn json(State(state): State<HttpState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refusal) = json_call_allowed(&headers) {
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

/// Whether a `/json` call may charge counters: its body must be declared `application/json`
/// (415 otherwise), and a browser's call must come from this server's own origin (403
/// otherwise). A plain-text POST is what any web page may send across origins without asking,
/// so without these checks a page opened inside the network could spend rate-limit budget.
fn json_call_allowed(headers: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "POST /json takes a body of Content-Type: application/json\n",
        ));
    }
    if cross_site(headers) {
        return Err((
            StatusCode::FORBIDDEN,
            "POST /json refuses calls from another origin\n",
        ));
    }
    Ok(())
}

/// Whether a browser sent this request on behalf of another site: `Sec-Fetch-Site` says so
/// (anything but `same-origin` or `none`), or `Origin` names another host than `Host`.
/// Clients that are not browsers send neither header.
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && site != "same-origin"
        && site != "none"
    {
        return true;
    }
    match text(header::ORIGIN) {
        None => false,
        // `null` (a sandboxed frame, a file) is no origin of ours either.
        Some(origin) => match origin.split_once("://") {
            Some((_, authority)) => Some(authority) != text(header::HOST),
            None => true,
        },
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
