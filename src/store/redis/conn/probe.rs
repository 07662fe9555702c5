//! The store's background work: while the breaker is open, probe Redis and close the breaker
//! once every pooled connection is fresh or answers; while it is closed, keep the pool full.
//!
//! When the breaker opens every pooled connection is dropped (it may be stalled behind TCP
//! retransmissions after a partition, or broken). Each probe opens its own new connections,
//! and a new probe starts every [`PROBE_INTERVAL`] even while an earlier one still waits on a
//! connect (a SYN lost during the partition): so after a partition heals, or Redis comes
//! back, decisions resume within about a probe interval, on connections that just answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::Value;
use tokio_util::sync::CancellationToken;

use super::health::PoolHealth;
use super::pool::{Pool, Pooled};

/// How often an open breaker probes Redis.
const PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// Probes in flight at most (each may wait up to a connect timeout).
const MAX_PROBES: usize = 4;

/// Runs until `shutdown`: probes while `health`'s breaker is open, fills the pool while it
/// is closed.
pub async fn run(health: Arc<PoolHealth>, shutdown: CancellationToken) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut every = tokio::time::interval(PROBE_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        if !health.is_open() {
            health.pool().fill();
            continue;
        }
        if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_PROBES {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let (health, in_flight, shutdown) = (health.clone(), in_flight.clone(), shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                answered = refresh_all(health.pool()) => if answered {
                    health.probe_succeeded();
                }
            }
            in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Makes every pooled connection one that answered a PING just now: a connection that does
/// not answer is dropped and a new one opened (by this probe, not shared with another's
/// connect). True when all of them answered.
async fn refresh_all(pool: &Pool) -> bool {
    for slot in 0..pool.size() {
        if let Some(conn) = pool.slot(slot)
            && ping(pool, slot, conn).await
        {
            continue;
        }
        let Ok(fresh) = pool.open().await else {
            return false;
        };
        let fresh = Arc::new(fresh);
        if !ping(pool, slot, fresh.clone()).await {
            return false;
        }
        pool.install(slot, fresh);
    }
    true
}

/// Whether `pooled` answers a PING within the connect timeout; if not, it is dropped from
/// `slot` (unless the slot already holds another).
async fn ping(pool: &Pool, slot: usize, pooled: Arc<Pooled>) -> bool {
    let ping = redis::cmd("PING");
    let mut conn = pooled.conn.clone();
    let answered = matches!(
        tokio::time::timeout(pool.connect_timeout(), conn.query(&ping)).await,
        Ok(Ok(Value::SimpleString(_)
            | Value::Okay
            | Value::BulkString(_)))
    );
    if !answered {
        pool.discard_if(slot, &pooled);
    }
    answered
}
