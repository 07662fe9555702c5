//! The Redis store: one authority for many replicas. Each call is applied by one run of a Lua
//! script (per Redis Cluster slot group) that checks and commits all of its counters
//! atomically on Redis's clock; concurrent calls share runs when Redis is busy (`batch.rs`).
//!
//! A call enters here once and goes down: `call.rs` (held leases, the local over-limit cache,
//! the circuit breaker) → `route.rs` (keys, slot groups) → `batch.rs` (shared runs) →
//! `eval.rs` (one script run, `script.rs` its encoding) → `conn/` (the pool). Everything about
//! reaching Redis and keeping its connections healthy (the breaker, its background probe,
//! Sentinel's failovers) lives in `conn/`. Replicas claim their portions of RLQS limits
//! (`portion.rs`) with a script of their own, through `eval.rs` on the same pool.

mod batch;
mod cache;
mod call;
mod compat_keys;
mod conn;
mod eval;
mod key_shards;
mod keys;
mod lease;
mod portion;
mod region;
mod route;
mod script;
mod settings;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use self::batch::Runs;
use self::call::Calls;
use self::conn::{Pool, PoolHealth, Target};
use self::keys::KeyLayout;
use self::portion::RedisPortions;
use self::route::Route;
use super::{BackgroundTask, Charge, ResetFuture, Store, StoreError, StoreFuture, StoreStats};
use crate::clock::Nanos;

pub use self::cache::local_cache_entries;
pub use self::script::SOURCE as SCRIPT;
pub(crate) use self::settings::describe_url;
pub(crate) use self::settings::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONNECTIONS, DEFAULT_EXPIRATION_JITTER, DEFAULT_KEY_PREFIX,
    DEFAULT_LOCAL_CACHE_SIZE, DEFAULT_RUNS_IN_FLIGHT, DEFAULT_TIMEOUT,
};
pub use self::settings::{RedisClock, RedisKeyLayout, RedisSettings};

#[cfg(feature = "fuzzing")]
/// Checks a Redis URL as `--redis-url` is checked (nothing is connected). For the fuzz targets.
pub(crate) fn check_url(url: &str) -> Result<(), StoreError> {
    Target::build(&RedisSettings::new(url)).map(drop)
}

/// The Redis store.
pub struct RedisStore {
    calls: Calls,
    /// The pool and its breaker, shared with the background work that keeps them healthy.
    health: Arc<PoolHealth>,
    /// Where replicas split RLQS limits, on the same connections.
    portions: Arc<RedisPortions>,
}

impl RedisStore {
    /// A store for `settings` (the URL and prefix are checked; nothing is connected yet).
    pub fn new(settings: RedisSettings) -> Result<Self, StoreError> {
        let target = Target::build(&settings)?;
        let layout = KeyLayout::new(
            &settings.key_prefix,
            settings.key_layout,
            settings.expiration_jitter,
        )?;
        let cluster = target.is_cluster();
        let pool = Pool::new(
            target,
            settings.connections,
            SCRIPT,
            settings.connect_timeout,
        );
        let sha = redis::Script::new(SCRIPT).get_hash().to_owned();
        // A few runs in flight (`--redis-runs-in-flight` per connection): light load goes
        // straight through, heavier load queues and shares runs, paying the script's fixed
        // cost and a round trip once per batch.
        let runs = Runs {
            pool: pool.clone(),
            sha: sha.into(),
            max_in_flight: settings.connections.max(1) * settings.runs_in_flight.max(1),
            timeout: settings.timeout,
        };
        let route = Route::new(layout, runs, cluster, settings.clock);
        let described = describe_url(&settings.url);
        let health = Arc::new(PoolHealth::new(pool, settings.unhealthy_after, described));
        let calls = Calls::new(
            route,
            health.clone(),
            settings.clock,
            settings.timeout,
            settings.local_cache_size,
        );
        // A claim is off the request path (a replica claims its portions once a second), so it
        // may wait as long as a connect rather than a call's few milliseconds.
        let portions = Arc::new(RedisPortions::new(
            health.clone(),
            &settings.key_prefix,
            settings.clock,
            cluster,
            settings.timeout.max(settings.connect_timeout),
        ));
        Ok(Self {
            calls,
            health,
            portions,
        })
    }

    /// As [`RedisStore::new`], then connects (waiting up to the connect timeout). An
    /// unreachable Redis is not fatal: calls are answered by each rule's `failure_mode` until
    /// it answers.
    pub async fn connect(settings: RedisSettings) -> Result<Self, StoreError> {
        let store = Self::new(settings)?;
        store.health.connect().await;
        Ok(store)
    }

    /// Whether the circuit breaker is open (calls skip Redis).
    pub fn circuit_open(&self) -> bool {
        self.health.is_open()
    }
}

impl Store for RedisStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        self.calls.apply(charges, now)
    }

    fn reset<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> ResetFuture<'a> {
        Box::pin(self.calls.reset(charges, now))
    }

    fn leased(&self, charge: &Charge, now: Nanos) -> Option<u64> {
        self.calls.leased(charge, now)
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn healthy(&self) -> bool {
        !self.health.unhealthy()
    }

    fn background(&self, shutdown: CancellationToken) -> Option<BackgroundTask> {
        Some(Box::pin(conn::keep_healthy(self.health.clone(), shutdown)))
    }

    fn sweep(&self, now: Nanos) {
        self.calls.sweep(now);
    }

    fn portion_store(&self) -> Option<Arc<dyn crate::store::PortionStore>> {
        Some(self.portions.clone())
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            local_cache: Some(self.calls.local_cache_stats()),
            circuit_open: Some(self.health.is_open()),
            leases: Some(self.calls.lease_stats()),
            ..StoreStats::default()
        }
    }
}
