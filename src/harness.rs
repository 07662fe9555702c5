//! Raw bytes into every part that reads untrusted input, as the server feeds them: the fuzz
//! targets (`fuzz/`) and the corpus replay (`tests/tools/fuzz_corpus.rs`) call these same
//! functions.
//!
//! Each function must return normally for every input; a panic, an abort or an endless loop
//! is a bug. Where an input is accepted, each also checks what must hold of the answer.
//! Not an API: hidden from the documentation, and free to change.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use prost::Message;

use crate::clock::{Clock, ManualClock, SECOND};
use crate::http::{HttpState, router};
use crate::insight::Insight;
use crate::limiter::{Limiter, LimiterOptions};
use crate::metrics::Metrics;
use crate::proto::RateLimitRequest;
use crate::rules::{LoadOptions, load_sources};
use crate::service::{RateLimitService, RlsService};
use crate::store::{MemoryOptions, MemoryStore, persist};

/// The rules requests are checked against: every algorithm, nesting, wildcards, shadow and quota
/// modes, `replaces`, `unlimited` and shards, in two domains (two files, split at `---`).
pub const RULES: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 5 }
    descriptors:
      - key: path
        value: "/v1/*"
        rate_limit: { window: 10s, requests_per_unit: 3, algorithm: sliding_log }
  - key: user
    value: "gold-*"
    rate_limit: { unit: second, requests_per_unit: 4, algorithm: token_bucket, burst: 6 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 2, algorithm: fixed_window, name: users }
  - key: ip
    shards: 4
    rate_limit: { unit: minute, requests_per_unit: 8 }
  - key: quota
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: free
    rate_limit: { unlimited: true }
  - key: replaced
    rate_limit: { unit: minute, requests_per_unit: 3, name: old }
  - key: replacer
    rate_limit: { unit: minute, requests_per_unit: 9, replaces: [ { name: old } ] }
---
domain: other
descriptors:
  - key: k
    rate_limits:
      - { unit: second, requests_per_unit: 2 }
      - { window: 1m, requests_per_unit: 10, algorithm: sliding_log }
"#;

/// The checking parts, built once per process: a limiter on a small memory store with a
/// manual clock, the gRPC service and the HTTP router on it, and a runtime to drive them.
struct Server {
    runtime: tokio::runtime::Runtime,
    clock: ManualClock,
    store: Arc<MemoryStore>,
    service: RlsService,
    http: axum::Router,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let sources: Vec<(PathBuf, String)> = RULES
            .split("\n---\n")
            .enumerate()
            .map(|(i, text)| (PathBuf::from(format!("rules{i}.yaml")), text.to_owned()))
            .collect();
        let rules = load_sources(&sources, &LoadOptions::default()).expect("harness rules load");
        let clock = ManualClock::new(1_767_225_600 * SECOND);
        let store = Arc::new(MemoryStore::with_options(MemoryOptions {
            shards: 4,
            max_counters: 10_000,
            journal: false,
            ..MemoryOptions::default()
        }));
        let rules = Arc::new(rules);
        let limiter = Arc::new(Limiter::new(
            Arc::new(ArcSwap::new(rules.clone())),
            store.clone(),
            Arc::new(clock.clone()),
            LimiterOptions::default(),
            Arc::new(Metrics::new(0.8, 100)),
        ));
        // The live figures of /ui are fed by both transports, as in the server.
        let insight = Arc::new(Insight::default());
        let http = router(HttpState {
            limiter: limiter.clone(),
            insight: insight.clone(),
            health: Arc::new(|| Ok(())),
            rlqs: rlqs_wing(&clock, &rules),
            hosts: Arc::new(crate::http::guard::AllowedHosts::new(None, &[])),
        });
        Server {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime"),
            clock,
            store,
            service: RlsService::new(limiter, insight, None),
            http,
        }
    })
}

/// Moves the clock on a little per input (so windows pass) and drops idle counters now and
/// then, so memory stays bounded however many inputs run.
fn tick(server: &Server) {
    server.clock.advance(Duration::from_millis(137));
    let now = server.clock.now();
    if now % (64 * SECOND) < 137_000_000 {
        use crate::store::Store;
        server.store.sweep(now);
    }
}

