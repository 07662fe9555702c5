//! The figures a store reports about itself ([`StoreStats`], plain data pulled by the
//! composition root): counters held and refused, persistence totals, the local over-limit
//! cache, leases, the circuit breaker.
//!
//! A store keeps running totals; each publication turns them into counter increments (the
//! delta since the last one), so publishing twice, or from two tasks, never counts twice.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::names::{
    ACTIVE_COUNTERS, CIRCUIT_OPEN, COUNTERS_REFUSED, LEASE_ANSWERED, LEASED_COUNTERS,
    LOCAL_CACHE_ENTRIES, LOCAL_CACHE_HITS, MAX_COUNTERS, PERSIST_BYTES, PERSIST_ERRORS,
    PERSIST_FAILING, PERSIST_FLUSHES, PERSIST_RECORDS, PERSIST_RESTORED, PERSIST_SET_ASIDE,
    PERSIST_SNAPSHOTS,
};
use super::{Families, Metrics};
use crate::store::StoreStats;

/// The families of a store's own figures.
pub(super) struct StoreFigures {
    active_counters: IntGaugeVec,
    max_counters: IntGaugeVec,
    counters_refused: IntCounter,
    /// Flushes, records, bytes, errors, snapshots.
    persist: [IntCounter; 6],
    persist_restored: IntGauge,
    persist_failing: IntGauge,
    local_cache_hits: IntCounterVec,
    local_cache_entries: IntGaugeVec,
    lease_answered: IntCounterVec,
    leased_counters: IntGaugeVec,
    circuit_open: IntGaugeVec,
}

impl StoreFigures {
    /// Registers the families.
    pub(super) fn new(families: &Families<'_>) -> Self {
        let backend = &["backend"];
        Self {
            active_counters: families.gauge_vec(ACTIVE_COUNTERS, "Counters held.", backend),
            max_counters: families.gauge_vec(
                MAX_COUNTERS,
                "The most counters the store may hold (--max-counters).",
                backend,
            ),
            counters_refused: families.counter(
                COUNTERS_REFUSED,
                "Calls refused because the counter store was full (--max-counters).",
            ),
            persist: [
                families.counter(PERSIST_FLUSHES, "Journal flushes."),
                families.counter(PERSIST_RECORDS, "Counter records written to the journal."),
                families.counter(PERSIST_BYTES, "Bytes written to the journal."),
                families.counter(PERSIST_ERRORS, "Failed journal or snapshot writes."),
                families.counter(PERSIST_SNAPSHOTS, "Snapshots written by compaction."),
                families.counter(
                    PERSIST_SET_ASIDE,
                    "Files of the data directory set aside as *.bad.",
                ),
            ],
            persist_restored: families.gauge(PERSIST_RESTORED, "Counters restored at start."),
            persist_failing: families.gauge(
                PERSIST_FAILING,
                "1 while the data directory misses changes because writes fail.",
            ),
            local_cache_hits: families.counter_vec(
                LOCAL_CACHE_HITS,
                "Calls answered from the local over-limit cache.",
                backend,
            ),
            local_cache_entries: families.gauge_vec(
                LOCAL_CACHE_ENTRIES,
                "Counters in the local over-limit cache.",
                backend,
            ),
            lease_answered: families.counter_vec(
                LEASE_ANSWERED,
                "Calls answered from hits leased from the shared store (rules with lease:).",
                backend,
            ),
            leased_counters: families.gauge_vec(
                LEASED_COUNTERS,
                "Counters this process holds a lease on.",
                backend,
            ),
            circuit_open: families.gauge_vec(
                CIRCUIT_OPEN,
                "1 while the store's circuit breaker is open.",
                backend,
            ),
        }
    }
}

impl Metrics {
    /// Publishes the figures of the store named `backend` (`memory`, `redis`); the parts the
    /// store does not have leave their series alone.
    pub fn record_store_stats(&self, backend: &str, stats: &StoreStats) {
        let figures = &self.store;
        let labels = [backend];
        if let Some(counters) = stats.counters {
            figures
                .active_counters
                .with_label_values(&labels)
                .set(gauge(counters));
        }
        if let Some(bound) = stats.max_counters {
            figures
                .max_counters
                .with_label_values(&labels)
                .set(gauge(bound));
        }
        catch_up(&figures.counters_refused, stats.refused);
        if let Some(p) = stats.persist {
            let totals = [
                p.flushes,
                p.records,
                p.bytes,
                p.errors,
                p.snapshots,
                p.set_aside,
            ];
            for (counter, total) in figures.persist.iter().zip(totals) {
                catch_up(counter, total);
            }
            figures.persist_restored.set(gauge(p.restored));
            figures.persist_failing.set(i64::from(p.failing));
        }
        if let Some(cache) = stats.local_cache {
            let entries = figures.local_cache_entries.with_label_values(&labels);
            entries.set(gauge(cache.entries));
            catch_up(
                &figures.local_cache_hits.with_label_values(&labels),
                cache.hits,
            );
        }
        if let Some(leases) = stats.leases {
            let counters = figures.leased_counters.with_label_values(&labels);
            counters.set(gauge(leases.counters));
            catch_up(
                &figures.lease_answered.with_label_values(&labels),
                leases.answered,
            );
        }
        if let Some(open) = stats.circuit_open {
            let gauge = figures.circuit_open.with_label_values(&labels);
            gauge.set(i64::from(open));
        }
    }
}

/// Moves `counter` up to the store's running `total` (the delta since the last publication).
fn catch_up(counter: &IntCounter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LocalCacheStats;

    /// Hits are published as deltas of the store's total, however often it is published;
    /// a store without a cache or breaker adds no series for them.
    #[test]
    fn totals_become_deltas() {
        let metrics = Metrics::new(0.8, 10);
        let mut stats = StoreStats {
            local_cache: Some(LocalCacheStats {
                entries: 2,
                hits: 5,
            }),
            circuit_open: Some(true),
            ..StoreStats::default()
        };
        metrics.record_store_stats("redis", &stats);
        metrics.record_store_stats("redis", &stats);
        stats.local_cache = Some(LocalCacheStats {
            entries: 0,
            hits: 7,
        });
        metrics.record_store_stats("redis", &stats);
        let text = metrics.render();
        assert!(
            text.contains(&format!("{LOCAL_CACHE_HITS}{{backend=\"redis\"}} 7")),
            "{text}"
        );
        assert!(text.contains(&format!("{LOCAL_CACHE_ENTRIES}{{backend=\"redis\"}} 0")));
        assert!(text.contains(&format!("{CIRCUIT_OPEN}{{backend=\"redis\"}} 1")));
        assert!(!text.contains(&format!("{ACTIVE_COUNTERS}{{")), "{text}");
        metrics.record_store_stats(
            "memory",
            &StoreStats {
                counters: Some(3),
                ..StoreStats::default()
            },
        );
        let text = metrics.render();
        assert!(text.contains(&format!("{ACTIVE_COUNTERS}{{backend=\"memory\"}} 3")));
        assert!(
            !text.contains(&format!("{MAX_COUNTERS}{{")),
            "no bound given: {text}"
        );
        assert!(!text.contains(&format!("{CIRCUIT_OPEN}{{backend=\"memory\"}}")));
    }
}
