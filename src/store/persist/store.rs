//! The persistent store as a [`Store`]: counting in memory, resets and flushes made durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::PersistentStore;
use super::compact;
use crate::clock::Nanos;
use crate::store::{
    Charge, ChargeOutcome, Cleared, FlushFuture, PersistStats, ResetFuture, Store, StoreError,
    StoreFuture, StoreStats,
};

impl PersistentStore {
    /// Removes the counters of `charges` and, when any was held, brings the data directory up
    /// to date before returning (blocking): a snapshot without them, every older file deleted,
    /// so a restart does not bring them back. A snapshot that fails leaves the reset done in
    /// memory and retried on disk at the next flush.
    pub fn reset_now(&self, charges: &[Charge], now: Nanos) -> Result<u64, StoreError> {
        let removed = self.shared.memory.remove(charges, now);
        if removed == 0 {
            return Ok(0);
        }
        compact::run_exclusively(&self.shared, now).map_err(|e| {
            self.shared.compact_soon.store(true, Ordering::Relaxed);
            StoreError::ResetNotPersisted(e.to_string())
        })?;
        Ok(removed)
    }

    /// Running totals for metrics.
    pub fn persist_stats(&self) -> PersistStats {
        let t = &self.shared.totals;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        PersistStats {
            flushes: get(&t.flushes),
            records: get(&t.records),
            bytes: get(&t.bytes),
            errors: get(&t.errors),
            snapshots: get(&t.snapshots),
            restored: get(&t.restored),
            set_aside: get(&t.set_aside),
            failing: self.shared.failure.behind(),
        }
    }
}

impl Store for PersistentStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        self.shared.memory.apply(charges, now)
    }

    fn apply_one_now(&self, charge: &Charge, now: Nanos) -> Option<ChargeOutcome> {
        self.shared.memory.apply_one_now(charge, now)
    }

    fn reset<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> ResetFuture<'a> {
        let store = self.clone();
        let charges = charges.to_vec();
        Box::pin(async move {
            let counters = tokio::task::spawn_blocking(move || store.reset_now(&charges, now))
                .await
                .map_err(|e| StoreError::ResetNotPersisted(e.to_string()))??;
            Ok(Cleared {
                counters,
                leased_hits: 0,
            })
        })
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn sweep(&self, now: Nanos) {
        self.shared.memory.sweep(now);
    }

    fn flush_interval(&self) -> Option<Duration> {
        Some(self.shared.settings.interval)
    }

    fn flush(&self, now: Nanos, last: bool) -> FlushFuture<'_> {
        let store = self.clone();
        Box::pin(async move {
            let flushed = tokio::task::spawn_blocking(move || {
                if last {
                    store.close(now);
                } else {
                    store.flush_now(now, false);
                }
            })
            .await;
            if let Err(e) = flushed {
                tracing::error!(error = %e, "journal flush task failed");
            }
        })
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            persist: Some(self.persist_stats()),
            ..self.shared.memory.stats()
        }
    }
}
