//! Response options through the real server in-process (gRPC and `POST /json`, manual clock):
//! envoyproxy/ratelimit's headers, dynamic metadata as a `google.protobuf.Struct`, global quota
//! mode, and the precision of `duration_until_reset`.

use crate::common;

use std::time::Duration;

use common::*;
use pbjson_types::value::Kind;
use serde_json::json;
use sluice::limiter::{
    CompatHeaderNames, HeaderStyle, LimiterOptions, ResetPrecision, ResponseOptions,
};
use sluice::proto::RateLimitResponse;

const RULES: &str = r#"
domain: resp
descriptors:
  - key: api
    metadata: { backend: primary, weight: 2.5, canary: false, tags: [a, b], nested: { zone: eu } }
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: fixed_window, name: api3 }
  - key: spare
    metadata: { backend: spare, nested: { zone: us, rack: 7 } }
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: fixed_window }
"#;

fn options(response: ResponseOptions) -> LimiterOptions {
    LimiterOptions {
        response,
        ..LimiterOptions::default()
    }
}

fn upstream_named(limit: &str, remaining: &str, reset: &str) -> LimiterOptions {
    options(ResponseOptions {
        headers: HeaderStyle::Compat(CompatHeaderNames {
            limit: limit.to_owned().into(),
            remaining: remaining.to_owned().into(),
            reset: reset.to_owned().into(),
        }),
        ..ResponseOptions::default()
    })
}

fn headers(r: &RateLimitResponse) -> Vec<(&str, &str)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect()
}

/// A protobuf Struct value as JSON, read kind by kind (numbers are doubles in a Struct).
fn json_of(value: &pbjson_types::Value) -> serde_json::Value {
    match value.kind.as_ref().expect("a kind") {
        Kind::NullValue(_) => serde_json::Value::Null,
        Kind::NumberValue(n) => json!(n),
        Kind::StringValue(s) => json!(s),
        Kind::BoolValue(b) => json!(b),
        Kind::StructValue(s) => struct_json(s),
        Kind::ListValue(l) => l.values.iter().map(json_of).collect(),
    }
}

fn struct_json(s: &pbjson_types::Struct) -> serde_json::Value {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), json_of(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// envoyproxy/ratelimit's three headers under the configured names, exactly and in order, on OK and
/// on OVER_LIMIT; no Retry-After or cache-control with them.
#[tokio::test]
async fn upstream_headers_over_grpc() {
    let server = TestServer::start_with(RULES, upstream_named("X-Limit", "x-left", "Reset")).await;
    let mut client = server.client().await;
    for remaining in ["2", "1", "0"] {
        let r = call(&mut client, one_descriptor("resp", &[("api", "u")])).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(
            headers(&r),
            [("X-Limit", "3"), ("x-left", remaining), ("Reset", "58")]
        );
    }
    let r = call(&mut client, one_descriptor("resp", &[("api", "u")])).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        headers(&r),
        [("X-Limit", "3"), ("x-left", "0"), ("Reset", "58")]
    );
    server.stop().await;
}

/// `dynamic_metadata` is the Struct envoyproxy/ratelimit returns: strings, doubles, booleans, lists
/// and structs as such; only the passed descriptor's rule metadata; hit addends where sent.
#[tokio::test]
async fn dynamic_metadata_over_grpc_is_a_struct() {
    let server = TestServer::start_with(
        RULES,
        options(ResponseOptions {
            dynamic_metadata: true,
            ..ResponseOptions::default()
        }),
    )
    .await;
    let mut client = server.client().await;
    call(&mut client, one_descriptor("resp", &[("spare", "m")])).await;
    let mut spare = descriptor(&[("spare", "m")]);
    spare.hits_addend = Some(pbjson_types::UInt64Value { value: 0 });
    let overridden = with_override(descriptor(&[("other", "o")]), 9, 2);
    let mut req = request(
        "resp",
        vec![spare, descriptor(&[("api", "m"), ("x", "y")]), overridden],
    );
    req.hits_addend = 1;
    // `api` + `x` goes deeper than the rules: no limit, so only `spare` could pass — and it is
    // over (a check-only call at its limit), so no rule metadata.
    let r = call(&mut client, req.clone()).await;
    let expected = json!({
        "domain": "resp",
        "descriptors": [
            {"entries": ["spare=m"], "hitsAddend": 0.0},
            {"entries": ["api=m", "x=y"]},
            {"entries": ["other=o"], "limit": "requests_per_unit:9 unit:MINUTE"}
        ],
        "hitsAddend": 1.0
    });
    assert_eq!(struct_json(r.dynamic_metadata.as_ref().unwrap()), expected);

    req.descriptors[1] = descriptor(&[("api", "m")]);
    let r = call(&mut client, req).await;
    let metadata = struct_json(r.dynamic_metadata.as_ref().unwrap());
    assert_eq!(
        metadata["metadata"],
        json!({"backend": "primary", "weight": 2.5, "canary": false, "tags": ["a", "b"],
               "nested": {"zone": "eu"}})
    );
    server.stop().await;

    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let plain = call(&mut client, one_descriptor("resp", &[("api", "n")])).await;
    assert_eq!(plain.dynamic_metadata, None, "off by default");
    server.stop().await;
}

