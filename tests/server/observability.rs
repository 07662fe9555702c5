//! Metrics, HTTP endpoints and graceful shutdown, over real sockets.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use sluice::clock::Nanos;
use sluice::store::{Charge, MemoryStore, Store, StoreFuture};

const RULES: &str = r#"
domain: obs
descriptors:
  - key: twenty
    rate_limit: { unit: hour, requests_per_unit: 20, algorithm: fixed_window }
  - key: other
    rate_limit: { unit: hour, requests_per_unit: 20, algorithm: fixed_window }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: nested
    descriptors:
      - key: deeper
        descriptors:
          - key: deepest
            rate_limit: { unit: hour, requests_per_unit: 5 }
"#;

/// Every line of the exposition is a comment or a well-formed `name{labels} value` sample.
fn assert_valid_exposition(text: &str) {
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "bad value: {line}"
        );
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name: {line}"
        );
        if name_end < series.len() {
            let labels = series[name_end..]
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'));
            let labels = labels.unwrap_or_else(|| panic!("bad labels: {line}"));
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (key, value) = pair
                    .split_once("=\"")
                    .unwrap_or_else(|| panic!("bad label: {line}"));
                assert!(
                    key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "bad label name: {line}"
                );
                assert!(
                    !value.trim_end_matches('"').contains('"') || value.contains("\\\""),
                    "bad label value: {line}"
                );
            }
        }
    }
}

/// Asserts the samples `ratelimit_service_rate_limit_<counter>` of rule `obs.<key1>` in `text`.
fn assert_rule_samples(text: &str, key1: &str, expected: &[(&str, f64)]) {
    for (counter, value) in expected {
        let series = format!(
            "ratelimit_service_rate_limit_{counter}{{domain=\"obs\",key1=\"{key1}\",key2=\"\"}}"
        );
        assert_eq!(sample(text, &series), *value, "{series}");
    }
}

/// The exposition parses, and per-rule counters move with calls, reproducing reference §4.1's
/// worked example (limit 20, near ratio 0.8: 19 → 22 with 3 hits is 2 over, 1 near).
#[tokio::test]
async fn metrics_follow_upstream_counting() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for _ in 0..19 {
        call(&mut client, one_descriptor("obs", &[("twenty", "a")])).await;
    }
    let before = server.metrics().await;
    assert_valid_exposition(&before);
    let twenty = [
        ("total_hits", 19.0),
        ("within_limit", 19.0),
        ("near_limit", 3.0),
    ];
    assert_rule_samples(&before, "twenty", &twenty);

    let mut three = one_descriptor("obs", &[("twenty", "a")]);
    three.hits_addend = 3;
    assert_eq!(call(&mut client, three).await.overall_code, OVER);
    let after = server.metrics().await;
    assert_valid_exposition(&after);
    let twenty = [
        ("over_limit", 2.0),
        ("near_limit", 4.0),
        ("within_limit", 19.0),
        ("total_hits", 22.0),
    ];
    assert_rule_samples(&after, "twenty", &twenty);

    // The second worked row: 15 → 22 with 7 hits is 2 over, 4 near.
    let mut fifteen = one_descriptor("obs", &[("other", "b")]);
    fifteen.hits_addend = 15;
    call(&mut client, fifteen).await;
    let mut seven = one_descriptor("obs", &[("other", "b")]);
    seven.hits_addend = 7;
    call(&mut client, seven).await;
    let text = server.metrics().await;
    assert_rule_samples(&text, "other", &[("over_limit", 2.0), ("near_limit", 4.0)]);

    assert_eq!(
        sample(
            &text,
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"}"
        ),
        22.0
    );
    assert_eq!(sample(&text, "ratelimit_service_config_load_success"), 1.0);
    assert_eq!(sample(&text, "sluice_rules_generation"), 1.0);
    assert!(sample(&text, "sluice_decision_duration_seconds_count") >= 22.0);
    assert!(text.contains("ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.0001\"}"));
    server.stop().await;
}

/// Shadow-mode hits are counted; nested keys use two label levels; bad calls count as errors.
#[tokio::test]
async fn shadow_nested_and_error_metrics() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        call(&mut client, one_descriptor("obs", &[("shadow", "s")])).await;
    }
    let deep = descriptor(&[("nested", "n"), ("deeper", "d"), ("deepest", "x")]);
    call(&mut client, request("obs", vec![deep])).await;
    let _ = client
        .should_rate_limit(one_descriptor("", &[("k", "v")]))
        .await;
    let text = server.metrics().await;
    let shadow =
        "ratelimit_service_rate_limit_shadow_mode{domain=\"obs\",key1=\"shadow\",key2=\"\"}";
    assert_eq!(sample(&text, shadow), 2.0);
    let nested =
        "ratelimit_service_rate_limit_total_hits{domain=\"obs\",key1=\"nested\",key2=\"deeper\"}";
    assert_eq!(sample(&text, nested), 1.0);
    let errors = "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"}";
    assert_eq!(sample(&text, errors), 1.0);
    server.stop().await;
}

