//! The `ratelimit` personality started the way users deploy envoyproxy/ratelimit: the binary named
//! `ratelimit` (a symlink, as the image's `/bin/ratelimit`), no arguments, only
//! envoyproxy/ratelimit's environment variables, rules in envoyproxy/ratelimit's file layout, a
//! real Redis and a real Envoy.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::envoy::{self, Envoy};
use common::http1::{self, Upstream};
use common::process::{BIN, poll};
use common::ratelimit::{ConfigMap, ISTIO_RULES, Ratelimit, istio_container, room_in_window};
use common::redis::{RedisServer, free_port};

/// The sample's environment for a test: `/data` is a temporary directory, Redis is the test's,
/// and `PORT=0 GRPC_PORT=0` are added so that parallel tests never collide on 8080/8081 (the
/// sample relies on the defaults).
fn istio_env(data: &Path, redis_port: u16) -> Vec<(String, String)> {
    let (_, env, _) = istio_container();
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .map(|(name, value)| match name.as_str() {
            "RUNTIME_ROOT" => (name, value.replace("/data", &data.display().to_string())),
            "REDIS_URL" => (name, format!("127.0.0.1:{redis_port}")),
            _ => (name, value),
        })
        .collect();
    env.push(("PORT".into(), "0".into()));
    env.push(("GRPC_PORT".into(), "0".into()));
    env.push((
        LOADED_MACHINE_TIMEOUT[0].into(),
        LOADED_MACHINE_TIMEOUT[1].into(),
    ));
    env
}

/// sluice's own per-call Redis timeout (10 ms) can pass on a test machine shared by many builds;
/// then a call is answered by the rule's failure_mode and a count goes missing. The tests give
/// calls a second instead (a `SLUICE_*` variable, beside envoyproxy/ratelimit's).
const LOADED_MACHINE_TIMEOUT: [&str; 2] = ["SLUICE_REDIS_TIMEOUT", "1s"];

/// Waits until calls are answered by Redis: sluice listens before Redis is connected
/// (envoyproxy/ratelimit waits for it), and answers by failure_mode meanwhile, marked degraded.
fn wait_for_redis(get: impl Fn(&str) -> http1::Response) {
    poll(
        Duration::from_secs(30),
        "calls are answered by Redis",
        || {
            let response = get("/warm-up");
            (response.status == 200 && response.header("x-ratelimit-mode").is_none()).then_some(())
        },
    );
}

/// Envoy as Istio's task configures its ingress gateway: domain `ratelimit`,
/// `failure_mode_deny: true`, a 10 s timeout, `:path` sent as `PATH`.
fn istio_envoy(ratelimit: SocketAddr, upstream: SocketAddr) -> Envoy {
    envoy_to(&envoy::socket_address(ratelimit), upstream)
}

/// As [`istio_envoy`], the rate-limit service at the Envoy `address` (a socket or a pipe).
fn envoy_to(address: &str, upstream: SocketAddr) -> Envoy {
    let routes = r#"              - match: { prefix: "/" }
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - request_headers: { header_name: ":path", descriptor_key: PATH }
"#;
    Envoy::start(&envoy::with_routes(
        "ratelimit",
        true,
        routes,
        address,
        upstream,
    ))
}

