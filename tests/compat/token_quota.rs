//! envoyproxy/ratelimit's own token-quota examples (its integration tests `token-quota.sh` and
//! `multiservice-tokenquota.sh`, PRs #1092/#1114) run unchanged against the `ratelimit`
//! personality: its rule file (the two `service` nodes, quota mode, 1 and 2 a minute, with
//! their `metadata`), its environment (Redis, `RESPONSE_DYNAMIC_METADATA=true`) and an Envoy 1.40
//! routed as its example proxy is (a check with 0 hits on the request path, a charge of 1 when the
//! stream ends, the service with quota left picked from the answer's dynamic metadata). The
//! personality counts as envoyproxy/ratelimit does: fixed windows recording every hit, a check
//! refused only past the limit, so a limit of 2 lets three requests through.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::envoy::Envoy;
use common::http1::{self, Response};
use common::process::poll;
use common::ratelimit::{Ratelimit, room_in_window};
use common::redis::{RedisServer, free_port};

/// The nodes of envoyproxy/ratelimit's example rule file its token-quota tests use, as written
/// there (domain `rl`).
const RULES: &str = r#"---
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: "service_2"
"#;

/// envoyproxy/ratelimit's example environment (its docker-compose), besides Redis's address and
/// the rules' root.
const EXAMPLE_ENV: [(&str, &str); 9] = [
    ("USE_STATSD", "false"),
    ("LOG_LEVEL", "debug"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("RESPONSE_DYNAMIC_METADATA", "true"),
    // Free ports instead of 8080/8081, so tests run side by side.
    ("PORT", "0"),
    ("GRPC_PORT", "0"),
    // A loaded test machine: calls may wait a second for Redis (sluice's own variable).
    ("SLUICE_REDIS_TIMEOUT", "1s"),
];

/// A stack: Redis, the personality with envoyproxy/ratelimit's example environment, and Envoy
/// with the two services behind it.
struct Stack {
    _redis: RedisServer,
    _data: tempfile::TempDir,
    ratelimit: Ratelimit,
    envoy: Envoy,
}

impl Stack {
    fn start() -> Self {
        let redis = RedisServer::start();
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("ratelimit/config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("config.yaml"), RULES).unwrap();
        let mut env: Vec<(String, String)> = EXAMPLE_ENV
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        env.push(("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port)));
        env.push(("RUNTIME_ROOT".into(), data.path().display().to_string()));
        let ratelimit = Ratelimit::start(&env);
        let envoy = Envoy::start(&bootstrap(ratelimit.grpc, free_port(), free_port()));
        let stack = Self {
            _redis: redis,
            _data: data,
            ratelimit,
            envoy,
        };
        stack.wait_for_redis();
        stack
    }

    /// Waits until a check-only call (it charges nothing) is answered by Redis, not by the
    /// rule's failure mode: the personality listens before Redis is connected.
    fn wait_for_redis(&self) {
        let body = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"service","value":"service_2"}],"hitsAddend":"0"}]}"#;
        poll(
            Duration::from_secs(30),
            "calls are answered by Redis",
            || {
                let answer = http1::post(
                    self.ratelimit.http,
                    "/json",
                    &[("content-type", "application/json")],
                    body,
                );
                (answer.status == 200 && !answer.body.contains("degraded")).then_some(())
            },
        );
    }

    /// `GET path` through Envoy, returning once Envoy has also sent the call that charges it
    /// at stream end (an answered request makes two rate-limit calls; a refused one may make
    /// only its check, having no service to name), so the next check sees it.
    fn get(&self, path: &str, request_no: u32) -> Response {
        let calls = self
            .envoy
            .counter("cluster.ratelimit.upstream_rq_completed");
        let number = request_no.to_string();
        let answer = http1::get(self.envoy.listener, path, &[("request-no", &number)]);
        let made = if answer.status == 200 { 2 } else { 1 };
        let sent = || {
            self.envoy
                .counter("cluster.ratelimit.upstream_rq_completed")
        };
        poll(
            Duration::from_secs(30),
            "the stream-end charge is sent",
            || (sent() >= calls + made).then_some(()),
        );
        answer
    }
}

/// `token-quota.sh`: service_2 allows 2 a minute and is charged at stream end, so three
/// requests pass and the fourth is refused; a minute later the bucket is fresh again.
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn token_quota_example_works_unchanged() {
    let stack = Stack::start();
    room_in_window(60, 20);
    for request_no in 1..=3 {
        let answer = stack.get("/tokenquota", request_no);
        assert_eq!(answer.status, 200, "request {request_no}: {answer:#?}");
    }
    let refused = stack.get("/tokenquota", 4);
    assert_eq!(refused.status, 429, "{refused:#?}");
    poll(
        Duration::from_secs(75),
        "the quota bucket is refreshed",
        || (stack.get("/tokenquota", 5).status == 200).then_some(()),
    );
}

/// `multiservice-tokenquota.sh`: the answer's metadata names the service with quota left,
/// Envoy routes there; service_1 (1 a minute) serves two requests, service_2 (2 a minute) three,
/// the sixth is refused; a minute later service_1 serves again.
#[test]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
fn multiservice_token_quota_example_works_unchanged() {
    let stack = Stack::start();
    room_in_window(60, 20);
    let served = |request_no| {
        let answer = stack.get("/multiservice-tokenquota", request_no);
        assert_eq!(answer.status, 200, "request {request_no}: {answer:#?}");
        answer.body
    };
    for request_no in 1..=2 {
        assert_eq!(served(request_no), "Hello World from Service 1");
    }
    for request_no in 3..=5 {
        assert_eq!(served(request_no), "Hello World from Service 2");
    }
    let refused = stack.get("/multiservice-tokenquota", 6);
    assert_eq!(refused.status, 429, "{refused:#?}");
    poll(Duration::from_secs(75), "service_1 serves again", || {
        let answer = stack.get("/multiservice-tokenquota", 7);
        (answer.status == 200)
            .then_some(())
            .filter(|_| answer.body == "Hello World from Service 1")
    });
}

/// The example proxy's two routes with sluice at `ratelimit` and the services on ports `one`
/// and `two` (listeners of the same Envoy, answering as envoyproxy/ratelimit's mock does).
fn bootstrap(ratelimit: SocketAddr, one: u16, two: u16) -> String {
    include_str!("../fixtures/budgets/token-quota-envoy.yaml")
        .replace("RATELIMIT_PORT", &ratelimit.port().to_string())
        .replace("SERVICE_1_PORT", &one.to_string())
        .replace("SERVICE_2_PORT", &two.to_string())
}
