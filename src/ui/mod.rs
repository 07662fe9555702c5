//! The operator page `/ui`: the rules per domain as a tree, an "explain this request" form
//! (check-only: nothing is charged), the keys limited most in the last minutes and decision
//! rates. Everything is served by the binary (no external assets) under a strict
//! Content-Security-Policy: the script and the style sheet are same-origin files, nothing
//! inline. The page reads six JSON endpoints under `/ui/api/` (`json.rs`, `rlqs_json.rs` and
//! `region_json.rs` shape them): rules, live figures, an explanation, the walk of an RLQS bucket
//! id, a page of the RLQS book's buckets with each stream's demand and share (built on the book's
//! own thread, at most 200 buckets: bounded work, off the request workers), and the region's
//! portions of global limits. The API is paced (`pace.rs`: 50 calls a second across its
//! routes), so clients polling it back to back cannot take the CPU the data path needs.

mod json;
mod pace;
mod region_json;
mod rlqs_json;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::http::guard::{self, AllowedHosts};
use crate::insight::Insight;
use crate::limiter::Limiter;
use crate::limiter::parse_descriptor;
use crate::rlqs::Rlqs;
use crate::rules::bucket::{parse_bucket, walk_bucket};

/// The policy of every `/ui` response: only same-origin script, style and fetches; no inline
/// code, no framing, no forms posting elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Most descriptors one explain request may carry.
const MAX_EXPLAIN_DESCRIPTORS: usize = crate::limiter::MAX_DESCRIPTORS;
/// Most keys listed as limited most.
const TOP_KEYS: usize = 20;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");
const ICON: &str = include_str!("favicon.svg");

/// The page's files: path, content type, body.
const ASSETS: [(&str, &str, &str); 5] = [
    ("/ui", "text/html; charset=utf-8", PAGE),
    ("/ui/", "text/html; charset=utf-8", PAGE),
    ("/ui/app.js", "text/javascript; charset=utf-8", SCRIPT),
    ("/ui/app.css", "text/css; charset=utf-8", STYLE),
    ("/ui/favicon.svg", "image/svg+xml", ICON),
];

/// What the page reads.
#[derive(Clone)]
pub struct UiState {
    /// The rules, the store (for explanations).
    pub limiter: Arc<Limiter>,
    /// The live figures.
    pub insight: Arc<Insight>,
    /// The RLQS wing, whose book's shares it shows.
    pub rlqs: Rlqs,
    /// The host names a browser may reach this server by.
    pub hosts: Arc<AllowedHosts>,
}

/// The `/ui` routes, with their state.
pub fn router(state: UiState) -> Router {
    let pages = Arc::new(rlqs_json::Pages::default());
    let api = Router::new()
        .route("/ui/api/rules", get(rules))
        .route("/ui/api/live", get(live))
        .route("/ui/api/explain", post(explain))
        .route("/ui/api/explain-bucket", post(explain_bucket))
        .route(
            "/ui/api/quota",
            get(move |state, query| rlqs_page(state, query, pages)),
        )
        .route("/ui/api/region", get(region))
        .route_layer(middleware::from_fn_with_state(
            pace::Pacer::new(),
            pace::paced,
        ));
    let mut router = api.with_state(state);
    for (path, content_type, body) in ASSETS {
        router = router.route(path, get(move || async move { asset(content_type, body) }));
    }
    router
}

/// A static file with the page's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    secured((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// JSON with the page's security headers, never cached (it is live).
fn json_response(status: StatusCode, value: serde_json::Value) -> Response {
    json_text(status, value.to_string())
}

/// A JSON body already written.
fn json_text(status: StatusCode, body: String) -> Response {
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secured(response)
}

fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// The loaded rules per domain, as trees.
async fn rules(State(state): State<UiState>) -> Response {
    json_response(StatusCode::OK, json::rules(&state.limiter.rules()))
}

/// Decision rates and the keys limited most.
async fn live(State(state): State<UiState>) -> Response {
    json_response(
        StatusCode::OK,
        json::live(&state.insight.rates(), &state.insight.top(TOP_KEYS)),
    )
}