/// Istio's sample container spec as is (`examples/istio/ratelimit-service.yaml`: its command,
/// every variable it sets, its ConfigMap mounted under RUNTIME_ROOT) behind Envoy configured as
/// Istio's task: `/productpage` passes once then gets a 429 with the limit headers; counting is
/// in Redis; a ConfigMap update (the `..data` swap) applies without a restart.
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn istio_sample_deployment_through_envoy() {
    let (command, _, mount) = istio_container();
    assert_eq!(
        command,
        ["/bin/ratelimit"],
        "the image's drop-in entry point"
    );
    let redis = RedisServer::start();
    let data = tempfile::tempdir().unwrap();
    let mount = mount
        .strip_prefix("/data/")
        .expect("mounted under RUNTIME_ROOT");
    let mut config_map = ConfigMap::mount(data.path().join(mount), &[("config.yaml", ISTIO_RULES)]);
    let ratelimit = Ratelimit::start(&istio_env(data.path(), redis.port));
    let health = http1::get(ratelimit.http, "/healthcheck", &[]);
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));
    let upstream = Upstream::start();
    let envoy = istio_envoy(ratelimit.grpc, upstream.addr);
    let get = |path: &str| http1::get(envoy.listener, path, &[]);
    wait_for_redis(get);

    room_in_window(60, 10);
    assert_eq!(get("/productpage").status, 200);
    let refused = get("/productpage");
    assert_eq!(refused.status, 429, "{refused:#?}");
    assert_eq!(refused.expect_header("x-envoy-ratelimited"), "true");
    assert_eq!(refused.expect_header("x-ratelimit-remaining"), "0");
    assert!(
        refused
            .expect_header("x-ratelimit-limit")
            .starts_with("1, 1;w=60")
    );
    let retry_after: u64 = refused.expect_header("retry-after").parse().unwrap();
    assert!((1..=120).contains(&retry_after), "{refused:#?}");
    assert_eq!(refused.expect_header("cache-control"), "no-store");
    assert_eq!(
        get("/reviews").status,
        200,
        "PATH (any value): 100 a minute"
    );
    assert_ne!(redis.cli(&["DBSIZE"]).trim(), "0", "counters live in Redis");

    // A ConfigMap update: /reviews gets 1 a minute; no restart.
    let stricter = format!(
        "{ISTIO_RULES}  - key: PATH\n    value: \"/reviews\"\n    rate_limit: {{ unit: minute, requests_per_unit: 1 }}\n"
    );
    config_map.update(&[("config.yaml", &stricter)]);
    poll(Duration::from_secs(30), "the new rules apply", || {
        (get("/reviews").status == 429).then_some(())
    });
    let log = ratelimit.log();
    assert!(
        !log.contains("not honoured"),
        "Istio's env is all honoured:\n{log}"
    );
}

/// An envoyproxy/ratelimit manifest of the classic, Kustomize-style shape: `RUNTIME_WATCH_ROOT`
/// (default true) with `RUNTIME_ROOT` a symlink swapped to a new version, Redis as a `redis://`
/// URL, Prometheus on a port of its own, JSON logs with envoyproxy/ratelimit's keys, and one
/// variable sluice does not honour named in the one warning.
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn kustomize_style_manifest_through_envoy() {
    let redis = RedisServer::start();
    let data = tempfile::tempdir().unwrap();
    let version = |n: u32, rules: &str| {
        let dir = data.path().join(format!("v{n}/ratelimit/config"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rules.yaml"), rules).unwrap();
        let staged = data.path().join("staged");
        std::os::unix::fs::symlink(format!("v{n}"), &staged).unwrap();
        std::fs::rename(&staged, data.path().join("current")).unwrap();
    };
    version(1, ISTIO_RULES);
    let metrics_port = free_port();
    let env: Vec<(String, String)> = [
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("redis://127.0.0.1:{}/0", redis.port)),
        ("USE_STATSD", "false".into()),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", format!(":{metrics_port}")),
        (
            "RUNTIME_ROOT",
            data.path().join("current").display().to_string(),
        ),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("LOG_LEVEL", "info".into()),
        ("LOG_FORMAT", "json".into()),
        ("DEBUG_PORT", "6070".into()),
        ("PORT", "0".into()),
        ("GRPC_PORT", "0".into()),
        (LOADED_MACHINE_TIMEOUT[0], LOADED_MACHINE_TIMEOUT[1].into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let ratelimit = Ratelimit::start(&env);
    let upstream = Upstream::start();
    let envoy = istio_envoy(ratelimit.grpc, upstream.addr);
    let get = |path: &str| http1::get(envoy.listener, path, &[]);
    wait_for_redis(get);
    room_in_window(60, 10);
    assert_eq!(get("/productpage").status, 200);
    assert_eq!(get("/productpage").status, 429);

    separate_prometheus_listener(metrics_port);

    // The symlink swap of RUNTIME_ROOT loads the new version.
    let stricter = ISTIO_RULES.replace("requests_per_unit: 100", "requests_per_unit: 1");
    version(2, &stricter);
    poll(Duration::from_secs(30), "the new version applies", || {
        (get("/details").status == 429).then_some(())
    });

    json_logs_warn_once(&ratelimit.log());
}

/// The separate Prometheus listener on `port`: envoyproxy/ratelimit's names and the process
/// collector.
fn separate_prometheus_listener(port: u16) {
    let metrics = http1::get(SocketAddr::from(([127, 0, 0, 1], port)), "/metrics", &[]);
    assert_eq!(metrics.status, 200);
    for name in [
        "ratelimit_service_rate_limit_over_limit{",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_cpu_seconds_total ",
    ] {
        assert!(metrics.body.contains(name), "{name}:\n{}", metrics.body);
    }
}

/// JSON logs with envoyproxy/ratelimit's keys, and the one warning about DEBUG_PORT.
fn json_logs_warn_once(log: &str) {
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["@timestamp"].is_string() && l["@message"].is_string())
    );
    let warnings: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["level"] == "warning").collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0]["@message"]
            .as_str()
            .unwrap()
            .contains("DEBUG_PORT (no debug listener")
    );
}

