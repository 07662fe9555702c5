//! OpenTelemetry tracing: spans reach a real OTLP/gRPC receiver, continue the caller's W3C
//! trace context, carry the call's attributes, follow the sampler, and never cost a call; over
//! OTLP/HTTP from envoyproxy/ratelimit's variables; and through a real Envoy whose own tracer
//! hands its trace to sluice.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::envoy::{Bootstrap, Envoy};
use common::http1::{self, Upstream};
use common::otlp::{ReceivedSpan, Receiver};
use common::process::{Serve, Sluice};
use common::*;
use sluice::store::MemoryStore;
use sluice::telemetry::TraceSettings;
use tonic::metadata::MetadataValue;

const RULES: &str = r#"
domain: traced
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 1, name: per_key }
  - key: path
    descriptors:
      - key: method
        value: GET
        rate_limit: { unit: second, requests_per_unit: 100 }
"#;

/// A server tracing to `receiver` at `ratio`.
async fn traced_server(receiver: &Receiver, ratio: f64) -> TestServer {
    let endpoint = receiver.endpoint();
    TestServer::start_adjusted(RULES, Arc::new(MemoryStore::new()), move |settings| {
        settings.tracing = Some(TraceSettings {
            sampling_ratio: ratio,
            service_name: "sluice-under-test".into(),
            instance_id: Some("pod-7".into()),
            ..TraceSettings::new(endpoint)
        });
    })
    .await
}

/// A call carrying `traceparent`.
async fn call_traced(
    client: &mut Client,
    request: sluice::proto::RateLimitRequest,
    traceparent: &str,
) -> sluice::proto::RateLimitResponse {
    let mut request = tonic::Request::new(request);
    request.metadata_mut().insert(
        "traceparent",
        MetadataValue::try_from(traceparent).expect("ascii"),
    );
    client
        .should_rate_limit(request)
        .await
        .expect("call")
        .into_inner()
}

async fn span_of(receiver: &Receiver, trace_id: &str) -> ReceivedSpan {
    let mut found = None;
    eventually(
        Duration::from_secs(60),
        "the span reaches the receiver",
        async || {
            found = receiver
                .spans()
                .into_iter()
                .find(|s| s.trace_id == trace_id);
            found.is_some()
        },
    )
    .await;
    found.unwrap()
}

/// The span of a call is a child of the caller's span, in the caller's trace, and says what
/// was asked (keys, never values), which rule matched, the decision and the store's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_continue_the_callers_trace_with_the_calls_attributes() {
    let receiver = Receiver::start();
    let server = traced_server(&receiver, 1.0).await;
    let mut client = server.client().await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let request = request(
        "traced",
        vec![
            descriptor(&[("api_key", "secret-value")]),
            descriptor(&[("path", "/x"), ("method", "GET")]),
            descriptor(&[("unknown", "u")]),
        ],
    );
    let answer = call_traced(
        &mut client,
        request.clone(),
        &format!("00-{trace}-{parent}-01"),
    )
    .await;
    assert_eq!(answer.overall_code, OK);
    let over_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let refused = call_traced(
        &mut client,
        request,
        &format!("00-{over_trace}-{parent}-01"),
    )
    .await;
    assert_eq!(refused.overall_code, OVER);

    let span = span_of(&receiver, trace).await;
    assert_eq!(span.name, "ShouldRateLimit");
    assert_eq!(span.parent_span_id, parent, "a child of the caller's span");
    assert_eq!(span.service, "sluice-under-test");
    assert_eq!(span.attribute("rpc.system"), "grpc");
    assert_eq!(span.attribute("ratelimit.domain"), "traced");
    assert_eq!(
        span.attribute("ratelimit.descriptor_keys"),
        "[api_key, path.method, unknown]"
    );
    assert_eq!(
        span.attribute("ratelimit.rules"),
        "[traced.api_key, traced.path.method_GET, ]"
    );
    assert_eq!(span.attribute("ratelimit.decision"), "OK");
    assert_eq!(span.attribute("ratelimit.statuses"), "[OK, OK, OK]");
    assert_eq!(span.attribute("ratelimit.degraded"), "false");
    let store_ms: f64 = span
        .attribute("ratelimit.store.duration_ms")
        .parse()
        .unwrap();
    assert!(store_ms >= 0.0);
    assert!(
        !span.attributes.values().any(|v| v.contains("secret-value")),
        "descriptor values are never recorded: {span:?}"
    );
    let over = span_of(&receiver, over_trace).await;
    assert_eq!(over.attribute("ratelimit.decision"), "OVER_LIMIT");
    assert_eq!(over.attribute("ratelimit.statuses"), "[OVER_LIMIT, OK, OK]");
    server.stop().await;
}

