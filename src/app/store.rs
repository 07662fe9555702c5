//! The counter store of a server: built from [`StoreSettings`], its figures published into the
//! metrics, and its flush task, which outlives the listeners so the last flush runs after the
//! in-flight calls have ended.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::AppError;
use super::settings::{MemorySettings, StoreSettings};
use crate::clock::{Clock, Nanos};
use crate::metrics::Metrics;
use crate::store::{MemoryOptions, MemoryStore, PersistentStore, RedisStore, Store};

/// Builds the store `settings` ask for. The embedded store restores its counters first
/// (blocking reads of the data directory, so on a blocking thread); Redis being unreachable
/// does not fail the start (the rules' `failure_mode` answers calls until it does).
pub(super) async fn build(
    settings: &StoreSettings,
    now: Nanos,
) -> Result<Arc<dyn Store>, AppError> {
    match settings {
        StoreSettings::Memory(memory) => build_memory(memory, now).await,
        StoreSettings::Redis(redis) => Ok(Arc::new(RedisStore::connect((**redis).clone()).await?)),
    }
}

async fn build_memory(settings: &MemorySettings, now: Nanos) -> Result<Arc<dyn Store>, AppError> {
    let options = MemoryOptions {
        max_counters: settings.max_counters,
        ..MemoryOptions::default()
    };
    let Some(persist) = settings.persist.clone() else {
        return Ok(Arc::new(MemoryStore::with_options(options)));
    };
    let opened = tokio::task::spawn_blocking(move || PersistentStore::open(persist, options, now))
        .await
        .map_err(AppError::Task)?;
    Ok(Arc::new(opened?))
}

/// Publishes the store's own figures (counters held and refused, persistence, cache, breaker)
/// into `metrics`: the store returns them as plain data and never sees the metrics.
pub(super) fn publish(metrics: &Metrics, store: &dyn Store) {
    metrics.record_store_stats(store.name(), &store.stats());
}

/// The store and its flush task.
pub(super) struct StoreHandle {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    flusher: Option<tokio::task::JoinHandle<()>>,
}

impl StoreHandle {
    /// Starts flushing every [`Store::flush_interval`], if the store needs it.
    pub(super) fn start(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let stop = CancellationToken::new();
        let flusher = store.flush_interval().map(|interval| {
            let (store, clock, metrics, stop) =
                (store.clone(), clock.clone(), metrics.clone(), stop.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(interval);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = every.tick() => {
                            store.flush(clock.now(), false).await;
                            publish(&metrics, store.as_ref());
                        }
                    }
                }
            })
        });
        Self {
            store,
            clock,
            metrics,
            stop,
            flusher,
        }
    }

    /// Stops the flush task and runs the last flush (which also syncs).
    pub(super) async fn close(self) {
        self.stop.cancel();
        if let Some(flusher) = self.flusher {
            let _ = flusher.await;
        }
        self.store.flush(self.clock.now(), true).await;
        publish(&self.metrics, self.store.as_ref());
    }
}