/// A malformed envoyproxy/ratelimit value stops the start with the variable and its value;
/// `SLUICE_*` variables win over envoyproxy/ratelimit ones (which are then named as overridden);
/// rules that do not load leave the server up but unhealthy until a good rule set arrives.
#[test]
fn malformed_values_stop_the_start_and_sluice_variables_win() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("ratelimit");
    std::os::unix::fs::symlink(BIN, &binary).unwrap();
    let out = Command::new(&binary)
        .env_clear()
        .env("USE_STATSD", "")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("USE_STATSD=\"\": not a boolean"),
        "{stderr}"
    );

    let data = tempfile::tempdir().unwrap();
    let rules = data.path().join("ratelimit/config");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("config.yaml"), "domain: [broken").unwrap();
    let env: Vec<(String, String)> = [
        ("BACKEND_TYPE", "memcache"),
        ("SLUICE_STORE", "memory"),
        ("SLUICE_NO_PERSIST", "true"),
        ("HOST", "no.such.host.invalid"),
        ("SLUICE_HTTP_ADDR", "127.0.0.1:0"),
        ("GRPC_PORT", "0"),
        ("RUNTIME_ROOT", data.path().to_str().unwrap()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "warn"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let ratelimit = Ratelimit::start(&env);
    let health = http1::get(ratelimit.http, "/healthcheck", &[]);
    assert_eq!(
        (health.status, health.body.as_str()),
        (503, "no rules loaded yet")
    );
    std::fs::write(rules.join("config.yaml"), ISTIO_RULES).unwrap();
    poll(
        Duration::from_secs(30),
        "good rules make it healthy",
        || (http1::get(ratelimit.http, "/healthcheck", &[]).status == 200).then_some(()),
    );
    let log = ratelimit.log();
    assert!(
        log.contains("BACKEND_TYPE (overridden by --store)"),
        "{log}"
    );
    assert!(log.contains("HOST (overridden by --http-addr)"), "{log}");
    assert!(
        log.contains("\"config.yaml:2:1: "),
        "errors name upstream's key: {log}"
    );
}

/// `sluice serve --upstream-env` is the personality too; plain `sluice serve` reads no
/// envoyproxy/ratelimit name, so variables meant for something else (a malformed `PORT`,
/// `LOG_LEVEL`) change nothing.
#[test]
fn upstream_env_flag_and_plain_serve() {
    let out = common::process::Serve::new()
        .args(["--upstream-env"])
        .env("USE_STATSD", "")
        .output();
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("USE_STATSD=\"\": not a boolean"),
        "{}",
        out.stderr
    );
    let mut plain = common::process::Serve::new()
        .rules(ISTIO_RULES)
        .args(["--no-persist"])
        .env("PORT", "not a port")
        .env("LOG_LEVEL", "verbose")
        .env("USE_STATSD", "")
        .env("BACKEND_TYPE", "memcache")
        .start();
    let health = http1::get(plain.http_addr, "/healthcheck", &[]);
    assert_eq!(health.status, 200);
    assert!(
        !plain.log().contains("envoyproxy/ratelimit"),
        "{}",
        plain.log()
    );
    assert!(plain.stop().success());
}