/// Sampling is parent-based: an unsampled parent is never traced, a sampled one always is, and
/// a call without a parent follows the ratio (0 here). A malformed call is traced as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_parent_then_the_ratio() {
    let receiver = Receiver::start();
    let server = traced_server(&receiver, 0.0).await;
    let mut client = server.client().await;
    let dropped = "6bf92f3577b34da6a3ce929d0e0e4738";
    let kept = "7bf92f3577b34da6a3ce929d0e0e4739";
    let one = || one_descriptor("traced", &[("api_key", "k")]);
    call_traced(
        &mut client,
        one(),
        &format!("00-{dropped}-00f067aa0ba902b7-00"),
    )
    .await;
    call(&mut client, one()).await;
    let mut bad = tonic::Request::new(request("", vec![]));
    bad.metadata_mut().insert(
        "traceparent",
        MetadataValue::try_from(format!("00-{kept}-00f067aa0ba902b7-01")).unwrap(),
    );
    let status = client.should_rate_limit(bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let span = span_of(&receiver, kept).await;
    assert_eq!(span.attribute("rpc.grpc.status_code"), "3");
    // The unsampled and parentless calls ended before the sampled one: had they been
    // recorded, they would have been exported with it or before it.
    server.stop().await;
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "only the sampled call: {spans:?}");
}

/// A collector that is down loses spans, never calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_never_fails_a_call() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let server = TestServer::start_adjusted(RULES, Arc::new(MemoryStore::new()), |s| {
        s.tracing = Some(TraceSettings::new(endpoint));
    })
    .await;
    let mut client = server.client().await;
    for _ in 0..20 {
        let answer = call(
            &mut client,
            one_descriptor("traced", &[("path", "/"), ("method", "GET")]),
        )
        .await;
        assert_eq!(answer.overall_code, OK);
    }
    server.stop().await;
}

/// Envoy Gateway's tracing variables on the `ratelimit` personality (the real binary):
/// envoyproxy/ratelimit's default protocol, OTLP/HTTP, to `OTEL_EXPORTER_OTLP_ENDPOINT` given
/// without a scheme (sluice adds `http://` and `/v1/traces`); the span carries the service name and
/// continues the caller's trace.
#[test]
fn upstream_tracing_variables_export_over_otlp_http() {
    let receiver = Receiver::start_http();
    let sluice = Serve::new()
        .rules(RULES)
        .args(["--upstream-env"])
        .env("SLUICE_STORE", "memory")
        .env("TRACING_ENABLED", "true")
        .env("TRACING_SERVICE_NAME", "envoy-ratelimit")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.addr.to_string())
        .start();
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = runtime.block_on(async {
        let mut client = connect(sluice.grpc_addr).await;
        let one = one_descriptor("traced", &[("api_key", "k")]);
        call_traced(&mut client, one, &format!("00-{trace}-00f067aa0ba902b7-01")).await
    });
    assert_eq!(answer.overall_code, OK);
    let span = receiver.wait_for("the span over OTLP/HTTP", |s| s.trace_id == trace);
    assert_eq!(span.service, "envoy-ratelimit", "{}", sluice.log());
    assert_eq!(span.parent_span_id, "00f067aa0ba902b7");
    assert_eq!(span.attribute("ratelimit.rules"), "[traced.api_key]");
}

/// Through a real Envoy with its OpenTelemetry tracer: Envoy starts the trace, its rate-limit
/// call carries `traceparent`, and sluice's span (started with the `--otlp-endpoint` flag of the
/// real binary) lands in Envoy's trace, as the child of Envoy's rate-limit client span.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn envoys_trace_continues_into_sluice() {
    let receiver = Receiver::start();
    let rules = "domain: e2e\ndescriptors:\n  - key: generic_key\n    value: per_key\n    descriptors:\n      - key: key\n        rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let endpoint = receiver.endpoint();
    let sluice = Sluice::start(
        rules,
        &["--otlp-endpoint", &endpoint, "--service-name", "sluice"],
    );
    let upstream = Upstream::start();
    let bootstrap = Bootstrap {
        sluice: sluice.grpc_addr,
        upstream: upstream.addr,
        failure_mode_deny: false,
    }
    .yaml_traced(receiver.addr);
    let envoy = Envoy::start(&bootstrap);
    let response = http1::get(envoy.listener, "/", &[("x-key", "k1")]);
    assert_eq!(response.status, 200, "{}", envoy.log());
    let ours = receiver.wait_for("sluice's span", |s| s.service == "sluice");
    assert_eq!(ours.attribute("ratelimit.domain"), "e2e");
    assert_eq!(
        ours.attribute("ratelimit.rules"),
        "[e2e.generic_key_per_key.key]"
    );
    let parent = receiver.wait_for("Envoy's span of the rate-limit call", |s| {
        s.span_id == ours.parent_span_id
    });
    assert!(
        parent.name.contains("RateLimitService.ShouldRateLimit"),
        "the parent is Envoy's rate-limit client span: {parent:?}"
    );
    assert_eq!(parent.trace_id, ours.trace_id, "one trace: Envoy's");
    drop(envoy);
}

