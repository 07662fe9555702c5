//! Hostile rule files and requests: alias bombs, large plain files, FIFOs named like rule
//! files, undecodable gRPC messages, and label values that would grow `/metrics` without end.
//! Each gets a clear error or is set aside; none takes the server down or blocks it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::process::{Serve, Sluice, check, mkfifo, temp_dir};
use common::*;
use prost::Message;
use sluice::proto::RateLimitResponse;
use sluice::store::{RedisSettings, RedisStore};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

const RULES: &str = "domain: test\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";

/// One 1 MiB scalar with an anchor and 20,000 aliases to it (~20 GiB expanded).
fn alias_bomb() -> String {
    let mut bomb = format!(
        "domain: bomb\nmetadata_anchor: &big \"{}\"\nlist: [",
        "x".repeat(1 << 20)
    );
    bomb.push_str(&vec!["*big"; 20_000].join(", "));
    bomb.push_str("]\n");
    bomb
}

/// Issue 13: `sluice check` on the alias bomb aborted with "memory allocation failed". It is
/// an error naming the file, exit 1.
#[test]
fn check_refuses_an_alias_bomb_with_an_error_naming_the_file() {
    let dir = temp_dir(&[("bomb.yaml", &alias_bomb())]);
    let out = check(dir.path());
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    let file = dir.path().join("bomb.yaml");
    assert!(
        out.stderr.starts_with(&format!("{}:", file.display())),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("more than 64 MiB of memory"),
        "{}",
        out.stderr
    );
}

/// Issue 13: a plain file of 7,000 descriptors (~540 KB) failed with "more than 250000 nodes".
#[test]
fn check_accepts_seven_thousand_descriptors() {
    let mut text = String::from("domain: big\ndescriptors:\n");
    for i in 0..7_000 {
        text.push_str(&format!(
            "  - key: client_id\n    value: \"client-{i:05}\"\n    rate_limit:\n      unit: minute\n      requests_per_unit: {}\n",
            100 + i
        ));
    }
    let dir = temp_dir(&[("big.yaml", &text)]);
    let out = check(dir.path());
    assert!(
        out.stdout_ok().contains("7000 limited nodes"),
        "{}",
        out.stdout
    );
}

/// Issue 13: the alias bomb dropped into a running server's rule directory aborted it on
/// reload. The reload fails, the previous rules keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_bomb_on_reload_keeps_the_previous_rules() {
    let server = TestServer::start(RULES).await;
    std::fs::write(server.rules_dir().join("bomb.yaml"), alias_bomb()).unwrap();
    eventually(Duration::from_secs(30), "the reload fails", || async {
        sample(
            &server.metrics().await,
            "ratelimit_service_config_load_error",
        ) >= 1.0
    })
    .await;
    assert_eq!(server.generation(), 1);
    let mut client = server.client().await;
    let response = call(&mut client, one_descriptor("test", &[("user", "a")])).await;
    assert_eq!(response.statuses[0].limit_remaining, 9);
    server.stop().await;
}

async fn loads(server: &Sluice) -> f64 {
    let (_, body) = http(server.http_addr, "GET", "/metrics", "").await;
    sample(&body, "ratelimit_service_config_load_success")
}

/// Edits the rules to `limit` and waits until the edit is in force.
async fn edit_applies(server: &Sluice, limit: u32) {
    let before = loads(server).await;
    let yaml = RULES.replace("10", &limit.to_string());
    std::fs::write(server.rules_dir().join("rules.yaml"), yaml).unwrap();
    let applied = within(Duration::from_secs(30), async || {
        loads(server).await > before
    })
    .await;
    assert!(applied, "the edit applied\n{}", server.log());
    let mut client = connect(server.grpc_addr).await;
    let response = call(&mut client, one_descriptor("test", &[("user", "x")])).await;
    assert_eq!(
        response.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        limit
    );
}

