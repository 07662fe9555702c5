//! The admin listener (`--admin-addr`, off by default): a descriptor's counters inspected
//! (`GET /counters`) and reset (`DELETE /counters`), behind a bearer token from
//! `--admin-token-file` (`tokens.rs`). Transport only: the descriptor is matched and its
//! counters read or reset by the limiter (`Limiter::counters`, `Limiter::reset_counters`),
//! never around the rules. Served by the HTTP listener's connection loop (`http/serve.rs`).
//!
//! Every request without a valid token is refused with 401 before anything is read; every
//! reset writes one audit line (target `sluice::audit`: the token's name, the client's
//! address, what was reset) and counts `sluice_admin_resets_total`. What the client wrote
//! (domain, descriptor) reaches that line escaped and bounded ([`LogText`]): it cannot forge a
//! line or send escapes to a terminal.

mod json;
mod query;
mod tokens;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

pub use self::tokens::{TokenError, Tokens};
use crate::http::serve::Peer;
use crate::limiter::{CountersError, Limiter};
use crate::log_text::LogText;
use crate::metrics::AdminOutcome;
use crate::store::StoreError;

/// The tracing target of the audit lines.
pub const AUDIT_TARGET: &str = "sluice::audit";

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// The limiter: its rules, store and metrics.
    pub limiter: Arc<Limiter>,
    /// The tokens in force.
    pub tokens: Tokens,
}

/// Who made a request: the token's name (put in the request by the token check).
#[derive(Debug, Clone)]
struct Caller(Arc<str>);

/// The admin router: every route behind the token check.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/counters", get(read).delete(reset))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .fallback(not_a_route)
        .with_state(state)
}