/// A rule file's bytes: loaded (YAML, schema, compile) as `sluice check` and hot reload do.
/// A file that loads must also render its `/rlconfig` view.
pub fn rule_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let sources = [(PathBuf::from("fuzz.yaml"), text.to_owned())];
    match load_sources(&sources, &LoadOptions::default()) {
        Ok(set) => {
            let _ = set.rlconfig_lines();
            let _ = set.summary();
        }
        Err(errors) => assert!(!errors.is_empty(), "a failed load has an error"),
    }
}

/// A gRPC request message's bytes: decoded as the codec decodes them, then mapped, validated
/// and checked by the service. A decision has one status per descriptor.
pub fn grpc_request(data: &[u8]) {
    let Ok(request) = RateLimitRequest::decode(data) else {
        return;
    };
    let server = server();
    tick(server);
    let descriptors = request.descriptors.len();
    let answer = server.runtime.block_on(
        server
            .service
            .should_rate_limit(tonic::Request::new(request)),
    );
    match answer {
        Ok(response) => assert_eq!(response.get_ref().statuses.len(), descriptors),
        Err(status) => assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}"),
    }
}

/// A `POST /json` body: through the HTTP router, as a client sends it. The answer is one of
/// the documented statuses.
pub fn json_body(data: &[u8]) {
    use tower_service::Service;
    let server = server();
    tick(server);
    let request = axum::http::Request::post("/json")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(data.to_vec()))
        .expect("a request");
    let mut http = server.http.clone();
    let response = server
        .runtime
        .block_on(http.call(request))
        .unwrap_or_else(|never| match never {});
    let status = response.status().as_u16();
    assert!(matches!(status, 200 | 400 | 413 | 429), "status {status}");
}

/// A data file's bytes. The first byte chooses: a journal or a snapshot file read as a start
/// reads it (header, frames, checksums, records), or the rest taken as a frame's payload that
/// passed its checksum (a fuzzer rarely forges a CRC-32), so the record decoder is reached.
pub fn data_file(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let memory = MemoryStore::with_options(MemoryOptions {
        shards: 2,
        max_counters: 1_000,
        journal: false,
        ..MemoryOptions::default()
    });
    let now = 1_767_225_600 * SECOND;
    let records = match mode % 3 {
        0 => persist::restore_bytes(bytes, false, &memory, now),
        1 => persist::restore_bytes(bytes, true, &memory, now),
        _ => persist::restore_payload(bytes, &memory, now),
    };
    assert!(memory.len() as u64 <= records, "a counter from nowhere");
}

/// A `--redis-url` value: checked as at start (nothing connects); the description that is
/// logged keeps the scheme and the hosts, replaces the credentials (everything between `://`
/// and the last `@`) with `***`, and a query string (`?password=…`) with `?***`.
pub fn redis_url(data: &[u8]) {
    let Ok(url) = std::str::from_utf8(data) else {
        return;
    };
    let _ = crate::store::redis::check_url(url);
    let described = crate::store::redis::describe_url(url);
    let (base, query) = match url.split_once('?') {
        Some((base, _)) => (base, "?***"),
        None => (url, ""),
    };
    if let Some((scheme, rest)) = base.split_once("://")
        && let Some((_, hosts)) = rest.rsplit_once('@')
    {
        assert_eq!(described, format!("{scheme}://***@{hosts}{query}"));
    }
}

/// A duration as a flag or the environment gives it, and as a rule's `window:`: parsed, and
/// when valid, written back and read again to the same value.
pub fn duration(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(value) = crate::clock::duration::parse(text) {
        let written = crate::clock::duration::format(value);
        let again = crate::clock::duration::parse(&written);
        assert_eq!(again, Ok(value), "{text:?} -> {written:?}");
    }
    let _ = crate::rules::parse_window(text);
}

/// An RLQS wing over `rules` (the page of `/ui` reads its book), alone, never stopped.
fn rlqs_wing(clock: &ManualClock, rules: &Arc<crate::rules::RuleSet>) -> crate::rlqs::Rlqs {
    let (_, rules) = tokio::sync::watch::channel(rules.clone());
    let parts = crate::rlqs::RlqsParts {
        settings: Default::default(),
        clock: Arc::new(clock.clone()),
        rules,
        shared: None,
        group: None,
        shutdown: Default::default(),
    };
    crate::rlqs::Rlqs::start(parts)
        .expect("the RLQS thread starts")
        .0
}
