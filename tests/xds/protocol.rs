//! sluice in-process against the test control plane: rules pushed over xDS enforce, updates
//! apply without a restart, bad pushes are NACKed while the last good rules serve, start-up
//! waits for rules (or not), a control-plane restart changes nothing, mutual TLS as Envoy
//! Gateway serves it.

use sluice::app::XdsTls;
use tonic::Code;

use super::certs::{EgCerts, GATEWAY_NAME};
use super::common::*;
use super::wire::{MINUTE, SECOND, config, limited, parent};
use super::*;

/// The rules Envoy Gateway would push for one route: `generic_key=per_key` then `key` at
/// `requests` per minute.
fn per_key(requests: u32) -> Vec<wire::RateLimitConfig> {
    vec![config(
        "edge",
        vec![parent(
            "generic_key",
            "per_key",
            vec![limited("key", "", requests, MINUTE)],
        )],
    )]
}

/// The codes of `n` calls for `key=<value>` under `per_key`.
async fn codes(server: &TestServer, value: &str, n: usize) -> Vec<i32> {
    let mut client = server.client().await;
    let mut out = Vec::new();
    for _ in 0..n {
        let req = one_descriptor("edge", &[("generic_key", "per_key"), ("key", value)]);
        out.push(call(&mut client, req).await.overall_code);
    }
    out
}

async fn generation_reaches(server: &TestServer, generation: u64) {
    eventually(
        DEADLINE,
        &format!("rule generation {generation}"),
        async || server.generation() >= generation,
    )
    .await;
}

