//! sluice on a real Redis: faults (kill and restart under load), the local over-limit cache,
//! several `sluice serve` processes sharing one Redis, and Redis Cluster.
//! Every test starts its own redis-server(s) on free loopback ports (scripts/test installs them).

#[path = "../common/mod.rs"]
mod common;

mod batched_runs;
mod cluster;
mod faults;
mod leases;
mod pool;
mod recovery;
mod replicas;
mod secure;
mod sentinel;
mod shared_runs;
mod unix;
mod upstream_keys;

use std::sync::Arc;
use std::time::Duration;

use sluice::store::redis::RedisClock;
use sluice::store::{RedisSettings, RedisStore};

/// A Redis store on `url` with Redis's own clock and test-friendly health timing, and a
/// timeout that a loaded test machine never hits while Redis is healthy.
pub async fn store(url: &str) -> Arc<RedisStore> {
    store_with_timeout(url, Duration::from_secs(1)).await
}

/// As [`store`], with the call timeout `timeout`.
pub async fn store_with_timeout(url: &str, timeout: Duration) -> Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        // Long enough that a loaded test machine does not reach it during a short outage.
        unhealthy_after: Duration::from_secs(3),
        timeout,
        ..RedisSettings::new(url)
    };
    Arc::new(RedisStore::connect(settings).await.expect("redis store"))
}