/// Lets a request with a valid `Authorization: Bearer <token>` through, naming its caller;
/// anything else is 401 with `WWW-Authenticate: Bearer`, and nothing is done.
async fn authorize(State(state): State<AdminState>, mut request: Request, next: Next) -> Response {
    let presented = bearer(request.headers());
    let Some(name) = presented.and_then(|token| state.tokens.name_of(token)) else {
        let peer = request.extensions().get::<Peer>().map(|p| p.0);
        tracing::debug!(peer = ?peer, presented = presented.is_some(), "admin request refused: no valid bearer token");
        return unauthorized(state.limiter.metrics(), presented.is_some());
    };
    request.extensions_mut().insert(Caller(name));
    next.run(request).await
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// `GET /counters?domain=D&descriptor=k=v,...`: each limit the descriptor reaches, with its
/// counters' state.
async fn read(State(state): State<AdminState>, request: Request) -> Response {
    let metrics = state.limiter.metrics();
    let query = match query::parse(request.uri().query()) {
        Ok(query) => query,
        Err(e) => return refused(metrics, AdminOutcome::BadRequest, e),
    };
    let rules = state.limiter.rules();
    match state
        .limiter
        .counters(&rules, &query.domain, &query.entries)
        .await
    {
        Ok(counters) => {
            metrics.record_admin_request(AdminOutcome::Ok);
            ok(json::counters(&counters))
        }
        Err(e) => counters_failed(metrics, e),
    }
}

/// `DELETE /counters?domain=D&descriptor=k=v,...`: resets every counter of the descriptor,
/// audited and counted.
async fn reset(State(state): State<AdminState>, request: Request) -> Response {
    let metrics = state.limiter.metrics();
    let query = match query::parse(request.uri().query()) {
        Ok(query) => query,
        Err(e) => return refused(metrics, AdminOutcome::BadRequest, e),
    };
    let caller = request.extensions().get::<Caller>().cloned();
    let peer = request.extensions().get::<Peer>().map(|p| p.0);
    let rules = state.limiter.rules();
    let reset = state
        .limiter
        .reset_counters(&rules, &query.domain, &query.entries)
        .await;
    let reset = match reset {
        Ok(reset) => reset,
        Err(e) => {
            if let CountersError::Store(StoreError::ResetNotPersisted(_)) = &e {
                // Done in memory, so audited as done; the answer says the disk lags.
                tracing::warn!(
                    target: AUDIT_TARGET,
                    token = caller.as_ref().map_or("", |c| &*c.0),
                    peer = %peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
                    domain = %LogText(&query.domain),
                    descriptor = %LogText(&descriptor_text(&query.entries)),
                    error = %LogText(&e.to_string()),
                    "counters reset in memory only"
                );
                metrics.record_admin_reset(&query.domain);
            }
            return counters_failed(metrics, e);
        }
    };
    let limits: Vec<String> = reset
        .counters
        .limits
        .iter()
        .filter(|l| !l.counters.is_empty())
        .map(|l| {
            let name = l
                .rule
                .name
                .as_deref()
                .unwrap_or(&reset.counters.node.full_key);
            format!("{name}#{} ({} counters)", l.rule.index, l.counters.len())
        })
        .collect();
    tracing::info!(
        target: AUDIT_TARGET,
        token = caller.as_ref().map_or("", |c| &*c.0),
        peer = %peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
        domain = %LogText(&query.domain),
        descriptor = %LogText(&descriptor_text(&query.entries)),
        rule = %LogText(&reset.counters.node.full_key),
        limits = %LogText(&limits.join(", ")),
        counters_cleared = reset.cleared.counters,
        leased_hits_returned = reset.cleared.leased_hits,
        "counters reset"
    );
    metrics.record_admin_reset(&query.domain);
    metrics.record_admin_request(AdminOutcome::Ok);
    ok(json::reset(&reset))
}

/// A descriptor as the query wrote it: `k=v,k=v`.
fn descriptor_text(entries: &[(String, String)]) -> String {
    let pairs: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

/// Any other path: 404, behind the token check like the rest (nothing is told to a caller
/// without a token).
async fn not_a_route(State(state): State<AdminState>, request: Request) -> Response {
    let metrics = state.limiter.metrics();
    if bearer(request.headers())
        .and_then(|t| state.tokens.name_of(t))
        .is_none()
    {
        return unauthorized(metrics, bearer(request.headers()).is_some());
    }
    refused(
        metrics,
        AdminOutcome::NotFound,
        format!(
            "no admin endpoint {} {} (GET or DELETE /counters?domain=D&descriptor=k=v,...)",
            request.method(),
            request.uri().path()
        ),
    )
}

/// 401 with `WWW-Authenticate: Bearer`, counted; `presented`: a token was given (not valid).
fn unauthorized(metrics: &crate::metrics::Metrics, presented: bool) -> Response {
    metrics.record_admin_request(AdminOutcome::Unauthorized);
    let error = match presented {
        true => "the bearer token is not valid",
        false => "an Authorization: Bearer <token> header is required",
    };
    let mut response = failure(StatusCode::UNAUTHORIZED, error);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"sluice-admin\""),
    );
    response
}

/// The answer to a limiter refusal: 404 when no rule limits the descriptor, 503 when no rules
/// are loaded yet or the store failed.
fn counters_failed(metrics: &crate::metrics::Metrics, error: CountersError) -> Response {
    let outcome = match error {
        CountersError::NotLimited(_) => AdminOutcome::NotFound,
        CountersError::NoRules | CountersError::Store(_) => AdminOutcome::StoreError,
    };
    refused(metrics, outcome, error.to_string())
}

fn refused(
    metrics: &crate::metrics::Metrics,
    outcome: AdminOutcome,
    error: impl Into<String>,
) -> Response {
    metrics.record_admin_request(outcome);
    let status = match outcome {
        AdminOutcome::Ok => StatusCode::OK,
        AdminOutcome::Unauthorized => StatusCode::UNAUTHORIZED,
        AdminOutcome::NotFound => StatusCode::NOT_FOUND,
        AdminOutcome::BadRequest => StatusCode::BAD_REQUEST,
        AdminOutcome::StoreError => StatusCode::SERVICE_UNAVAILABLE,
    };
    failure(status, &error.into())
}

fn failure(status: StatusCode, error: &str) -> Response {
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(json!({ "error": error })),
    )
        .into_response()
}

fn ok(body: serde_json::Value) -> Response {
    (
        StatusCode::OK,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(body),
    )
        .into_response()
}