/// Pushed rules enforce; the stream starts with no version and no nonce, names the node and the
/// type, and ACKs the response with its version and nonce; metrics, /rlconfig and the /ui page's
/// rules show the version.
#[tokio::test]
async fn pushed_rules_enforce_and_are_acked() {
    let cp = ControlPlane::start(None).await;
    cp.set_snapshot(NODE, "1", &per_key(2));
    let server = start(settings(&cp)).await;
    generation_reaches(&server, 1).await;
    assert_eq!(codes(&server, "a", 3).await, [OK, OK, OVER]);
    eventually(DEADLINE, "the ACK", async || cp.received().len() >= 2).await;
    let received = cp.received();
    let first = &received[0];
    assert_eq!((first.version.as_str(), first.nonce.as_str()), ("", ""));
    assert_eq!(first.type_url, wire::TYPE_URL);
    assert_eq!(
        (first.node_id.as_str(), first.user_agent.as_str()),
        (NODE, "sluice")
    );
    let ack = &received[1];
    assert_eq!(
        (ack.version.as_str(), ack.nonce.as_str(), &ack.error),
        ("1", "1", &None)
    );
    let metrics = server.metrics().await;
    assert_eq!(sample(&metrics, "sluice_xds_connected"), 1.0);
    assert_eq!(
        sample(&metrics, r#"sluice_xds_accepted_version_info{version="1"}"#),
        1.0
    );
    assert_eq!(sample(&metrics, "sluice_xds_acks_total"), 1.0);
    assert_eq!(sample(&metrics, "sluice_xds_nacks_total"), 0.0);
    let (status, rlconfig) = http(server.http_addr, "GET", "/rlconfig", "").await;
    assert_eq!(status, 200);
    assert!(
        rlconfig.starts_with(
            "# xds version 1\nedge.generic_key_per_key.key: unit=MINUTE requests_per_unit=2"
        ),
        "{rlconfig}"
    );
    let (status, ui_rules) = http(server.http_addr, "GET", "/ui/api/rules", "").await;
    assert_eq!(status, 200);
    let ui_rules: serde_json::Value = serde_json::from_str(&ui_rules).expect("JSON");
    assert_eq!(
        ui_rules["version"], "1",
        "/ui shows the version: {ui_rules}"
    );
    assert_eq!(ui_rules["domains"][0]["name"], "edge");
    server.stop().await;
}

/// A pushed change applies without a restart; the counter of a limit the change left alone is
/// kept, and a new rule enforces at once.
#[tokio::test]
async fn a_pushed_change_applies_and_keeps_counters() {
    let cp = ControlPlane::start(None).await;
    cp.set_snapshot(NODE, "1", &per_key(3));
    let server = start(settings(&cp)).await;
    generation_reaches(&server, 1).await;
    assert_eq!(codes(&server, "a", 2).await, [OK, OK]);
    let mut changed = per_key(3);
    changed[0]
        .descriptors
        .push(limited("path", "/login", 1, SECOND));
    cp.set_snapshot(NODE, "2", &changed);
    generation_reaches(&server, 2).await;
    assert_eq!(
        codes(&server, "a", 2).await,
        [OK, OVER],
        "the counter was kept"
    );
    let mut client = server.client().await;
    let login = || one_descriptor("edge", &[("path", "/login")]);
    assert_eq!(call(&mut client, login()).await.overall_code, OK);
    assert_eq!(call(&mut client, login()).await.overall_code, OVER);
    server.stop().await;
}

/// A push that does not compile is NACKed with the version in force, its nonce and the error
/// text; the last good rules keep enforcing; the control plane's immediate re-sends are answered
/// at a bounded pace; the next good push is taken.
#[tokio::test]
async fn a_bad_push_is_nacked_while_the_good_rules_serve() {
    let cp = ControlPlane::start(None).await;
    cp.set_snapshot(NODE, "1", &per_key(2));
    let server = start(settings(&cp)).await;
    generation_reaches(&server, 1).await;
    let mut bad = per_key(2);
    bad[0].descriptors.push(limited("broken", "", 5, 0));
    cp.set_snapshot(NODE, "2", &bad);
    eventually(DEADLINE, "a NACK", async || !cp.nacks().is_empty()).await;
    let nack = cp.nacks()[0].clone();
    assert_eq!((nack.version.as_str(), nack.nonce.as_str()), ("1", "2"));
    assert_eq!(
        nack.error.as_deref(),
        Some("edge: invalid rate limit unit 'UNKNOWN'")
    );
    assert_eq!(
        codes(&server, "a", 3).await,
        [OK, OK, OVER],
        "version 1 still enforces"
    );
    // go-control-plane sends the same snapshot straight back after each NACK; sluice answers
    // the re-sends after 1 s, 2 s, 4 s...: a handful, not thousands.
    eventually(DEADLINE, "a paced re-NACK", async || cp.nacks().len() >= 2).await;
    let nacks = cp.nacks().len();
    assert!(nacks <= 4, "{nacks} NACKs");
    assert!(
        cp.nacks()
            .iter()
            .all(|n| n.error == nack.error && n.version == "1")
    );
    assert_eq!(server.generation(), 1);
    let metrics = server.metrics().await;
    assert_eq!(
        sample(&metrics, "ratelimit_service_config_load_error"),
        1.0,
        "compiled once"
    );
    cp.set_snapshot(NODE, "3", &per_key(5));
    generation_reaches(&server, 2).await;
    assert_eq!(
        codes(&server, "a", 4).await,
        [OK, OK, OK, OVER],
        "2 of 5 were used"
    );
    server.stop().await;
}

/// Without force-start, sluice reports not serving and fails calls as unavailable until the
/// first rules arrive; then it serves.
#[tokio::test]
async fn without_force_start_it_waits_for_the_first_rules() {
    let cp = ControlPlane::start(None).await;
    let server = start(settings(&cp)).await;
    let (status, body) = http(server.http_addr, "GET", "/healthcheck", "").await;
    assert_eq!((status, body.as_str()), (503, "no rules loaded yet"));
    let mut health = health_client(server.grpc_addr).await;
    for name in ["", "ratelimit"] {
        assert_eq!(
            health_status(&mut health, name).await,
            ServingStatus::NotServing
        );
    }
    let mut client = server.client().await;
    let error = client
        .should_rate_limit(one_descriptor("edge", &[("generic_key", "per_key")]))
        .await
        .expect_err("no rules yet");
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(error.message(), "no rate limit configuration loaded");
    eventually(DEADLINE, "the stream opens", async || {
        sample(&server.metrics().await, "sluice_xds_connected") == 1.0
    })
    .await;
    cp.set_snapshot(NODE, "1", &per_key(1));
    generation_reaches(&server, 1).await;
    assert_eq!(
        http(server.http_addr, "GET", "/healthcheck", "").await.0,
        200
    );
    eventually(DEADLINE, "gRPC health SERVING", async || {
        health_status(&mut health, "ratelimit").await == ServingStatus::Serving
    })
    .await;
    assert_eq!(codes(&server, "a", 2).await, [OK, OVER]);
    server.stop().await;
}

/// With force-start, sluice serves before any rules (unknown domains are OK) and is healthy,
/// even while the control plane cannot be reached; it keeps trying.
#[tokio::test]
async fn force_start_serves_before_any_rules() {
    let mut cp = ControlPlane::start(None).await;
    cp.shutdown().await;
    let mut xds = settings(&cp);
    xds.force_start = true;
    let server = start(xds).await;
    assert_eq!(
        http(server.http_addr, "GET", "/healthcheck", "").await.0,
        200
    );
    let mut health = health_client(server.grpc_addr).await;
    assert_eq!(
        health_status(&mut health, "ratelimit").await,
        ServingStatus::Serving
    );
    assert_eq!(codes(&server, "a", 3).await, [OK, OK, OK]);
    eventually(DEADLINE, "reconnection attempts", async || {
        sample(&server.metrics().await, "sluice_xds_reconnects_total") >= 2.0
    })
    .await;
    assert_eq!(sample(&server.metrics().await, "sluice_xds_connected"), 0.0);
    server.stop().await;
}

/// A control-plane restart changes nothing for callers: the rules and counters stay while it
/// is gone; sluice reconnects, resubscribes with the version in force, and takes the restarted
/// control plane's snapshot (versions counted from 1 again) without losing a counter.
#[tokio::test]
async fn a_control_plane_restart_changes_nothing_for_callers() {
    let cp = ControlPlane::start(None).await;
    cp.set_snapshot(NODE, "4", &per_key(3));
    let server = start(settings(&cp)).await;
    generation_reaches(&server, 1).await;
    assert_eq!(codes(&server, "a", 2).await, [OK, OK]);
    let cp = cp.restart().await;
    eventually(DEADLINE, "sluice resubscribes", async || {
        !cp.received().is_empty()
    })
    .await;
    assert_eq!(cp.received()[0].version, "4", "the version in force");
    assert_eq!(
        codes(&server, "a", 1).await,
        [OK],
        "rules kept while the snapshot is missing"
    );
    cp.set_snapshot(NODE, "1", &per_key(3));
    generation_reaches(&server, 2).await;
    assert_eq!(codes(&server, "a", 1).await, [OVER], "the counter survived");
    let metrics = server.metrics().await;
    assert!(sample(&metrics, "sluice_xds_reconnects_total") >= 1.0);
    assert_eq!(
        sample(&metrics, r#"sluice_xds_accepted_version_info{version="1"}"#),
        1.0
    );
    server.stop().await;
}

/// After a reconnect the control plane sends the rules in force again (same version, same
/// resources): sluice ACKs them without compiling them again, so no new generation is logged;
/// a response of another type than the subscribed one is neither applied nor answered.
#[tokio::test]
async fn a_resend_is_not_a_reload_and_a_foreign_type_is_ignored() {
    let cp = ControlPlane::start(None).await;
    cp.set_snapshot(NODE, "4", &per_key(3));
    let server = start(settings(&cp)).await;
    generation_reaches(&server, 1).await;
    let acks = || {
        cp.received()
            .iter()
            .filter(|r| r.version == "4" && !r.nonce.is_empty() && r.error.is_none())
            .count()
    };
    // The generation is in force once the rules are installed; the ACK follows on the stream.
    eventually(DEADLINE, "the first response is ACKed", async || {
        acks() == 1
    })
    .await;
    for flap in 1..=3 {
        cp.flap();
        eventually(DEADLINE, "the resend is ACKed", async || acks() > flap).await;
    }
    assert_eq!(server.generation(), 1, "no rule set compiled again");
    assert!(sample(&server.metrics().await, "sluice_xds_reconnects_total") >= 3.0);

    cp.set_snapshot_typed(
        NODE,
        "5",
        "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        &per_key(1),
    );
    let sent = cp.responses_sent();
    eventually(DEADLINE, "the foreign response is sent", async || {
        cp.responses_sent() > sent
    })
    .await;
    // Nothing answered it, so this control plane waits; the next stream brings proper rules.
    cp.set_snapshot(NODE, "6", &per_key(2));
    cp.flap();
    generation_reaches(&server, 2).await;
    let received = cp.received();
    assert!(
        !received
            .iter()
            .any(|r| r.version == "5" || r.error.is_some()),
        "the foreign response was neither ACKed nor NACKed: {received:?}"
    );
    assert_eq!(
        codes(&server, "a", 3).await,
        [OK, OK, OVER],
        "version 6's limit of 2, never the foreign 1"
    );
    server.stop().await;
}

/// Node metadata and extra stream headers reach the control plane.
#[tokio::test]
async fn node_metadata_and_stream_headers_reach_the_control_plane() {
    let cp = ControlPlane::start(None).await;
    let mut xds = settings(&cp);
    xds.node_metadata = vec![("zone".into(), "eu-1".into())];
    xds.headers = vec![("authorization".into(), "Bearer t0ken".into())];
    let server = start(xds).await;
    eventually(DEADLINE, "a request", async || !cp.received().is_empty()).await;
    let first = &cp.received()[0];
    assert_eq!(
        first.node_metadata.get("zone").map(String::as_str),
        Some("eu-1")
    );
    assert_eq!(
        first.headers.get("authorization").map(String::as_str),
        Some("Bearer t0ken")
    );
    server.stop().await;
}

/// Mutual TLS as Envoy Gateway serves xDS (TLS 1.3 only, client certificate required), with its
/// certificates: PKCS#1 RSA keys, no ExtendedKeyUsage, the single-label name `envoy-gateway`.
/// Without the client certificate, or checking another name, nothing is accepted.
#[tokio::test]
async fn mutual_tls_with_envoy_gateway_certificates() {
    let certs = EgCerts::new();
    let cp = ControlPlane::start(Some(certs.control_plane_tls())).await;
    cp.set_snapshot(NODE, "1", &per_key(1));
    let tls = XdsTls {
        cert: Some(certs.path("tls.crt")),
        key: Some(certs.path("tls.key")),
        ca: Some(certs.path("ca.crt")),
        server_name: Some(GATEWAY_NAME.into()),
    };
    let mut xds = settings(&cp);
    xds.tls = Some(tls.clone());
    let server = start(xds).await;
    generation_reaches(&server, 1).await;
    assert_eq!(codes(&server, "a", 2).await, [OK, OVER]);
    server.stop().await;

    let refused = [
        XdsTls {
            cert: None,
            key: None,
            ..tls.clone()
        },
        XdsTls {
            server_name: Some("envoy-gateway.other".into()),
            ..tls
        },
    ];
    for tls in refused {
        let mut xds = settings(&cp);
        xds.tls = Some(tls.clone());
        let server = start(xds).await;
        eventually(DEADLINE, "failed attempts", async || {
            sample(&server.metrics().await, "sluice_xds_reconnects_total") >= 2.0
        })
        .await;
        assert_eq!(server.generation(), 0, "{tls:?}");
        server.stop().await;
    }
}
