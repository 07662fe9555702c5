//! sluice deployed as Envoy Gateway deploys its rate-limit service: the binary fed by the test
//! control plane over mutual TLS with Envoy Gateway's certificates, serving gRPC over TLS with
//! the `/certs` pair, behind a real Envoy that talks TLS to it. Rules pushed over xDS enforce;
//! a change applies without a restart; a bad push is NACKed with its error while enforcement
//! goes on; a control-plane restart changes nothing for callers.

use super::certs::{EgCerts, GATEWAY_NAME};
use super::common::envoy::{Bootstrap, DOMAIN, Envoy};
use super::common::http1::{self, Upstream};
use super::common::process::{poll, repo_path};
use super::common::yaml::document;
use super::control_plane::ControlPlane;
use super::process::Binary;
use super::wire::{self, MINUTE, config, limited, parent};
use super::{DEADLINE, NODE};

/// Envoy's `(generic_key=per_key, key=<x-key>)` route limited to `requests` per minute, and
/// `extra` descriptors beside it.
fn rules(requests: u32, extra: Vec<wire::RateLimitDescriptor>) -> Vec<wire::RateLimitConfig> {
    let mut descriptors = vec![parent(
        "generic_key",
        "per_key",
        vec![limited("key", "", requests, MINUTE)],
    )];
    descriptors.extend(extra);
    vec![config(DOMAIN, descriptors)]
}

/// The binary with the settings Envoy Gateway's Deployment gives upstream's image: xDS from
/// `cp` as node `envoy-ratelimit` over mutual TLS with the `/certs` files, gRPC TLS with the
/// same pair, serving before the first rules (FORCE_START_WITHOUT_INITIAL_CONFIG=true).
/// The control plane's address is a loopback port, so the name `envoy-gateway` is given as the
/// name to check (the test cannot make `envoy-gateway` resolve).
fn start_as_envoy_gateway(certs: &EgCerts, cp: &ControlPlane) -> Binary {
    let path = |name: &str| certs.path(name).display().to_string();
    let server = cp.addr.to_string();
    let args = [
        "--xds-server",
        &server,
        "--xds-node-id",
        NODE,
        "--xds-tls-cert",
        &path("tls.crt"),
        "--xds-tls-key",
        &path("tls.key"),
        "--xds-tls-ca",
        &path("ca.crt"),
        "--xds-tls-server-name",
        GATEWAY_NAME,
        "--xds-force-start",
        "--tls-cert",
        &path("tls.crt"),
        "--tls-key",
        &path("tls.key"),
        "--no-persist",
    ];
    Binary::serve(&args)
}

/// Waits until sluice serves the rules of xDS version `version`.
fn wait_for_version(sluice: &Binary, version: &str) {
    let line = format!("# xds version {version}\n");
    poll(DEADLINE, &format!("xDS version {version} in force"), || {
        let rlconfig = http1::try_get(sluice.http_addr, "/rlconfig", &[]).ok()?;
        rlconfig.body.starts_with(&line).then_some(())
    });
}

fn statuses(envoy: &Envoy, n: usize, key: &str) -> Vec<u16> {
    (0..n)
        .map(|_| http1::get(envoy.listener, "/", &[("x-key", key)]).status)
        .collect()
}

/// The whole path: control plane → (mTLS) → sluice → (TLS) ← Envoy ← client.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn envoy_enforces_rules_pushed_over_xds() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let certs = EgCerts::new();
    let cp = runtime.block_on(ControlPlane::start(Some(certs.control_plane_tls())));
    cp.set_snapshot(NODE, "1", &rules(3, Vec::new()));
    let sluice = start_as_envoy_gateway(&certs, &cp);
    wait_for_version(&sluice, "1");
    let upstream = Upstream::start();
    let bootstrap = Bootstrap {
        sluice: sluice.grpc_addr,
        upstream: upstream.addr,
        // Every RLS failure would be a 500: a 200 is sluice's answer.
        failure_mode_deny: true,
    };
    let (ca, cert, key) = (
        certs.path("ca.crt"),
        certs.path("tls.crt"),
        certs.path("tls.key"),
    );
    let envoy = Envoy::start(&bootstrap.yaml_with_tls(&ca, &cert, &key));
    assert_eq!(statuses(&envoy, 4, "a"), [200, 200, 200, 429]);

    // A change applies without a restart; key a's counter is kept.
    cp.set_snapshot(
        NODE,
        "2",
        &rules(5, vec![limited("path", "/", 1000, MINUTE)]),
    );
    wait_for_version(&sluice, "2");
    assert_eq!(statuses(&envoy, 3, "a"), [200, 200, 429]);

    // A bad push is NACKed with its error text; version 2 keeps enforcing.
    let broken = rules(1, vec![limited("broken", "", 1, 0)]);
    cp.set_snapshot(NODE, "3", &broken);
    poll(DEADLINE, "a NACK", || cp.nacks().first().cloned());
    let nack = cp.nacks()[0].clone();
    assert_eq!(nack.version, "2");
    assert_eq!(
        nack.error.as_deref(),
        Some("e2e: invalid rate limit unit 'UNKNOWN'")
    );
    assert_eq!(statuses(&envoy, 6, "b"), [200, 200, 200, 200, 200, 429]);

    // The control plane restarts with an empty cache, then its versions count from 1 again:
    // callers notice nothing, and the counters outlive it.
    let cp = runtime.block_on(cp.restart());
    assert_eq!(statuses(&envoy, 2, "a"), [429, 429]);
    assert_eq!(statuses(&envoy, 1, "c"), [200]);
    poll(DEADLINE, "sluice resubscribes", || {
        cp.received().first().cloned()
    });
    assert_eq!(cp.received()[0].version, "2", "the version in force");
    cp.set_snapshot(NODE, "1", &rules(5, Vec::new()));
    wait_for_version(&sluice, "1");
    assert_eq!(statuses(&envoy, 5, "c"), [200, 200, 200, 200, 429]);
    assert!(upstream.hits() >= 15, "allowed calls reached the upstream");
}

/// `examples/envoy-gateway/` stays consistent: both ways of swapping the image name the same
/// image with a tag (Envoy Gateway requires one), both configure the Redis backend without which
/// no rate-limit Deployment is made, and the policy is a global rate limit.
#[test]
fn the_envoy_gateway_example_swaps_the_image() {
    let read = |name: &str| {
        let path = repo_path(&format!("examples/envoy-gateway/{name}"));
        document(&std::fs::read_to_string(&path).expect("example file"))
    };
    let helm = read("helm-values.yaml");
    let config = read("envoy-gateway.yaml");
    let helm_image = &helm["global"]["images"]["ratelimit"]["image"];
    let config_image =
        &config["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["image"];
    assert_eq!(helm_image, config_image);
    let image = helm_image.as_str().expect("image");
    assert!(
        image.rsplit('/').next().unwrap().contains(':'),
        "{image} has no tag"
    );
    for backend in [
        &helm["config"]["envoyGateway"]["rateLimit"],
        &config["rateLimit"],
    ] {
        assert_eq!(backend["backend"]["type"], "Redis");
        assert!(backend["backend"]["redis"]["url"].is_string());
    }
    assert_eq!(config["kind"], "EnvoyGateway");
    let policy = read("backend-traffic-policy.yaml");
    assert_eq!(policy["kind"], "BackendTrafficPolicy");
    assert_eq!(policy["spec"]["rateLimit"]["type"], "Global");
}
