//! sluice on a real Redis: faults (kill and restart under load), the local over-limit cache,
//! several `sluice serve` processes sharing one Redis, and Redis Cluster.
//! Every test starts its own redis-server(s) on free loopback ports (scripts/test installs them).

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod faults;
mod replicas;
mod secure;

use std::sync::Arc;
use std::time::Duration;

use sluice::store::redis::RedisClock;
use sluice::store::{RedisSettings, RedisStore};

/// A Redis store on `url` with Redis's own clock and test-friendly health timing.
pub async fn store(url: &str) -> Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        unhealthy_after: Duration::from_millis(500),
        ..RedisSettings::new(url)
    };
    Arc::new(RedisStore::connect(settings).await.expect("redis store"))
}