/// Global quota mode over gRPC: a descriptor over its limit beside one with no rule passes,
/// and the statuses keep their own codes.
#[tokio::test]
async fn global_quota_over_grpc() {
    let quota = LimiterOptions {
        global_quota_mode: true,
        ..LimiterOptions::default()
    };
    let server = TestServer::start_with(RULES, quota).await;
    let mut client = server.client().await;
    call(&mut client, one_descriptor("resp", &[("spare", "q")])).await;
    let alone = call(&mut client, one_descriptor("resp", &[("spare", "q")])).await;
    assert_eq!(alone.overall_code, OVER);
    let req = request(
        "resp",
        vec![descriptor(&[("spare", "q")]), descriptor(&[("none", "q")])],
    );
    let r = call(&mut client, req).await;
    let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
    assert_eq!((r.overall_code, codes), (OK, vec![OVER, OK]));
    server.stop().await;
}

/// By default `duration_until_reset` is whole seconds rounded up: the seconds Envoy reads
/// equal Retry-After and RateLimit's `t`. Milliseconds on request.
#[tokio::test]
async fn duration_until_reset_precision() {
    let server = TestServer::start(RULES).await;
    server.advance(Duration::from_millis(300));
    let mut client = server.client().await;
    call(&mut client, one_descriptor("resp", &[("spare", "p")])).await;
    let r = call(&mut client, one_descriptor("resp", &[("spare", "p")])).await;
    let d = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!((d.seconds, d.nanos), (58, 0));
    assert_eq!(header(&r, "Retry-After"), Some("58"));
    assert!(header(&r, "RateLimit").unwrap().ends_with(";t=58"));
    server.stop().await;

    let millis = options(ResponseOptions {
        reset_precision: ResetPrecision::Milliseconds,
        ..ResponseOptions::default()
    });
    let server = TestServer::start_with(RULES, millis).await;
    server.advance(Duration::from_millis(300));
    let mut client = server.client().await;
    let r = call(&mut client, one_descriptor("resp", &[("spare", "p")])).await;
    assert_eq!(reset_ms(&r, 0), 57_700);
    server.stop().await;
}

/// `POST /json` carries the same options: envoyproxy/ratelimit headers and `dynamicMetadata`.
#[tokio::test]
async fn json_endpoint_carries_headers_and_metadata() {
    let mut options = upstream_named("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset");
    options.response.dynamic_metadata = true;
    let server = TestServer::start_with(RULES, options).await;
    let body = r#"{"domain":"resp","descriptors":[{"entries":[{"key":"spare","value":"j"}]}]}"#;
    let (status, reply) = http(server.http_addr, "POST", "/json", body).await;
    assert_eq!(status, 200, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(
        reply["responseHeadersToAdd"],
        json!([
            {"key": "RateLimit-Limit", "value": "1"},
            {"key": "RateLimit-Remaining", "value": "0"},
            {"key": "RateLimit-Reset", "value": "58"}
        ])
    );
    assert_eq!(
        reply["dynamicMetadata"],
        json!({
            "domain": "resp",
            "descriptors": [{"entries": ["spare=j"]}],
            "metadata": {"backend": "spare", "nested": {"zone": "us", "rack": 7.0}}
        })
    );
    let (status, reply) = http(server.http_addr, "POST", "/json", body).await;
    assert_eq!(status, 429, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert!(
        reply["dynamicMetadata"].get("metadata").is_none(),
        "{reply}"
    );
    server.stop().await;
}