/// A flood of distinct override values never grows the per-rule series past the cap; the
/// folded series are counted.
#[tokio::test]
async fn override_flood_is_capped() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for i in 0..300 {
        let d = with_override(
            descriptor(&[("ip", &format!("10.0.{}.{}", i / 256, i % 256))]),
            5,
            1,
        );
        call(&mut client, request("obs", vec![d])).await;
    }
    let text = server.metrics().await;
    let series = text
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_total_hits{"))
        .count();
    assert!(series <= 101, "{series} series");
    assert!(sample(&text, "sluice_metric_series_folded_total") >= 200.0);
    server.stop().await;
}

/// POST /json speaks protojson: 200 when OK, 429 when over, 400 for bad input.
#[tokio::test]
async fn json_endpoint() {
    let server = TestServer::start(RULES).await;
    let body = r#"{"domain":"obs","descriptors":[{"entries":[{"key":"shadow","value":"j"}]}],"hitsAddend":1}"#;
    let (status, reply) = http(server.http_addr, "POST", "/json", body).await;
    assert_eq!(status, 200, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["overallCode"], "OK");
    assert_eq!(reply["statuses"][0]["currentLimit"]["requestsPerUnit"], 1);
    assert_eq!(reply["statuses"][0]["currentLimit"]["unit"], "HOUR");

    let over = r#"{"domain":"obs","descriptors":[{"entries":[{"key":"twenty","value":"j"}],"hits_addend":21}]}"#;
    let (status, reply) = http(server.http_addr, "POST", "/json", over).await;
    assert_eq!(status, 429, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["overallCode"], "OVER_LIMIT");
    assert!(
        reply["statuses"][0]["durationUntilReset"]
            .as_str()
            .unwrap()
            .ends_with('s')
    );

    assert_eq!(
        http(server.http_addr, "POST", "/json", "{not json").await.0,
        400
    );
    let (status, reply) = http(
        server.http_addr,
        "POST",
        "/json",
        r#"{"domain":"","descriptors":[]}"#,
    )
    .await;
    assert_eq!(
        (status, reply.trim()),
        (400, "rate limit domain must not be empty")
    );
    server.stop().await;
}

