//! In-process gRPC tests: a real server on port 0, a tonic client, and a manual clock.

use crate::common;

use std::time::Duration;

use common::*;
use sluice::limiter::{LimiterOptions, ResetPrecision};
use sluice::proto::rate_limit_response::rate_limit::Unit;

const RULES: &str = r#"
domain: test
descriptors:
  - key: fixed
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: fixed_window, name: fixed3 }
  - key: sliding
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: log
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: sliding_log }
  - key: bucket
    rate_limit: { unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 2 }
  - key: window
    rate_limit: { window: 10s, requests_per_unit: 2, algorithm: sliding_log }
  - key: multi
    rate_limits:
      - { unit: second, requests_per_unit: 2, algorithm: fixed_window }
      - { unit: minute, requests_per_unit: 5, algorithm: fixed_window }
  - key: hot
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: sliding_log }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: quota_a
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: quota_b
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: free
    rate_limit: { unlimited: true }
  - key: white
    value: listed
  - key: banned
    rate_limit: { unit: minute, requests_per_unit: 0, name: banned_limit }
  - key: proxy
    value: override
    rate_limit: { unit: minute, requests_per_unit: 2, replaces: [{ name: banned_limit }] }
"#;

/// N calls pass with falling remaining, the next is OVER_LIMIT with exact reset and headers.
#[tokio::test]
async fn fixed_window_statuses_and_headers() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for remaining in [2, 1, 0] {
        let r = call(&mut client, one_descriptor("test", &[("fixed", "a")])).await;
        assert_eq!(r.overall_code, OK);
        let s = &r.statuses[0];
        assert_eq!(s.limit_remaining, remaining);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit, limit.name.as_str()),
            (3, Unit::Minute as i32, "fixed3")
        );
        // The clock is 2 s past the minute: the window ends in 58 s.
        assert_eq!(reset_ms(&r, 0), 58_000);
        assert_eq!(header(&r, "RateLimit-Policy"), Some("\"fixed3\";q=3;w=60"));
        assert_eq!(
            header(&r, "RateLimit"),
            Some(format!("\"fixed3\";r={remaining};t=58").as_str())
        );
        assert_eq!(header(&r, "Retry-After"), None);
    }
    let r = call(&mut client, one_descriptor("test", &[("fixed", "a")])).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[0].code, OVER);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(reset_ms(&r, 0), 58_000);
    assert_eq!(header(&r, "Retry-After"), Some("58"));
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    // Another value of the key-only rule has its own counter.
    let r = call(&mut client, one_descriptor("test", &[("fixed", "b")])).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    server.stop().await;
}

/// With `--reset-precision milliseconds` the retry hint is exact: waiting it out admits the
/// call, one millisecond less does not.
#[tokio::test]
async fn retry_hint_is_exact_for_every_algorithm() {
    let mut options = LimiterOptions::default();
    options.response.reset_precision = ResetPrecision::Milliseconds;
    let server = TestServer::start_with(RULES, options).await;
    let mut client = server.client().await;
    for key in ["fixed", "sliding", "log", "bucket", "window"] {
        let req = || one_descriptor("test", &[(key, "retry")]);
        // Spread the calls so sliding algorithms have a non-trivial history.
        let mut r = call(&mut client, req()).await;
        while r.overall_code == OK {
            server.advance(Duration::from_millis(700));
            r = call(&mut client, req()).await;
        }
        let wait = reset_ms(&r, 0);
        assert!(wait > 1, "{key}: wait {wait}");
        assert_eq!(
            header(&r, "Retry-After"),
            Some(wait.div_ceil(1000).to_string().as_str()),
            "{key}"
        );
        server.advance(Duration::from_millis(wait - 1));
        let early = call(&mut client, req()).await;
        assert_eq!(early.overall_code, OVER, "{key}: admitted 1 ms early");
        server.advance(Duration::from_millis(1));
        let on_time = call(&mut client, req()).await;
        assert_eq!(
            on_time.overall_code, OK,
            "{key}: not admitted after the advertised wait"
        );
    }
    server.stop().await;
}