/// Issue 13: a FIFO named `*.yaml` in the rule directory blocked the reload thread for good
/// (later edits never applied) and SIGTERM no longer exited. It is skipped with a warning,
/// at start and on reload; edits apply and SIGTERM exits.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_named_like_a_rule_file_is_skipped() {
    let rules = temp_dir(&[("rules.yaml", RULES)]);
    mkfifo(&rules.path().join("at-start.yaml"));
    let mut server = Serve::new().config(rules.path()).start();
    server.await_log("not a regular file (a FIFO)");
    mkfifo(&rules.path().join("later.yaml"));
    edit_applies(&server, 20).await;
    edit_applies(&server, 30).await;
    assert_eq!(server.stop().code(), Some(0));
}

/// A FIFO given as `--config` itself is an error at start, not a hang.
#[test]
fn a_fifo_as_the_config_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rules.yaml");
    mkfifo(&fifo);
    let out = Serve::new().config(&fifo).output();
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("not a regular file (a FIFO)"),
        "{}",
        out.stderr
    );
}

/// Sends raw bytes as the request message: the request body is not a protobuf this codec
/// checks; the answer is decoded as a `RateLimitResponse`.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = RateLimitResponse;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = RateLimitResponse;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut DecodeBuf<'_>,
    ) -> Result<Option<RateLimitResponse>, tonic::Status> {
        RateLimitResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

/// Calls ShouldRateLimit with `bytes` as the message.
async fn raw_call(
    addr: std::net::SocketAddr,
    bytes: Vec<u8>,
) -> Result<RateLimitResponse, tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    grpc.unary(tonic::Request::new(bytes), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// A message that is not a protobuf, or whose strings are not UTF-8, is INVALID_ARGUMENT (as
/// the README says), not INTERNAL; a well-formed one through the same path is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_requests_are_invalid_argument() {
    let server = TestServer::start(RULES).await;
    let garbage = vec![0xff, 0xff, 0xff, 0xff];
    // Field 1 (domain), length 2, bytes that are not UTF-8.
    let bad_utf8 = vec![0x0a, 0x02, 0xff, 0xfe];
    // Field 2 (descriptors) claiming more bytes than follow.
    let truncated = vec![0x12, 0x40, 0x0a];
    for bytes in [garbage, bad_utf8, truncated] {
        let status = raw_call(server.grpc_addr, bytes.clone()).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{bytes:?}: {status:?}"
        );
        assert!(
            status.message().contains("undecodable request"),
            "{status:?}"
        );
    }
    let good = one_descriptor("test", &[("user", "a")]).encode_to_vec();
    let response = raw_call(server.grpc_addr, good).await.expect("answered");
    assert_eq!(response.overall_code, OK);
    server.stop().await;
}

/// Issue 13: with the store down, calls with limit overrides and unique first keys created
/// one `sluice_degraded_decisions_total` series each (20,000 calls: 68 MB of /metrics). The
/// family is capped like the per-rule series (100 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_decision_series_are_capped() {
    // Nothing listens on port 1: every call is decided without the store.
    let store = RedisStore::new(RedisSettings::new("redis://127.0.0.1:1")).unwrap();
    let server = TestServer::start_on(RULES, Arc::new(store)).await;
    let mut client = server.client().await;
    for i in 0..2_000 {
        let key = format!("unique_{i}");
        let d = with_override(descriptor(&[(&key, "v")]), 5, 1);
        let _ = client.should_rate_limit(request("test", vec![d])).await;
    }
    let metrics = server.metrics().await;
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_degraded_decisions_total{"))
        .count();
    assert!(series <= 101, "{series} series");
    assert!(sample(&metrics, "sluice_metric_series_folded_total") >= 1_900.0);
    assert!(
        sample(
            &metrics,
            "sluice_degraded_decisions_total{domain=\"_overflow_\",key1=\"_overflow_\",mode=\"unavailable\"}"
        ) >= 1_900.0,
        "{metrics}"
    );
    server.stop().await;
}
