//! Periodic housekeeping: reclaim idle counters, publish the store's figures and move the
//! operator page's live figures on, and run the quota book's clock, once a second.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::insight::Insight;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::quota::{Portions, QuotaBook, claim_once};
use crate::rules::RuleSet;
use crate::rules::bucket::quota_action;
use crate::store::{PortionStore, Store};

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

/// The quota book's clockwork, once a second until shutdown: expiries, forgotten buckets and
/// the end of the warm-up (`QuotaBook::tick`), and, when the rules in force have changed, the
/// new assignments pushed at once (`QuotaBook::refresh`).
pub(super) async fn quota(
    book: Arc<QuotaBook>,
    rules: Arc<ArcSwap<RuleSet>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    let mut applied = rules.load_full();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                let current = rules.load_full();
                if !Arc::ptr_eq(&current, &applied) {
                    book.refresh(&|domain, bucket| quota_action(&current, domain, bucket));
                    applied = current;
                }
                book.tick();
                metrics.record_rlqs_load(book.streams(), book.buckets());
            }
        }
    }
}

/// On a store replicas share: this replica claims its portions of RLQS limits once a second
/// until shutdown (`quota::claim_once`). A store that cannot be reached leaves the last portions
/// in force until they lapse; its failures are logged when they start and when they end.
pub(super) async fn claim_portions(
    book: Arc<QuotaBook>,
    portions: Arc<Portions>,
    shared: Arc<dyn PortionStore>,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) {
    let replica = replica_name(clock.now());
    tracing::info!(%replica, "sharing quota limits with the other replicas through the store");
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                let now = clock.now();
                match claim_once(&book, &portions, shared.as_ref(), &replica, now).await {
                    Ok(_) if failing => {
                        failing = false;
                        tracing::info!("claiming RLQS portions in the store works again");
                    }
                    Ok(_) => {}
                    Err(error) if !failing => {
                        failing = true;
                        tracing::warn!(%error, "claiming RLQS portions in the store failed; the last portions hold until they lapse");
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

/// A name no other replica has, now or after this one restarts: the host, the process, the
/// start time (a restarted replica's old claims lapse on their own) and, for several servers in
/// one process (tests), their order.
pub(super) fn replica_name(now: crate::clock::Nanos) -> String {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let order = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let host = crate::files::hostname().unwrap_or_else(|| "sluice".to_string());
    format!("{host}-{}-{now:x}-{order}", std::process::id())
}