/// A refused call charges none of its descriptors (all-or-nothing).
#[tokio::test]
async fn refused_call_charges_nothing() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for _ in 0..5 {
        let r = call(
            &mut client,
            request(
                "test",
                vec![descriptor(&[("log", "x")]), descriptor(&[("banned", "x")])],
            ),
        )
        .await;
        assert_eq!(r.overall_code, OVER);
        assert_eq!(r.statuses[0].code, OK);
        assert_eq!(r.statuses[1].code, OVER);
    }
    for remaining in [2, 1, 0] {
        let r = call(&mut client, one_descriptor("test", &[("log", "x")])).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, remaining)
        );
    }
    server.stop().await;
}

/// A shadow-mode rule counts but never refuses; its status reads OK with 0 remaining.
#[tokio::test]
async fn shadow_mode_rule_passes() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        let r = call(&mut client, one_descriptor("test", &[("shadow", "x")])).await;
        assert_eq!(
            (
                r.overall_code,
                r.statuses[0].code,
                r.statuses[0].limit_remaining
            ),
            (OK, OK, 0)
        );
        assert!(r.statuses[0].current_limit.is_some());
    }
    server.stop().await;
}

/// Global shadow mode: overall OK, statuses keep OVER_LIMIT, no Retry-After.
#[tokio::test]
async fn global_shadow_mode_flips_only_the_overall_code() {
    let options = LimiterOptions {
        global_shadow_mode: true,
        ..LimiterOptions::default()
    };
    let server = TestServer::start_with(RULES, options).await;
    let mut client = server.client().await;
    let r = call(&mut client, one_descriptor("test", &[("banned", "x")])).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OVER));
    assert_eq!(header(&r, "Retry-After"), None);
    server.stop().await;
}

/// Quota mode: the call is refused only when every quota-mode descriptor is over.
#[tokio::test]
async fn quota_mode_needs_all_quota_descriptors_over() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let req = || {
        request(
            "test",
            vec![
                descriptor(&[("quota_a", "s")]),
                descriptor(&[("quota_b", "s")]),
            ],
        )
    };
    let r = call(&mut client, req()).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OK, OK, OK)
    );
    let r = call(&mut client, req()).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OK, OVER, OK)
    );
    let r = call(&mut client, req()).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OVER, OVER, OVER)
    );
    server.stop().await;
}

/// `replaces` drops the named limit while the replacing rule matches in the same call.
#[tokio::test]
async fn replaces_drops_the_named_limit() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let r = call(&mut client, one_descriptor("test", &[("banned", "x")])).await;
    assert_eq!(r.overall_code, OVER);
    let both = || {
        request(
            "test",
            vec![
                descriptor(&[("banned", "x")]),
                descriptor(&[("proxy", "override")]),
            ],
        )
    };
    for expected in [OK, OK, OVER] {
        let r = call(&mut client, both()).await;
        assert_eq!(r.overall_code, expected);
        assert!(
            r.statuses[0].current_limit.is_none(),
            "the replaced limit reports no limit"
        );
    }
    server.stop().await;
}

/// Unlimited, whitelisted, unmatched and unknown-domain descriptors are OK without a limit.
#[tokio::test]
async fn descriptors_without_a_limit() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let r = call(
        &mut client,
        request(
            "test",
            vec![
                descriptor(&[("free", "x")]),
                descriptor(&[("white", "listed")]),
                descriptor(&[("nothing", "x")]),
            ],
        ),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    for s in &r.statuses {
        assert_eq!(s.code, OK);
        assert!(s.current_limit.is_none() && s.duration_until_reset.is_none());
    }
    assert_eq!(r.statuses[1].limit_remaining, 0);
    assert!(r.response_headers_to_add.is_empty());
    let r = call(&mut client, one_descriptor("elsewhere", &[("fixed", "x")])).await;
    assert_eq!((r.overall_code, r.statuses.len()), (OK, 1));
    assert!(r.statuses[0].current_limit.is_none());
    server.stop().await;
}

