//! Periodic housekeeping: reclaim idle counters, publish the store's and the RLQS wing's figures
//! and move the operator page's live figures on, once a second.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::insight::Insight;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::rlqs::Rlqs;
use crate::store::Store;

/// How often idle counters are reclaimed and the store's figures refreshed.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Reclaims idle counters and publishes how many are held (and the store's own figures),
/// until shutdown. The sweep walks shard by shard on a blocking thread: no runtime worker
/// stalls on a large store.
pub(super) async fn sweep(
    store: Arc<dyn Store>,
    limiter: Arc<Limiter>,
    insight: Arc<Insight>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                let (swept, now) = (store.clone(), clock.now());
                let _ = tokio::task::spawn_blocking(move || swept.sweep(now)).await;
                super::store::publish(&metrics, store.as_ref());
                limiter.sweep_fallback(now);
                insight.tick();
            }
        }
    }
}

/// Publishes the RLQS wing's load once a second until shutdown (the streams publish it too as
/// they open, report and end; this catches what the book's own clock changes).
pub(super) async fn publish_rlqs(rlqs: Rlqs, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                let load = rlqs.load();
                metrics.record_rlqs_load(load.streams, load.unbound, load.buckets);
            }
        }
    }
}
