//! What an operator sees of a region: its portion of each global limit, the floor, the members
//! and the claims on `/metrics`; the global store's health on `/healthcheck`; the scope and the
//! portion on `/ui` (its region panel and its explanations) and on `/rlconfig`.

use std::time::Instant;

use super::{Deployment, Load, RATE, RULES, metric, pause};
use crate::common::http;

/// Two regions at the whole rate each, once their floors have settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_region_shows_its_portion_floor_and_global_store() {
    let deployment = Deployment::start(&["a", "b"], &[1, 1], RULES).await;
    let epoch = Instant::now();
    let mut loads = Vec::new();
    for region in &deployment.regions {
        loads.push(Load::start(&region.grpc(), ("tenant", "acme"), RATE, epoch).await);
    }
    pause(18.0).await;
    let a = &deployment.regions[0];
    let metrics = a.metrics().await;
    let value = |name: &str, labels: &str| metric(&metrics, name, labels);
    let portion = value(
        "sluice_region_portion",
        r#"domain="global",key="global.tenant",limit="0""#,
    );
    eprintln!("region a: portion {portion:?}");
    assert!(
        portion.is_some_and(|p| (0.45..=0.55).contains(&p)),
        "{portion:?}"
    );
    assert_eq!(value("sluice_region_members", r#"region="a""#), Some(2.0));
    assert_eq!(value("sluice_region_floor", r#"region="a""#), Some(0.25));
    assert_eq!(
        value("sluice_region_global_store_reachable", r#"region="a""#),
        Some(1.0)
    );
    assert!(value("sluice_region_claim_duration_seconds_count", "").is_some_and(|n| n >= 10.0));
    let (status, body) = a.health().await;
    assert_eq!(status, 200);
    assert!(
        body.starts_with("OK\nregion a: global store reachable, 2 regions"),
        "{body}"
    );
    let addr = a.replicas[0].http_addr;
    let (_, region) = http(addr, "GET", "/ui/api/region", "").await;
    let region: serde_json::Value = serde_json::from_str(&region).unwrap();
    assert_eq!(region["region"], "a");
    assert_eq!(region["busiest"][0]["rule"], "global.tenant");
    let request = r#"{"domain": "global", "descriptors": ["tenant=acme"]}"#;
    let (_, explained) = http(addr, "POST", "/ui/api/explain", request).await;
    let explained: serde_json::Value = serde_json::from_str(&explained).unwrap();
    let limit = &explained["descriptors"][0]["limits"][0];
    assert_eq!(limit["limit"]["scope"], "global");
    let shown = limit["region_portion"].as_f64();
    assert!(shown.is_some_and(|p| (0.45..=0.55).contains(&p)), "{limit}");
    let (_, rlconfig) = http(addr, "GET", "/rlconfig", "").await;
    assert!(rlconfig.contains("scope=global"), "{rlconfig}");
}