/// A request-side override replaces the configured limit.
#[tokio::test]
async fn limit_override_applies() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let req = || {
        request(
            "test",
            vec![with_override(descriptor(&[("nothing", "o")]), 2, 1)],
        )
    };
    for expected in [OK, OK, OVER] {
        let r = call(&mut client, req()).await;
        assert_eq!(r.overall_code, expected);
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (2, Unit::Second as i32)
        );
    }
    server.stop().await;
}

/// Request and descriptor hits_addend: costs add up; a descriptor addend of 0 only checks.
#[tokio::test]
async fn hits_addend_and_check_only() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let mut req = one_descriptor("test", &[("fixed", "h")]);
    req.hits_addend = 2;
    let r = call(&mut client, req).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
    let mut check = descriptor(&[("fixed", "h")]);
    check.hits_addend = Some(sluice::proto::well_known::UInt64Value { value: 0 });
    for _ in 0..3 {
        let r = call(&mut client, request("test", vec![check.clone()])).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
    }
    let r = call(&mut client, one_descriptor("test", &[("fixed", "h")])).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
    // At the limit a check is over, as a cost-1 call would be.
    let r = call(&mut client, request("test", vec![check])).await;
    assert_eq!(r.overall_code, OVER);
    server.stop().await;
}

/// Several limits on one node: all must pass; the status shows the one closest to exhaustion.
#[tokio::test]
async fn rate_limits_all_must_pass() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let req = || one_descriptor("test", &[("multi", "m")]);
    let r = call(&mut client, req()).await;
    let unit = r.statuses[0].current_limit.as_ref().unwrap().unit;
    assert_eq!(
        (r.statuses[0].limit_remaining, unit),
        (1, Unit::Second as i32)
    );
    call(&mut client, req()).await;
    let r = call(&mut client, req()).await;
    assert_eq!(r.overall_code, OVER, "the per-second limit binds");
    server.advance(Duration::from_secs(1));
    for _ in 0..2 {
        assert_eq!(call(&mut client, req()).await.overall_code, OK);
    }
    server.advance(Duration::from_secs(1));
    let r = call(&mut client, req()).await;
    assert_eq!(r.overall_code, OK);
    let r = call(&mut client, req()).await;
    assert_eq!(r.overall_code, OVER, "five per minute spent");
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().unit,
        Unit::Minute as i32
    );
    server.stop().await;
}

/// A `window:` limit that is no envoyproxy/ratelimit unit reports UNKNOWN and its exact window in
/// the policy.
#[tokio::test]
async fn custom_window_reports_its_length() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let r = call(&mut client, one_descriptor("test", &[("window", "w")])).await;
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().unit,
        Unit::Unknown as i32
    );
    assert!(
        header(&r, "RateLimit-Policy")
            .unwrap()
            .ends_with(";q=2;w=10")
    );
    assert_eq!(reset_ms(&r, 0), 10_000);
    server.stop().await;
}

/// Malformed calls are INVALID_ARGUMENT with a message naming the problem.
#[tokio::test]
async fn bad_input_is_invalid_argument() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let long = "v".repeat(2000);
    let cases = vec![
        (
            one_descriptor("", &[("fixed", "a")]),
            "domain must not be empty",
        ),
        (request("test", vec![]), "descriptor list must not be empty"),
        (one_descriptor("test", &[("", "a")]), "empty key"),
        (one_descriptor("test", &[("fixed", &long)]), "2000 bytes"),
        (
            request("test", vec![descriptor(&[("fixed", "a")]); 65]),
            "too many descriptors",
        ),
        (
            request("test", vec![descriptor(&vec![("k", "v"); 33])]),
            "too many entries",
        ),
        (
            request(
                "test",
                vec![with_override(descriptor(&[("fixed", "a")]), 5, 0)],
            ),
            "invalid limit override",
        ),
        (
            request(
                "test",
                vec![with_override(descriptor(&[("fixed", "a")]), 5, 99)],
            ),
            "invalid limit override",
        ),
    ];
    for (req, message) in cases {
        let status = client.should_rate_limit(req).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains(message),
            "{} lacks {message}",
            status.message()
        );
    }
    // The server is still healthy after all of that.
    let r = call(&mut client, one_descriptor("test", &[("fixed", "ok")])).await;
    assert_eq!(r.overall_code, OK);
    server.stop().await;
}

