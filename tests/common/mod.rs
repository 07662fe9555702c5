//! Shared test helpers: an in-process server on port 0 with a manual clock, gRPC clients and
//! request builders, HTTP and metrics helpers, polling, and store charges. The real binary as a
//! child process is in [`process`].
#![allow(dead_code)]

pub mod admin;
pub mod cluster;
pub mod envoy;
pub mod http1;
pub mod otlp;
pub mod process;
pub mod ratelimit;
pub mod redis;
pub mod relay;
pub mod rlqs;
pub mod sentinel;
pub mod yaml;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::algorithm::{Algorithm, Limit};
use sluice::app::{self, Running, Settings};
use sluice::app::{ServerTls, TlsSettings};
use sluice::clock::{ManualClock, Nanos, SECOND};
use sluice::limiter::LimiterOptions;
use sluice::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use sluice::rules::LoadOptions;
use sluice::store::{Charge, CounterKeyBuilder, Gate, MemoryStore, Store};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
pub use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// 2026-01-01T00:00:00Z plus 2 s: two seconds past a minute (and hour, and day) boundary.
pub const START: u64 = 1_767_225_600 * SECOND + 2 * SECOND;

/// A server running in this process.
pub struct TestServer {
    pub clock: ManualClock,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The admin listener's address, when it is on.
    pub admin_addr: Option<SocketAddr>,
    pub dir: tempfile::TempDir,
    /// The live TLS state when started with [`TestServer::start_tls`].
    pub tls: Option<ServerTls>,
    running: Option<Running>,
}

impl TestServer {
    /// Starts a server on port 0 with one rule file holding `yaml`.
    pub async fn start(yaml: &str) -> Self {
        Self::start_with(yaml, LimiterOptions::default()).await
    }

    /// As [`TestServer::start`], with limiter options.
    pub async fn start_with(yaml: &str, limiter: LimiterOptions) -> Self {
        Self::start_in(rules_dir(yaml), limiter).await
    }

    /// Starts a server whose `--config` is the prepared directory `dir`.
    pub async fn start_in(dir: tempfile::TempDir, limiter: LimiterOptions) -> Self {
        Self::start_full(dir, limiter, Arc::new(MemoryStore::new()), None).await
    }

    /// As [`TestServer::start`], serving gRPC over TLS.
    pub async fn start_tls(yaml: &str, tls: TlsSettings) -> Self {
        Self::start_full(
            rules_dir(yaml),
            LimiterOptions::default(),
            Arc::new(MemoryStore::new()),
            Some(tls),
        )
        .await
    }

    /// Starts a server on `store`.
    pub async fn start_on(yaml: &str, store: Arc<dyn Store>) -> Self {
        Self::start_adjusted(yaml, store, |_| {}).await
    }

    /// Starts a server with `settings` adjusted by `adjust` (addresses and rules are set).
    pub async fn start_adjusted(
        yaml: &str,
        store: Arc<dyn Store>,
        adjust: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start_full_adjusted(
            rules_dir(yaml),
            LimiterOptions::default(),
            store,
            None,
            adjust,
        )
        .await
    }

    async fn start_full(
        dir: tempfile::TempDir,
        limiter: LimiterOptions,
        store: Arc<dyn Store>,
        tls: Option<TlsSettings>,
    ) -> Self {
        Self::start_full_adjusted(dir, limiter, store, tls, |_| {}).await
    }

    /// Starts a server on `store` whose manual clock is `other`'s: one `advance` moves both (two
    /// replicas sharing a store that takes the time from them).
    pub async fn start_beside(yaml: &str, store: Arc<dyn Store>, other: &TestServer) -> Self {
        let dir = rules_dir(yaml);
        let limiter = LimiterOptions::default();
        Self::start_clocked(dir, limiter, store, None, |_| {}, other.clock.clone()).await
    }

    async fn start_full_adjusted(
        dir: tempfile::TempDir,
        limiter: LimiterOptions,
        store: Arc<dyn Store>,
        tls: Option<TlsSettings>,
        adjust: impl FnOnce(&mut Settings),
    ) -> Self {
        let clock = ManualClock::new(START);
        Self::start_clocked(dir, limiter, store, tls, adjust, clock).await
    }

    async fn start_clocked(
        dir: tempfile::TempDir,
        limiter: LimiterOptions,
        store: Arc<dyn Store>,
        tls: Option<TlsSettings>,
        adjust: impl FnOnce(&mut Settings),
        clock: ManualClock,
    ) -> Self {
        let settings = Settings {
            grpc_addr: "127.0.0.1:0".parse().unwrap(),
            http_addr: "127.0.0.1:0".parse().unwrap(),
            load: LoadOptions {
                default_algorithm: limiter.default_algorithm,
                ..LoadOptions::default()
            },
            limiter,
            shutdown_grace: Duration::from_secs(5),
            max_metric_series: 100,
            tls,
            ..Settings::new(vec![dir.path().to_path_buf()])
        };
        let mut settings = settings;
        adjust(&mut settings);
        let running = app::start_with_store(settings, Arc::new(clock.clone()), store)
            .await
            .expect("server starts");
        Self {
            clock,
            grpc_addr: running.grpc_addr,
            http_addr: running.http_addr,
            admin_addr: running.admin_addr,
            dir,
            tls: running.tls.clone(),
            running: Some(running),
        }
    }