/// A page of the RLQS book's buckets with each stream's demand and share:
/// `?after=<the previous page's next>&limit=<n>` (at most 200).
/// The same page is served again for a second (`rlqs_json::Pages`).
async fn rlqs_page(
    State(state): State<UiState>,
    RawQuery(query): RawQuery,
    pages: Arc<rlqs_json::Pages>,
) -> Response {
    let query = match rlqs_json::query(query.as_deref().unwrap_or_default()) {
        Ok(query) => query,
        Err(message) => return bad_request(message),
    };
    match pages.get(&state.rlqs, query).await {
        Some(body) => json_text(StatusCode::OK, body.to_string()),
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "error": "the server is shutting down" }),
        ),
    }
}

/// The region's members, floor and global store, and the portions of the units this replica
/// enforces (`{"region": null}` when the server is not one of several regions).
async fn region(State(state): State<UiState>) -> Response {
    let figures = state.limiter.region_figures();
    json_response(StatusCode::OK, region_json::region(figures.as_ref()))
}

/// Explains `{"domain": "edge", "descriptors": ["k=v,k2=v2", ...]}` against the live rules
/// and counters, charging nothing.
async fn explain(State(state): State<UiState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = guard::check(&headers, &state.hosts, "/ui") {
        return refusal(refused);
    }
    match explain_input(&body) {
        Ok((domain, descriptors)) => {
            let rules = state.limiter.rules();
            let explanation = state.limiter.explain(&rules, &domain, &descriptors).await;
            json_response(StatusCode::OK, json::explanation(&explanation))
        }
        Err(message) => bad_request(message),
    }
}

/// Explains an RLQS bucket, `{"domain": "q", "bucket": "k=v,k2=v2"}`, against the live
/// rules: every candidate the search tried, the rule reached and the bucket action.
async fn explain_bucket(State(state): State<UiState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = guard::check(&headers, &state.hosts, "/ui") {
        return refusal(refused);
    }
    match bucket_input(&body) {
        Ok((domain, bucket)) => {
            let rules = state.limiter.rules();
            let walk = walk_bucket(&rules, &domain, &bucket);
            json_response(StatusCode::OK, json::bucket_walk(&domain, &bucket, &walk))
        }
        Err(message) => bad_request(message),
    }
}

/// A browser's call the guard refused (see `http::guard`), as the page's JSON error.
fn refusal((status, message): guard::Refusal) -> Response {
    json_response(status, serde_json::json!({ "error": message }))
}

/// A 400 answer saying what is wrong with the request.
fn bad_request(message: String) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        serde_json::json!({ "error": message }),
    )
}

/// A request body as JSON and its domain (required), or why it is not one.
fn with_domain(body: &[u8]) -> Result<(serde_json::Value, String), String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let domain = value["domain"]
        .as_str()
        .filter(|d| !d.is_empty())
        .ok_or("a domain is required")?
        .to_owned();
    Ok((value, domain))
}

/// The domain and bucket id of a bucket explain request, or why it is not one.
fn bucket_input(body: &[u8]) -> Result<(String, BTreeMap<String, String>), String> {
    let (value, domain) = with_domain(body)?;
    let text = value["bucket"]
        .as_str()
        .filter(|b| !b.trim().is_empty())
        .ok_or("a bucket id is required, as a string k=v[,k=v]")?;
    Ok((domain, parse_bucket(text)?))
}

/// A descriptor's entries.
type Entries = Vec<(String, String)>;

/// The domain and descriptors of an explain request, or why it is not one.
fn explain_input(body: &[u8]) -> Result<(String, Vec<Entries>), String> {
    let (value, domain) = with_domain(body)?;
    let texts = value["descriptors"]
        .as_array()
        .filter(|d| !d.is_empty())
        .ok_or("at least one descriptor is required")?;
    if texts.len() > MAX_EXPLAIN_DESCRIPTORS {
        return Err(format!(
            "at most {MAX_EXPLAIN_DESCRIPTORS} descriptors, got {}",
            texts.len()
        ));
    }
    let descriptors = texts
        .iter()
        .map(|t| {
            let text = t.as_str().ok_or("each descriptor is a string k=v[,k=v]")?;
            parse_descriptor(text)
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((domain, descriptors))
}