/// Many concurrent clients on one key: exactly the limit is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_admit_exactly_the_limit() {
    let server = TestServer::start(RULES).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..25 {
                let r = call(&mut client, one_descriptor("test", &[("hot", "one")])).await;
                admitted += u32::from(r.overall_code == OK);
            }
            admitted
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 100, "16 x 25 calls on a 100/hour key");
    server.stop().await;
}

/// The gRPC health service reports SERVING for "" and "ratelimit".
#[tokio::test]
async fn grpc_health_serving() {
    let server = TestServer::start(RULES).await;
    let mut health = health_client(server.grpc_addr).await;
    for service in ["", "ratelimit"] {
        let status = health_status(&mut health, service).await;
        assert_eq!(status, ServingStatus::Serving, "SERVING for {service:?}");
    }
    server.stop().await;
}

/// Connection age: a connection is asked to go away at its age, and one whose call is still
/// running after the grace (a health Watch stream never ends by itself) is closed; calls made
/// meanwhile on a client that reconnects keep succeeding.
#[tokio::test]
async fn aged_connection_is_closed_after_the_grace() {
    use tonic_health::pb::HealthCheckRequest;
    let age = Duration::from_millis(500);
    let grace = Duration::from_millis(500);
    let store = std::sync::Arc::new(sluice::store::MemoryStore::new());
    let server = TestServer::start_adjusted(RULES, store, |s| {
        s.grpc_max_connection_age = age;
        s.grpc_max_connection_age_grace = grace;
    })
    .await;
    let mut health = health_client(server.grpc_addr).await;
    let opened = std::time::Instant::now();
    let request = HealthCheckRequest {
        service: String::new(),
    };
    let mut watch = health.watch(request).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().expect("the current status");
    assert_eq!(first.status(), ServingStatus::Serving);
    let mut client = server.client().await;
    let mut calls = 0;
    let ended = within(Duration::from_secs(30), async || {
        // Unary calls on another connection keep working while connections age out.
        calls += 1;
        let r = call(&mut client, one_descriptor("test", &[("hot", "age")])).await;
        assert_eq!(r.overall_code, OK, "call {calls}");
        tokio::time::timeout(Duration::from_millis(50), watch.message())
            .await
            .is_ok_and(|next| !matches!(next, Ok(Some(_))))
    })
    .await;
    assert!(
        ended,
        "the watch stream outlived its connection's age and grace"
    );
    // Never before the earliest age (0.9 × age) plus the grace.
    assert!(opened.elapsed() >= age.mul_f64(0.9) + grace);
    server.stop().await;
}

/// A method or service sluice does not serve answers UNIMPLEMENTED: `ShouldRateLimit` has a
/// route of its own, every other path goes through tonic's router, which says so.
#[tokio::test]
async fn other_methods_and_services_are_unimplemented() {
    use sluice::proto::{RateLimitRequest, RateLimitResponse};
    let server = TestServer::start(RULES).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for path in [
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimitNow",
        "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
        "/no.such.Service/Method",
    ] {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
        let path = http::uri::PathAndQuery::from_static(path);
        let request = tonic::Request::new(RateLimitRequest::default());
        let status = grpc.unary(request, path.clone(), codec).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unimplemented, "{path}");
    }
    // The RLS call itself is answered.
    let mut client = server.client().await;
    let answer = client
        .should_rate_limit(one_descriptor("test", &[("fixed", "x")]))
        .await
        .unwrap();
    assert_eq!(answer.into_inner().statuses.len(), 1);
    server.stop().await;
}
