//! The figures a store keeps, as plain data: [`Store::stats`](super::Store::stats) returns
//! them and the composition root publishes them, so a store never sees the metrics.
//!
//! Totals only grow; whoever publishes them turns them into deltas. Each part is `None` for a
//! store that has no such thing (Redis holds no counters in the process; memory has no breaker).

/// Everything a store can tell about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Counters held in the process now.
    pub counters: Option<u64>,
    /// The most counters the store may hold (`--max-counters`), for a store with a bound.
    pub max_counters: Option<u64>,
    /// Calls refused so far because they would have created a counter past the store's bound.
    pub refused: u64,
    /// Persistence totals, for a store that persists.
    pub persist: Option<PersistStats>,
    /// The local over-limit cache, for a store that has one.
    pub local_cache: Option<LocalCacheStats>,
    /// Whether the circuit breaker is open (calls skip the store), for a store that has one.
    pub circuit_open: Option<bool>,
    /// Leased hits (rules with `lease:`), for a store that leases.
    pub leases: Option<LeaseStats>,
}

/// Running totals of a persisting store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// Flushes run (one per interval, whether or not anything changed).
    pub flushes: u64,
    /// Counter records written to the journal.
    pub records: u64,
    /// Bytes written to the journal.
    pub bytes: u64,
    /// Failed writes (journal or snapshot).
    pub errors: u64,
    /// Snapshots written.
    pub snapshots: u64,
    /// Counters restored at start.
    pub restored: u64,
    /// Files of the data directory set aside as `*.bad` (a damaged key with its data files,
    /// files that are not this sluice's).
    pub set_aside: u64,
    /// The data directory misses changes (writes failed; a snapshot is being retried).
    pub failing: bool,
}

/// The local over-limit cache of a shared store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalCacheStats {
    /// Over-limit counters remembered now.
    pub entries: u64,
    /// Calls answered from the cache so far, without a round trip.
    pub hits: u64,
}

/// The leases of a shared store (rules with `lease:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Counters this process holds a lease on now.
    pub counters: u64,
    /// Calls answered from leased hits so far, without a round trip.
    pub answered: u64,
}
