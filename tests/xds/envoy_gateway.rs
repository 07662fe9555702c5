//! sluice deployed as Envoy Gateway deploys its rate-limit service: the binary started as
//! `ratelimit` with Envoy Gateway's environment, fed by the test control plane over mutual TLS
//! with Envoy Gateway's certificates, counting in Redis, serving gRPC over TLS with the `/certs`
//! pair, behind a real Envoy that talks TLS to it. Rules pushed over xDS enforce;
//! a change applies without a restart; a bad push is NACKed with its error while enforcement
//! goes on; a control-plane restart changes nothing for callers.

use super::certs::{EgCerts, GATEWAY_NAME};
use super::common::envoy::{Bootstrap, DOMAIN, Envoy};
use super::common::http1::{self, Upstream};
use super::common::process::{BIN, poll, repo_path};
use super::common::redis::RedisServer;
use super::common::yaml::document;
use super::control_plane::ControlPlane;
use super::process::Binary;
use super::wire::{self, DAY, MINUTE, config, limited, parent};
use super::{DEADLINE, NODE};

/// Envoy's `(generic_key=per_key, key=<x-key>)` route limited to `requests` a day (a window
/// edge is as good as never crossed during the test), and `extra` descriptors beside it.
fn rules(requests: u32, extra: Vec<wire::RateLimitDescriptor>) -> Vec<wire::RateLimitConfig> {
    let mut descriptors = vec![parent(
        "generic_key",
        "per_key",
        vec![limited("key", "", requests, DAY)],
    )];
    descriptors.extend(extra);
    vec![config(DOMAIN, descriptors)]
}

/// The binary started as Envoy Gateway's Deployment starts envoyproxy/ratelimit's image: as
/// `ratelimit` (a symlink), no arguments, exactly Envoy Gateway's environment (drop-in.md §4.1, in
/// its order), with the Redis `redis`. What a test on one machine must change is changed and
/// nothing else: the ports (`HOST`/`PORT`/`GRPC_HOST`/`GRPC_PORT`, which Envoy Gateway leaves at
/// their defaults, on loopback port 0, and `PROMETHEUS_ADDR` on port 0); `/certs` is a temporary
/// directory, and the statsd_exporter mapping is read from the fixtures; the control plane's
/// address is a loopback port, so the name in its certificate, `envoy-gateway`, is given by
/// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_TLS_SAN` (the test cannot make
/// `envoy-gateway` resolve).
fn start_as_envoy_gateway(certs: &EgCerts, cp: &ControlPlane, redis: &RedisServer) -> Binary {
    let path = |name: &str| certs.path(name).display().to_string();
    let (server, redis) = (cp.addr.to_string(), format!("127.0.0.1:{}", redis.port));
    let env = [
        ("RUNTIME_ROOT", "/data".to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", server),
        ("CONFIG_GRPC_XDS_NODE_ID", NODE.into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", path("tls.crt")),
        ("GRPC_SERVER_TLS_KEY", path("tls.key")),
        ("GRPC_SERVER_TLS_CA_CERT", path("ca.crt")),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", path("tls.crt")),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", path("tls.key")),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", path("ca.crt")),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", ":0".into()),
        // Envoy Gateway mounts its mapping ConfigMap here; the test reads the same file from the
        // fixtures (sluice applies it, and a file that does not load stops the start).
        (
            "PROMETHEUS_MAPPER_YAML",
            repo_path("tests/fixtures/envoy-gateway/statsd_conf.yaml")
                .display()
                .to_string(),
        ),
        // The test's changes: free loopback ports, and the control plane's certificate name.
        ("HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", "0".into()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", GATEWAY_NAME.into()),
        // sluice's own per-call Redis timeout (10 ms) can pass on a test machine shared by many
        // builds; a call is then answered by failure_mode and a count goes missing. A second
        // instead (a `SLUICE_*` variable, as an operator would add in `container.env`).
        ("SLUICE_REDIS_TIMEOUT", "1s".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let link = tempfile::tempdir().expect("temp dir");
    let ratelimit = link.path().join("ratelimit");
    std::os::unix::fs::symlink(BIN, &ratelimit).expect("symlink");
    Binary::start(&ratelimit, &[], &env)
}

/// Waits until sluice serves the rules of xDS version `version`.
fn wait_for_version(sluice: &Binary, version: &str) {
    let line = format!("# xds version {version}\n");
    poll(DEADLINE, &format!("xDS version {version} in force"), || {
        let rlconfig = http1::try_get(sluice.http_addr, "/rlconfig", &[]).ok()?;
        rlconfig.body.starts_with(&line).then_some(())
    });
}

/// Waits until calls are answered by Redis: sluice listens before Redis is connected, and
/// answers by failure_mode meanwhile, marked degraded (each warm-up call has a key of its own).
fn wait_for_redis(envoy: &Envoy) {
    let mut calls = 0;
    poll(DEADLINE, "calls are answered by Redis", || {
        calls += 1;
        let key = format!("warm-up-{calls}");
        let response = http1::get(envoy.listener, "/", &[("x-key", &key)]);
        (response.status == 200 && response.header("x-ratelimit-mode").is_none()).then_some(())
    });
}

fn statuses(envoy: &Envoy, n: usize, key: &str) -> Vec<u16> {
    (0..n)
        .map(|_| http1::get(envoy.listener, "/", &[("x-key", key)]).status)
        .collect()
}

/// The whole path: control plane → (mTLS) → sluice → (TLS) ← Envoy ← client.
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn envoy_enforces_rules_pushed_over_xds() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let certs = EgCerts::new();
    let cp = runtime.block_on(ControlPlane::start(Some(certs.control_plane_tls())));
    cp.set_snapshot(NODE, "1", &rules(3, Vec::new()));
    let redis = RedisServer::start();
    let sluice = start_as_envoy_gateway(&certs, &cp, &redis);
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
    wait_for_redis(&envoy);
    assert_eq!(statuses(&envoy, 4, "a"), [200, 200, 200, 429]);

    // A change applies without a restart; key a's counter is kept. As under envoyproxy/ratelimit
    // (the drop-in personality records every charge of a fixed window), the refused fourth call
    // counted too: a is at 4 of the new 5.
    cp.set_snapshot(
        NODE,
        "2",
        &rules(5, vec![limited("path", "/", 1000, MINUTE)]),
    );
    wait_for_version(&sluice, "2");
    assert_eq!(statuses(&envoy, 3, "a"), [200, 429, 429]);

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
    // One line per version; every variable of Envoy Gateway's about xDS is honoured.
    let log = sluice.log();
    assert_eq!(log.matches("rules rejected").count(), 1, "{log}");
    assert_eq!(log.matches("rules loaded").count(), 3, "{log}");
    let warning = log
        .lines()
        .find(|l| l.contains("not honoured"))
        .unwrap_or_default();
    assert!(
        !warning.contains("XDS") && !warning.contains("FORCE_START"),
        "{warning}"
    );
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
