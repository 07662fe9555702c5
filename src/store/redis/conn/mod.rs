//! Reaching Redis and keeping its connections healthy: where to connect (`url`, `node`,
//! `target`, `sentinel`), the pool of connections, and the circuit breaker with the
//! background work that heals them (the probe, following Sentinel's failovers).

mod breaker;
mod failover;
mod health;
mod node;
mod pool;
mod probe;
mod sentinel;
mod target;
mod url;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use self::health::PoolHealth;
pub use self::pool::{Generation, Pool, is_lost};
pub use self::target::{Attempt, RedisConn, Target};

/// Keeps `health`'s connections healthy until `shutdown`: probes Redis while the breaker is
/// open (fills the pool while it is closed), and follows Sentinel's failovers.
pub async fn keep_healthy(health: Arc<PoolHealth>, shutdown: CancellationToken) {
    let follow = failover::follow(health.pool().clone(), shutdown.clone());
    futures_util::future::join(probe::run(health, shutdown), follow).await;
}