/// A browser's call must come from this server's own page, through one of its names, with a
/// JSON body: a plain-text POST from any web page used to charge counters (403 or 415, nothing
/// charged), and DNS rebinding (`Host: evil.example:PORT` with a matching `Origin` and
/// `Sec-Fetch-Site: same-origin`, issue 40) was answered 200. A client that is no browser is
/// served whatever its content type, as envoyproxy/ratelimit serves it (its own tests send
/// none).
#[tokio::test]
async fn json_refuses_other_bodies_and_origins() {
    let server = TestServer::start(RULES).await;
    let addr = server.http_addr;
    let body = r#"{"domain":"obs","descriptors":[{"entries":[{"key":"twenty","value":"csrf"}]}]}"#;
    let json = ("Content-Type", "application/json");
    let own_host = addr.to_string();
    let own_origin = format!("http://{addr}");
    let evil_host = format!("evil.example:{}", addr.port());
    let evil_origin = format!("http://{evil_host}");
    let host = ("Host", own_host.as_str());
    let refused: [(&[(&str, &str)], u16); 9] = [
        (
            &[
                host,
                ("Content-Type", "text/plain"),
                ("Origin", &own_origin),
            ],
            415,
        ),
        (
            &[
                host,
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            415,
        ),
        (&[host, ("Sec-Fetch-Mode", "no-cors")], 415),
        (&[host, json, ("Origin", "https://evil.example")], 403),
        (&[host, json, ("Origin", "null")], 403),
        (&[host, json, ("Sec-Fetch-Site", "cross-site")], 403),
        (&[host, json, ("Sec-Fetch-Site", "same-site")], 403),
        (
            &[
                ("Host", &evil_host),
                json,
                ("Origin", &evil_origin),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            403,
        ),
        (
            &[("Host", &evil_host), json, ("Sec-Fetch-Site", "none")],
            403,
        ),
    ];
    for (headers, expected) in refused {
        let (status, reply) = http_with(addr, "POST", "/json", headers, body).await;
        assert_eq!(status, expected, "{headers:?}: {reply}");
    }
    // Accepted: clients that are no browser (any body type, none, any host), the server's own
    // page, and a charset parameter.
    let accepted: [&[(&str, &str)]; 6] = [
        &[json],
        &[("Content-Type", "text/plain")],
        &[],
        &[
            ("Host", &evil_host),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &[
            host,
            json,
            ("Origin", &own_origin),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &[("Content-Type", "Application/JSON; charset=utf-8")],
    ];
    for (i, headers) in accepted.into_iter().enumerate() {
        let (status, reply) = http_with(addr, "POST", "/json", headers, body).await;
        assert_eq!(status, 200, "{headers:?}: {reply}");
        let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(
            reply["statuses"][0]["limitRemaining"],
            19 - i,
            "the refused calls spent nothing"
        );
    }
    server.stop().await;
}

/// envoyproxy/ratelimit's own `/json` cases (`test/server/server_impl_test.go`,
/// `TestJsonHandler`), in their request shape: a method it does not check, no content type,
/// a `Host` of its test client's. The cases its mock service drives (an unknown overall
/// code, an answer that does not marshal: 500) have no counterpart in a real service; a
/// request without descriptors is a service error there and here (400).
#[tokio::test]
async fn envoyproxy_ratelimits_own_json_cases_pass() {
    let server = TestServer::start(
        "domain: foo\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
    )
    .await;
    let shape = [("Host", "example.com")];
    let ok = r#"{"domain": "foo", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#;
    for (body, status, json) in [
        ("", 400, false),
        ("}", 400, false),
        (r#"{"domain": "foo"}"#, 400, false),
        (ok, 200, true),
        (ok, 429, true),
    ] {
        for method in ["METHOD_NOT_CHECKED", "POST"] {
            let body = if method == "POST" && status == 200 {
                r#"{"domain": "foo", "descriptors": [{"entries": [{"key": "k", "value": "w"}]}]}"#
            } else if method == "POST" && status == 429 {
                ok
            } else {
                body
            };
            let (got, reply) = http_with(server.http_addr, method, "/json", &shape, body).await;
            assert_eq!(got, status, "{method} {body:?}: {reply}");
            if json {
                let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
                let code = ["OK", "OVER_LIMIT"][usize::from(status == 429)];
                assert_eq!(reply["overallCode"], code, "{reply}");
            }
        }
    }
    server.stop().await;
}

/// /healthcheck answers OK and /rlconfig lists one line per limited node.
#[tokio::test]
async fn healthcheck_and_rlconfig() {
    let server = TestServer::start(RULES).await;
    assert_eq!(
        http(server.http_addr, "GET", "/healthcheck", "").await,
        (200, "OK".to_owned())
    );
    let (status, body) = http(server.http_addr, "GET", "/rlconfig", "").await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 4, "{body}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("obs.nested.deeper.deepest: unit=HOUR requests_per_unit=5")),
        "{body}"
    );
    server.stop().await;
}

/// A store that takes a while to answer, standing in for a remote store (the memory store
/// answers in microseconds, too fast to be caught mid-call).
struct SlowStore {
    inner: MemoryStore,
    delay: Duration,
    started: AtomicUsize,
}

impl Store for SlowStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.apply(charges, now).await
        })
    }

    fn reset<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> sluice::store::ResetFuture<'a> {
        self.inner.reset(charges, now)
    }

    fn name(&self) -> &'static str {
        "slow"
    }
}

/// Shutdown during calls: health turns NOT_SERVING at once, the listeners close after the
/// shutdown delay, every in-flight call still completes, and the server stops cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_calls() {
    let store = Arc::new(SlowStore {
        inner: MemoryStore::new(),
        delay: Duration::from_millis(1500),
        started: AtomicUsize::new(0),
    });
    // The listeners close 0.5 s after health turns NOT_SERVING, mid-way through the calls.
    let server = TestServer::start_adjusted(RULES, store.clone(), |s| {
        s.shutdown_delay = Duration::from_millis(500);
    })
    .await;
    let mut calls = Vec::new();
    for i in 0..20 {
        let mut client = server.client().await;
        calls.push(tokio::spawn(async move {
            client
                .should_rate_limit(one_descriptor("obs", &[("other", &i.to_string())]))
                .await
        }));
    }
    // Wait until every call is inside the store, then shut down under them.
    eventually(
        Duration::from_secs(10),
        "calls reach the store",
        async || store.started.load(Ordering::SeqCst) >= 20,
    )
    .await;
    let mut health = health_client(server.grpc_addr).await;
    server.begin_shutdown();
    let mut status = ServingStatus::Unknown;
    for _ in 0..100 {
        match try_health_status(&mut health, "ratelimit").await {
            Ok(now) => status = now,
            Err(_) => break,
        }
        if status == ServingStatus::NotServing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        status,
        ServingStatus::NotServing,
        "NOT_SERVING while draining"
    );
    for call in calls {
        let response = call.await.unwrap().expect("in-flight call completed");
        assert_eq!(response.into_inner().overall_code, OK);
    }
    server.stop().await;
}
