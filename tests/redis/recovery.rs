//! After Redis comes back, no call is refused by a connection that broke while it was away.

use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::{OK, TestServer, call, eventually, header, one_descriptor};

const RULES: &str = "\
domain: recovery
descriptors:
  - key: closed
    failure_mode: deny
    rate_limit: { unit: hour, requests_per_unit: 100000 }
";

/// Calls `n` times; every call must be answered by Redis (OK, not degraded).
async fn all_decided_by_redis(server: &TestServer, n: usize, when: &str) {
    let mut client = server.client().await;
    for i in 0..n {
        let r = call(
            &mut client,
            one_descriptor("recovery", &[("closed", &format!("{when}-{i}"))]),
        )
        .await;
        assert_eq!(
            header(&r, "x-ratelimit-mode"),
            None,
            "{when}: call {i} degraded"
        );
        assert_eq!(r.overall_code, OK, "{when}: call {i} refused");
    }
}

/// Issue 13: each pooled connection that broke during an outage failed the next call made on
/// it, however long after Redis returned (a `deny` rule refused the first call or two). Two
/// outages: one too short for any call to notice (the breaker stays closed), one long
/// enough to open the breaker. After each, every call is answered by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn connections_broken_during_an_outage_refuse_no_call_after_it() {
    let mut redis = RedisServer::start();
    let store = crate::store(&redis.url()).await;
    let server = TestServer::start_on(RULES, store.clone()).await;
    all_decided_by_redis(&server, 10, "before").await;

    // A restart between two calls: every pooled connection is dead, the breaker closed.
    redis.restart();
    all_decided_by_redis(&server, 10, "after a quick restart").await;

    // An outage that opens the breaker; the probe closes it once Redis answers.
    redis.kill();
    let mut client = server.client().await;
    eventually(Duration::from_secs(30), "the breaker opens", async || {
        let _ = client
            .should_rate_limit(one_descriptor("recovery", &[("closed", "outage")]))
            .await;
        store.circuit_open()
    })
    .await;
    redis.restart();
    eventually(Duration::from_secs(30), "the breaker closes", async || {
        !store.circuit_open()
    })
    .await;
    all_decided_by_redis(&server, 10, "after the breaker closed").await;
    server.stop().await;
}