    /// A new client connection.
    pub async fn client(&self) -> Client {
        connect(self.grpc_addr).await
    }

    /// The path of the rules directory.
    pub fn rules_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Moves the manual clock forward.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let (status, body) = http(self.http_addr, "GET", "/metrics", "").await;
        assert_eq!(status, 200);
        body
    }

    /// How many rule sets have loaded (1 after start).
    pub fn generation(&self) -> u64 {
        self.running
            .as_ref()
            .expect("running")
            .reloader
            .generation()
    }

    /// Requests shutdown (as SIGTERM does) without waiting for it.
    pub fn begin_shutdown(&self) {
        self.running.as_ref().expect("running").shutdown.cancel();
    }

    /// Shuts the server down.
    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.expect("clean stop");
        }
    }
}

/// A fresh directory holding one rule file, `rules.yaml`, with `yaml`.
pub fn rules_dir(yaml: &str) -> tempfile::TempDir {
    process::temp_dir(&[("rules.yaml", yaml)])
}

/// A gRPC client of the rate-limit service.
pub type Client = RateLimitServiceClient<Channel>;

/// A new plaintext gRPC client of the rate-limit service at `addr`.
pub async fn connect(addr: SocketAddr) -> Client {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

/// A new plaintext gRPC health client at `addr`.
pub async fn health_client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    HealthClient::new(channel)
}

/// The gRPC health status of `service` (panics on a gRPC error).
pub async fn health_status(health: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    try_health_status(health, service)
        .await
        .expect("health answers")
}

/// The gRPC health status of `service`, or the gRPC error.
pub async fn try_health_status(
    health: &mut HealthClient<Channel>,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let response = health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(response.into_inner().status())
}

/// A descriptor from `(key, value)` pairs.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

/// A descriptor with a request-side limit override.
pub fn with_override(
    mut d: RateLimitDescriptor,
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

/// A request in `domain`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// A request in `domain` with one descriptor of `entries`.
pub fn one_descriptor(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
    request(domain, vec![descriptor(entries)])
}

/// Sends one call and returns the response (panics on a gRPC error).
pub async fn call(client: &mut Client, req: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(req)
        .await
        .expect("call succeeds")
        .into_inner()
}

/// The value of a response header.
pub fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// `duration_until_reset` of status `i` in milliseconds.
pub fn reset_ms(response: &RateLimitResponse, i: usize) -> u64 {
    let d = response.statuses[i]
        .duration_until_reset
        .expect("duration set");
    d.seconds as u64 * 1000 + d.nanos as u64 / 1_000_000
}

pub const OK: i32 = 1;
pub const OVER: i32 = 2;

/// One HTTP/1.0 exchange over a fresh connection, a JSON body: `(status, body)`.
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    http_with(
        addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        body,
    )
    .await
}

/// As [`http`] with `headers` in place of the JSON content type (and `Host: test` unless they
/// hold a `Host`).
pub async fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let reply = http_reply(addr, method, path, headers, body).await;
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// As [`http_with`], the whole reply: status line, headers and body.
pub async fn http_reply(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect http");
    let host = match headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        true => "",
        false => "Host: test\r\n",
    };
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.0\r\n{host}{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.expect("read");
    reply
}

/// The value of one Prometheus sample, by its exact name-and-labels text (0 when absent).
pub fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0.0, |value| value.trim().parse().expect("numeric sample"))
}

/// Polls `condition` every 20 ms until it holds (true) or `limit` has passed (false).
pub async fn within(limit: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `condition` every 20 ms until it holds; panics with `what` after `limit`.
pub async fn eventually(limit: Duration, what: &str, condition: impl AsyncFnMut() -> bool) {
    assert!(
        within(limit, condition).await,
        "not within {limit:?}: {what}"
    );
}

/// A limit of `requests` per `window` (a token bucket's burst is `requests` too).
pub fn limit(algorithm: Algorithm, requests: u64, window: Nanos) -> Limit {
    Limit {
        algorithm,
        requests,
        window,
        burst: requests,
        origin: 0,
        recording: Default::default(),
    }
}

/// A charge of `cost` under `limit` on the counter `key=value` of `domain`, as a rule would make
/// (a calendar limit's key naming its window).
pub fn charge(
    domain: &str,
    (key, value): (&str, &str),
    limit: Limit,
    cost: u64,
    gate: Gate,
) -> Charge {
    let mut builder = CounterKeyBuilder::new(domain);
    builder.entry(key, value);
    Charge {
        key: builder.finish_limit(0, &limit, None),
        limit,
        cost,
        gate,
        lease: 0,
        descriptor: 0,
    }
}
