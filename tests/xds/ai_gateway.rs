//! sluice as Envoy AI Gateway's rate-limit service: fed over xDS by the test control plane with
//! the `RateLimitConfig` AI Gateway's translator (`internal/ratelimit/translator`) makes of a
//! `QuotaPolicy` (node `envoy-ai-gateway-ratelimit`, one resource named and of domain
//! `ai-gateway-quota`, a `backend_name` → `model_name_override` → bucket tree, every limit in
//! quota mode, units from `1s`/`1m`/`1h`/`1d`), counting with sliding windows that record every
//! charge (`--record-over-limit`: the resources carry no sluice field), behind a real Envoy
//! charging tokens at stream end as AI Gateway's extension server sets it up. The premium
//! tenant's own bucket keeps it served once the shared default bucket is spent (quota mode: one
//! bucket with room lets it through), both are refused once both are spent, and the counters read
//! through the admin listener hold every request and token charged.

use std::net::SocketAddr;
use std::time::Duration;

use super::common::envoy::Envoy;
use super::common::http1;
use super::common::process::poll;
use super::common::ratelimit::room_in_window;
use super::common::redis::free_port;
use super::control_plane::ControlPlane;
use super::process::Binary;
use super::wire::{self, DAY, RateLimitDescriptor, config, parent};

/// AI Gateway's node id for its rate-limit service (`internal/ratelimit/runner`).
const NODE: &str = "envoy-ai-gateway-ratelimit";
/// Its one domain.
const DOMAIN: &str = "ai-gateway-quota";
/// The descriptor key of the first bucket rule: a header `x-tenant-id` exactly `premium`.
const PREMIUM: &str = "rule-0-x-tenant-id|premium-match-0";
/// The descriptor key of the default bucket after one bucket rule.
const DEFAULT: &str = "rule-1-match--1";
const TOKEN: &str = "a1a1000000000000000000000000000000000000000000000000000000000a1a";

/// A bucket as the translator writes it: `key` = `value`, the limit in quota mode.
fn bucket(key: &str, value: &str, requests: u32, unit: i32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        quota_mode: true,
        ..wire::limited(key, value, requests, unit)
    }
}

/// What the translator makes of a QuotaPolicy on the AIServiceBackend `default/my-backend`:
/// gpt-4 with a default bucket of 100 a day and a bucket rule (x-tenant-id: premium) of 300 a
/// day; gpt-3.5-turbo with a default bucket of 1000 a day and no rule (its model descriptor
/// holds the limit).
fn quota_policy() -> wire::RateLimitConfig {
    let gpt4 = parent(
        "model_name_override",
        "gpt-4",
        vec![
            bucket(PREMIUM, PREMIUM, 300, DAY),
            bucket(DEFAULT, DEFAULT, 100, DAY),
        ],
    );
    let gpt35 = bucket("model_name_override", "gpt-3.5-turbo", 1000, DAY);
    config(
        DOMAIN,
        vec![parent(
            "backend_name",
            "default/my-backend",
            vec![gpt4, gpt35],
        )],
    )
}

/// The tokens and requests a bucket holds, through the admin listener.
fn used(admin: SocketAddr, model: &str, bucket: Option<&str>) -> u64 {
    let mut descriptor = format!("backend_name=default/my-backend,model_name_override={model}");
    if let Some(key) = bucket {
        descriptor.push_str(&format!(",{key}={key}"));
    }
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("domain", DOMAIN)
        .append_pair("descriptor", &descriptor)
        .finish();
    let auth = format!("Bearer {TOKEN}");
    let read = http1::get(
        admin,
        &format!("/counters?{query}"),
        &[("authorization", &auth)],
    );
    assert_eq!(read.status, 200, "{read:?}");
    let body: serde_json::Value = serde_json::from_str(&read.body).expect("json");
    body["limits"][0]["counters"][0]["used"]
        .as_u64()
        .expect("used")
}

/// The premium tenant spends the default bucket (100) in three requests (each a request-time
/// hit and 40 tokens), goes on on its own bucket (300) until that is spent too, then is refused;
/// a tenant without the rule is refused at once; the other model's bucket is its own.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn quota_policy_buckets_over_xds() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let cp = runtime.block_on(ControlPlane::start(None));
    cp.set_snapshot(NODE, "1", &[quota_policy()]);
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("test:{TOKEN}\n")).expect("tokens");
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (server, admin_addr) = (cp.addr.to_string(), admin.to_string());
    let tokens = tokens.display().to_string();
    let sluice = Binary::serve(&[
        "--xds-server",
        &server,
        "--xds-node-id",
        NODE,
        "--record-over-limit",
        "--no-persist",
        "--admin-addr",
        &admin_addr,
        "--admin-token-file",
        &tokens,
    ]);
    poll(
        Duration::from_secs(30),
        "the QuotaPolicy's rules in force",
        || {
            let rules = http1::try_get(sluice.http_addr, "/rlconfig", &[]).ok()?;
            rules.body.starts_with("# xds version 1\n").then_some(())
        },
    );
    let bootstrap = include_str!("../fixtures/budgets/ai-gateway-envoy.yaml")
        .replace("SLUICE_PORT", &sluice.grpc_addr.port().to_string())
        .replace("BACKEND_PORT", &free_port().to_string());
    let envoy = Envoy::start(&bootstrap);
    // A day's sliding window: keep clear of midnight, where the previous day starts to weigh.
    room_in_window(86_400, 120);

    let premium = [("x-tenant-id", "premium")];
    let ask = |path: &str, headers: &[(&str, &str)]| http1::get(envoy.listener, path, headers);
    let both = || {
        (
            used(admin, "gpt-4", Some(PREMIUM)),
            used(admin, "gpt-4", Some(DEFAULT)),
        )
    };
    for request in 1..=8u64 {
        let answer = ask("/gpt-4", &premium);
        assert_eq!(answer.status, 200, "request {request}: {answer:?}");
        let held = 41 * request;
        poll(
            Duration::from_secs(30),
            &format!("{held} charged to both"),
            || (both() == (held, held)).then_some(()),
        );
    }
    let refused = ask("/gpt-4", &premium);
    assert_eq!(refused.status, 429, "{refused:?}");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    // Its request-time hit is recorded on both spent buckets (no tokens: it never ran).
    assert_eq!(both(), (329, 329));
    let other = ask("/gpt-4", &[("x-tenant-id", "basic")]);
    assert_eq!(
        other.status, 429,
        "the default bucket is spent for everyone: {other:?}"
    );

    let gpt35 = ask("/gpt-3.5-turbo", &premium);
    assert_eq!(gpt35.status, 200, "{gpt35:?}");
    poll(
        Duration::from_secs(30),
        "gpt-3.5-turbo's own bucket",
        || (used(admin, "gpt-3.5-turbo", None) == 41).then_some(()),
    );
    assert!(cp.nacks().is_empty(), "{:?}", cp.nacks());
    drop(sluice);
}