/// GRPC_UDS: gRPC on a unix socket, which Envoy reaches as a pipe; GRPC_MAX_CONNECTION_AGE:
/// connections are closed gracefully and Envoy reconnects, without a single call failing (the
/// filter's failure_mode_deny would turn a failed call into a 500).
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn unix_socket_and_connection_age_through_envoy() {
    let redis = RedisServer::start();
    let data = tempfile::tempdir().unwrap();
    ConfigMap::mount(
        data.path().join("ratelimit/config"),
        &[("config.yaml", ISTIO_RULES)],
    );
    let socket = data.path().join("ratelimit.sock");
    let mut env = istio_env(data.path(), redis.port);
    env.extend(
        [
            ("GRPC_UDS", socket.display().to_string()),
            ("GRPC_MAX_CONNECTION_AGE", "1s".into()),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "1s".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let _ratelimit = Ratelimit::start(&env);
    let upstream = Upstream::start();
    let envoy = envoy_to(
        &format!("pipe: {{ path: {:?} }}", socket.display().to_string()),
        upstream.addr,
    );
    let get = |path: &str| http1::get(envoy.listener, path, &[]);
    wait_for_redis(get);
    room_in_window(60, 10);
    assert_eq!(get("/productpage").status, 200);
    assert_eq!(get("/productpage").status, 429, "decided over the socket");
    let mut calls = 0;
    poll(Duration::from_secs(60), "connections are recycled", || {
        calls += 1;
        // A new path each time: each has its own counter (100 a minute).
        let status = get(&format!("/reviews/{calls}")).status;
        assert_eq!(status, 200, "no call fails while connections age out");
        (envoy.counter("cluster.ratelimit.upstream_cx_total") >= 3).then_some(())
    });
}

/// Istio's sample with some variables changed (as a manifest's overrides do), its rules in a
/// ConfigMap, behind Istio's Envoy, once calls are answered by Redis.
struct Deployed {
    ratelimit: Ratelimit,
    envoy: Envoy,
    _upstream: Upstream,
    _data: tempfile::TempDir,
}

impl Deployed {
    fn start(vars: &[(&str, &str)]) -> Self {
        let data = tempfile::tempdir().unwrap();
        ConfigMap::mount(
            data.path().join("ratelimit/config"),
            &[("config.yaml", ISTIO_RULES)],
        );
        let mut env = istio_env(data.path(), 0);
        for (name, value) in vars {
            env.retain(|(n, _)| n != name);
            env.push(((*name).to_owned(), (*value).to_owned()));
        }
        let ratelimit = Ratelimit::start(&env);
        let upstream = Upstream::start();
        let envoy = istio_envoy(ratelimit.grpc, upstream.addr);
        wait_for_redis(|path| http1::get(envoy.listener, path, &[]));
        Self {
            ratelimit,
            envoy,
            _upstream: upstream,
            _data: data,
        }
    }

    fn get(&self, path: &str) -> http1::Response {
        http1::get(self.envoy.listener, path, &[])
    }
}

/// envoyproxy/ratelimit's unix-socket Redis (`REDIS_SOCKET_TYPE=unix`, `REDIS_URL` the socket's
/// path, `REDIS_AUTH` its password) and envoyproxy/ratelimit's headers under custom names
/// (`LIMIT_RESPONSE_HEADERS_ENABLED` with `LIMIT_*_HEADER`), behind Envoy configured as Istio's
/// task: 200 then 429 carrying exactly those three headers (no draft-10 headers, no Retry-After),
/// their reset equal to Envoy's `x-ratelimit-reset`; the counters are envoyproxy/ratelimit's keys
/// in that Redis, as the personality counts by default.
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn unix_socket_redis_and_upstream_headers_through_envoy() {
    const PASSWORD: &str = "socket-secret";
    let (redis, _sockets, socket) = RedisServer::start_on_socket(PASSWORD);
    let deployed = Deployed::start(&[
        ("REDIS_SOCKET_TYPE", "unix"),
        ("REDIS_URL", socket.as_str()),
        ("REDIS_AUTH", PASSWORD),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_LIMIT_HEADER", "X-Quota-Limit"),
        ("LIMIT_REMAINING_HEADER", "X-Quota-Remaining"),
        ("LIMIT_RESET_HEADER", "X-Quota-Reset"),
    ]);
    let get = |path: &str| deployed.get(path);

    room_in_window(60, 10);
    let passed = get("/productpage");
    assert_eq!(passed.status, 200, "{passed:#?}");
    assert_eq!(passed.expect_header("x-quota-limit"), "1");
    assert_eq!(passed.expect_header("x-quota-remaining"), "0");
    let refused = get("/productpage");
    assert_eq!(refused.status, 429, "{refused:#?}");
    assert_eq!(refused.expect_header("x-quota-limit"), "1");
    assert_eq!(refused.expect_header("x-quota-remaining"), "0");
    let reset: u64 = refused.expect_header("x-quota-reset").parse().unwrap();
    assert!((1..=60).contains(&reset), "{refused:#?}");
    assert_eq!(
        refused.expect_header("x-ratelimit-reset"),
        reset.to_string(),
        "Envoy's reset and upstream's header agree"
    );
    for absent in [
        "retry-after",
        "ratelimit",
        "ratelimit-policy",
        "ratelimit-reset",
    ] {
        assert_eq!(refused.header(absent), None, "{absent}: {refused:#?}");
    }
    let keys = redis.cli(&["KEYS", "ratelimit_PATH_/productpage_*"]);
    let window: u64 = keys
        .trim()
        .rsplit('_')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("upstream's key in the socket's Redis: {keys:?}"));
    assert_eq!(window % 60, 0, "a minute window's start: {keys}");
    let log = deployed.ratelimit.log();
    assert!(!log.contains("not honoured"), "all honoured:\n{log}");
}

/// Sentinel as envoyproxy/ratelimit's variables name it (`REDIS_TYPE=sentinel`,
/// `REDIS_URL=<master>,<sentinel>,…`, `REDIS_AUTH` for the nodes, `REDIS_SENTINEL_AUTH` for the
/// sentinels) behind Envoy: 200 then 429 with sluice's default headers, Envoy's
/// `x-ratelimit-reset` equal to `Retry-After`, the counter on the master the sentinels name;
/// after a failover, calls are decided by the new master.
#[test]
#[ignore = "needs envoy, redis-server and redis-sentinel (scripts/test installs them)"]
fn sentinel_through_the_personality_and_envoy() {
    use common::sentinel::{MASTER, NODE_PASSWORD, SENTINEL_PASSWORD, SentinelSet};
    let set = SentinelSet::start();
    let sentinels: Vec<String> = set
        .sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("{MASTER},{}", sentinels.join(","));
    let deployed = Deployed::start(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_AUTH", NODE_PASSWORD),
        ("REDIS_SENTINEL_AUTH", SENTINEL_PASSWORD),
    ]);
    let get = |path: &str| deployed.get(path);

    room_in_window(60, 10);
    assert_eq!(get("/productpage").status, 200);
    let refused = get("/productpage");
    assert_eq!(refused.status, 429, "{refused:#?}");
    assert_eq!(
        refused.expect_header("x-ratelimit-reset"),
        refused.expect_header("retry-after"),
        "Envoy's reset equals Retry-After: {refused:#?}"
    );
    let first = set.master_port();
    let keys = set
        .node(first)
        .cli(&["KEYS", "ratelimit_PATH_/productpage_*"]);
    assert!(!keys.trim().is_empty(), "counted on the master");

    set.sentinels[0].cli(&["SENTINEL", "FAILOVER", MASTER]);
    poll(
        Duration::from_secs(60),
        "the sentinels name a new master",
        || (set.master_port() != first).then_some(()),
    );
    let second = set.master_port();
    let mut calls = 0;
    poll(Duration::from_secs(60), "the new master decides", || {
        calls += 1;
        let path = format!("/after-failover/{calls}");
        let response = get(&path);
        let counted = !set
            .node(second)
            .cli(&["KEYS", &format!("ratelimit_PATH_{path}_*")])
            .trim()
            .is_empty();
        (response.status == 200 && response.header("x-ratelimit-mode").is_none() && counted)
            .then_some(())
    });
}