/// Through a real Envoy with its Zipkin tracer, as Istio meshes on Zipkin run it: the rate-limit
/// call carries B3 (`x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`), and sluice's OTLP span, by
/// default (`--otlp-propagators w3c,b3`), lands in Envoy's Zipkin trace as the child of Envoy's
/// rate-limit client span; with `--otlp-propagators w3c` the same call starts a trace of its own.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn envoys_zipkin_trace_continues_into_sluice_over_b3() {
    let zipkin = Receiver::start_zipkin();
    let otlp = Receiver::start();
    let rules = "domain: e2e\ndescriptors:\n  - key: generic_key\n    value: per_key\n    descriptors:\n      - key: key\n        rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let endpoint = otlp.endpoint();
    let b3 = Sluice::start(
        rules,
        &["--otlp-endpoint", &endpoint, "--service-name", "b3"],
    );
    let w3c_only = Sluice::start(
        rules,
        &[
            "--otlp-endpoint",
            &endpoint,
            "--service-name",
            "w3c-only",
            "--otlp-propagators",
            "w3c",
        ],
    );
    let upstream = Upstream::start();
    let envoy_for = |sluice: &Sluice| {
        let bootstrap = Bootstrap {
            sluice: sluice.grpc_addr,
            upstream: upstream.addr,
            failure_mode_deny: false,
        }
        .yaml_zipkin(zipkin.addr);
        Envoy::start(&bootstrap)
    };

    let envoy = envoy_for(&b3);
    let response = http1::get(envoy.listener, "/", &[("x-key", "k1")]);
    assert_eq!(response.status, 200, "{}", envoy.log());
    let ours = otlp.wait_for("sluice's span", |s| s.service == "b3");
    assert_eq!(ours.attribute("ratelimit.domain"), "e2e");
    let parent = zipkin.wait_for("Envoy's Zipkin span of the rate-limit call", |s| {
        s.span_id == ours.parent_span_id
    });
    assert!(
        parent.name.contains("RateLimitService.ShouldRateLimit"),
        "the parent is Envoy's rate-limit client span: {parent:?}"
    );
    assert_eq!(parent.trace_id, ours.trace_id, "one trace: Envoy's");
    drop(envoy);

    let envoy = envoy_for(&w3c_only);
    let response = http1::get(envoy.listener, "/", &[("x-key", "k2")]);
    assert_eq!(response.status, 200, "{}", envoy.log());
    let root = otlp.wait_for("sluice's span without B3", |s| s.service == "w3c-only");
    assert_eq!(root.parent_span_id, "", "B3 not read: a root span");
    let envoy_traces: Vec<String> = zipkin.spans().into_iter().map(|s| s.trace_id).collect();
    assert!(!envoy_traces.contains(&root.trace_id));
    drop(envoy);
}

/// A quota (RLQS) stream's events are spans too: opened, each report, closed, continuing the
/// stream's `traceparent`, with the domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_stream_events_are_traced() {
    use crate::common::rlqs::{RlqsStream, bucket, usage};
    let receiver = Receiver::start();
    let server = traced_server(&receiver, 1.0).await;
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    let id = bucket(&[("path", "/x")]);
    stream
        .send("traced", vec![usage(id.clone(), 0, 1, 0)])
        .await;
    stream.until(&[&id]).await;
    drop(stream.close());
    let names = ["rlqs.open", "rlqs.report", "rlqs.close"];
    eventually(Duration::from_secs(60), "the stream's spans", async || {
        let spans = receiver.spans();
        names.iter().all(|n| spans.iter().any(|s| s.name == *n))
    })
    .await;
    for span in receiver
        .spans()
        .iter()
        .filter(|s| names.contains(&s.name.as_str()))
    {
        assert_eq!(span.attribute("ratelimit.domain"), "traced");
        assert_eq!(span.service, "sluice-under-test");
        if span.name == "rlqs.report" {
            assert_eq!(span.attribute("rlqs.buckets"), "1");
        }
    }
}
