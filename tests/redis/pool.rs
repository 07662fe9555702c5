//! The connection pool after Redis restarts: one lost connection drops them all, so once Redis
//! answers again no call meets a dead connection, however many the pool holds.

use std::sync::Arc;
use std::time::Duration;

use sluice::store::redis::RedisClock;
use sluice::store::{RedisSettings, RedisStore};

use crate::common::redis::RedisServer;
use crate::common::{OK, TestServer, call, eventually, header, one_descriptor};

const RULES: &str = "\
domain: pool
descriptors:
  - key: k
    failure_mode: allow
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
";

/// Eight connections, three failures open the breaker: without dropping the whole pool, the
/// five connections no call failed on would still be dead when Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn no_dead_connection_after_a_restart() {
    let mut redis = RedisServer::start();
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: Duration::from_millis(200),
        connections: 8,
        unhealthy_after: Duration::from_secs(600),
        ..RedisSettings::new(redis.url())
    };
    let store = Arc::new(RedisStore::connect(settings).await.expect("store"));
    let server = TestServer::start_on(RULES, store.clone()).await;
    let mut client = server.client().await;
    let one = |i: usize| one_descriptor("pool", &[("k", &i.to_string())]);
    for i in 0..16 {
        let r = call(&mut client, one(i)).await;
        assert_eq!((r.overall_code, header(&r, "x-ratelimit-mode")), (OK, None));
    }
    redis.kill();
    let mut i = 16;
    while !store.circuit_open() {
        call(&mut client, one(i)).await;
        i += 1;
    }
    redis.restart();
    eventually(Duration::from_secs(10), "Redis decides again", async || {
        i += 1;
        header(&call(&mut client, one(i)).await, "x-ratelimit-mode").is_none()
    })
    .await;
    for n in 0..100 {
        i += 1;
        let r = call(&mut client, one(i)).await;
        assert_eq!(
            (r.overall_code, header(&r, "x-ratelimit-mode")),
            (OK, None),
            "call {n} after Redis answered again"
        );
    }
    server.stop().await;
}
