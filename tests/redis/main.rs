//! sluice on a real Redis: faults (kill and restart under load), the local over-limit cache,
//! several `sluice serve` processes sharing one Redis, Redis Cluster, and the admin listener's
//! counters read and reset on each kind of Redis.
//! Every test starts its own redis-server(s) on free loopback ports (scripts/test installs them).

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod batched_runs;
mod cluster;
mod cluster_failover;
mod cluster_load;
mod cluster_migration;
mod compat_keys;
mod faults;
mod leases;
mod netns;
mod netns_leases;
mod pool;
mod portion_claims;
mod recovery;
mod region_claims;
mod regions;
mod replicas;
mod rlqs_load;
mod rlqs_many_buckets;
mod rlqs_outage;
mod rlqs_replicas;
mod secure;
mod sentinel;
mod sentinel_admissions;
mod shared_runs;
mod unix;

use std::sync::Arc;
use std::time::Duration;

use sluice::algorithm::{Algorithm, Limit};
use sluice::clock::SECOND;
use sluice::store::redis::RedisClock;
use sluice::store::{Charge, Gate, RedisSettings, RedisStore};

/// A Redis store on `url` with Redis's own clock and test-friendly health timing, and a
/// timeout that a loaded test machine never hits while Redis is healthy.
pub async fn store(url: &str) -> Arc<RedisStore> {
    store_with_timeout(url, Duration::from_secs(1)).await
}

/// As [`store`], with the call timeout `timeout`.
pub async fn store_with_timeout(url: &str, timeout: Duration) -> Arc<RedisStore> {
    connect(settings(url, timeout)).await
}

/// A Redis store on `url` that takes the time from the server's (manual) clock, as
/// `--redis-clock caller` does: replicas beside one another on one manual clock (see
/// `TestServer::start_beside`) see the same time in Redis as in their books.
pub async fn caller_clock_store(url: &str) -> Arc<RedisStore> {
    connect(RedisSettings {
        clock: RedisClock::Caller,
        ..settings(url, Duration::from_secs(1))
    })
    .await
}

/// As [`store_with_timeout`], with one run slot (one connection, one script run in flight):
/// calls beyond the first queue behind its run.
pub async fn one_run_slot_store(url: &str, timeout: Duration) -> Arc<RedisStore> {
    connect(RedisSettings {
        connections: 1,
        runs_in_flight: 1,
        ..settings(url, timeout)
    })
    .await
}

/// Redis's own clock, test-friendly health timing and the call timeout `timeout`.
fn settings(url: &str, timeout: Duration) -> RedisSettings {
    RedisSettings {
        clock: RedisClock::Server,
        // Long enough that a loaded test machine does not reach it during a short outage.
        unhealthy_after: Duration::from_secs(3),
        timeout,
        ..RedisSettings::new(url)
    }
}

async fn connect(settings: RedisSettings) -> Arc<RedisStore> {
    Arc::new(RedisStore::connect(settings).await.expect("redis store"))
}

/// A one-hit charge of `tenant=<tenant>` in `domain` against a `fixed_window` of `requests` an
/// hour (no window ends during a test).
pub fn hourly_charge(domain: &str, tenant: &str, requests: u64) -> Charge {
    let limit = Limit {
        algorithm: Algorithm::FixedWindow,
        requests,
        window: 3600 * SECOND,
        burst: requests,
        origin: 0,
        recording: Default::default(),
    };
    common::charge(domain, ("tenant", tenant), limit, 1, Gate::Enforced)
}
