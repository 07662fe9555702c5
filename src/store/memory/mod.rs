//! The embedded in-memory store: sharded maps, each shard behind its own short-held mutex.
//!
//! There is no global lock: a call locks only the shards its counters live in, always in
//! ascending shard order so two calls can never deadlock, and holds them only for the pure
//! algorithm arithmetic (no await, no I/O). One authoritative state per counter makes
//! concurrent calls on one key exact.
//!
//! Memory follows the active key count: each counter records when it goes idle, the sweep
//! drops idle counters shard by shard, and `max_counters` bounds the total: past it, a call
//! that would create a counter is refused (OVER_LIMIT) rather than growing without bound.
//!
//! A counter is held as its 128-bit keyed fingerprint (`store/fingerprint.rs`) beside its packed
//! state in an open-addressed table (`table.rs`): 40 bytes a slot, about 50 to 63 bytes a
//! counter all told, whatever the length of its key.

mod apply;
mod packed;
mod shard;
mod spill;
mod table;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use self::shard::Shard;
use super::saved::{CounterView, SavedCounter, SavedKey};
use super::{
    Charge, ChargeOutcome, Cleared, Fingerprint, Fingerprinter, ResetFuture, Store, StoreFuture,
    StoreStats,
};
use crate::clock::{Nanos, SECOND};

/// The default bound on counters held: about 64 MB (a counter costs at most 63 bytes).
pub const DEFAULT_MAX_COUNTERS: usize = 1_000_000;

/// The retry hint of a call refused because the store is full: the sweep runs every second.
pub(crate) const FULL_RETRY: Nanos = SECOND;

/// How a [`MemoryStore`] is built.
#[derive(Debug, Clone, Copy)]
pub struct MemoryOptions {
    /// Lock shards (rounded up to a power of two).
    pub shards: usize,
    /// Most counters held; a call that would create one more is refused.
    pub max_counters: usize,
    /// Track changed counters for a journal ([`MemoryStore::drain_dirty`]).
    pub journal: bool,
    /// The secret key of counter fingerprints; `None` for a fresh random one. A persistent
    /// store keeps its key in the data directory, so a restart finds its counters again.
    pub fingerprint_key: Option<[u8; 16]>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, usize::from);
        Self {
            shards: cores * 16,
            max_counters: DEFAULT_MAX_COUNTERS,
            journal: false,
            fingerprint_key: None,
        }
    }
}

/// The in-memory store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    fingerprinter: Fingerprinter,
    journal: bool,
    max_counters: usize,
    /// Counters held (and reserved by calls in progress), across all shards.
    held: AtomicUsize,
    /// Calls refused because they would have created a counter past `max_counters`.
    refused: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store with enough shards that unrelated keys rarely share a lock.
    pub fn new() -> Self {
        Self::with_options(MemoryOptions::default())
    }

    /// A store with `count` shards (rounded up to a power of two, at least 1).
    pub fn with_shards(count: usize) -> Self {
        Self::with_options(MemoryOptions {
            shards: count,
            ..MemoryOptions::default()
        })
    }

    /// A store built as `options` say.
    pub fn with_options(options: MemoryOptions) -> Self {
        let count = options.shards.max(1).next_power_of_two();
        Self {
            shards: (0..count).map(|_| Mutex::new(Shard::default())).collect(),
            fingerprinter: options
                .fingerprint_key
                .map_or_else(Fingerprinter::random, Fingerprinter::new),
            journal: options.journal,
            max_counters: options.max_counters,
            held: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The number of counters held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Counter slots allocated across all shards: memory follows this, not the all-time count.
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(|s| s.lock().capacity()).sum()
    }

    /// True when no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls refused so far because the store was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Drops every counter idle at `now`, one shard at a time (each lock is held only for its
    /// own shard, so no call waits on the whole sweep). Returns how many were dropped.
    pub fn retain_active(&self, now: Nanos) -> usize {
        let removed: usize = self.shards.iter().map(|s| s.lock().sweep(now)).sum();
        self.held.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    /// Removes the counters of `charges` (an admin reset); returns how many were held. A
    /// counter idle at `now` is dropped too but not counted: it held nothing.
    pub fn remove(&self, charges: &[Charge], now: Nanos) -> u64 {
        let mut removed = 0;
        for charge in charges {
            let fp = self.fingerprinter.of(charge.key.as_bytes());
            let mut shard = self.shards[self.shard_of(fp)].lock();
            let active = shard.is_active(fp, now);
            if shard.remove(fp) {
                self.held.fetch_sub(1, Ordering::Relaxed);
                removed += u64::from(active);
            }
        }
        removed
    }

    /// Hands every counter changed since the previous call to `visit`, shard by shard, and
    /// marks them written (a no-op unless built with `journal`).
    pub fn drain_dirty(&self, visit: &mut dyn FnMut(CounterView<'_>)) {
        for shard in self.shards.iter() {
            shard.lock().drain_dirty(visit);
        }
    }

    /// The number of lock shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Hands every counter of shard `shard` not idle at `now` to `visit`, under that shard's
    /// lock only.
    pub fn visit_shard(&self, shard: usize, now: Nanos, visit: &mut dyn FnMut(CounterView<'_>)) {
        if let Some(shard) = self.shards.get(shard) {
            shard.lock().visit_active(now, visit);
        }
    }

    /// The secret key of this store's counter fingerprints (persistence keeps it).
    pub fn fingerprint_key(&self) -> [u8; 16] {
        self.fingerprinter.key()
    }

    /// The fingerprint under which this store holds the counter with `key` bytes.
    pub fn fingerprint(&self, key: &[u8]) -> Fingerprint {
        self.fingerprinter.of(key)
    }

    /// Takes in a counter read from disk, combined with any state already held for it.
    /// Counters idle at `now` are skipped, and so are new ones once the store is full.
    /// Returns whether the counter is held afterwards.
    pub fn restore(&self, saved: SavedCounter, now: Nanos) -> bool {
        if saved.idle_at <= now {
            return false;
        }
        let fp = match &saved.key {
            SavedKey::Fingerprint(fp) => *fp,
            // A record of an earlier version, which wrote the key itself.
            SavedKey::Bytes(key) => self.fingerprinter.of(key.as_bytes()),
        };
        let mut shard = self.shards[self.shard_of(fp)].lock();
        let known = shard.get(fp, packed::algorithm_of(&saved.state)).is_some();
        if !known && !self.reserve() {
            return false;
        }
        shard.restore(fp, saved);
        true
    }

    fn shard_of(&self, fp: Fingerprint) -> usize {
        (fp.shard_bits() as usize) & (self.shards.len() - 1)
    }

    /// Reserves room for one more counter; false when the store is full.
    fn reserve(&self) -> bool {
        if self.held.fetch_add(1, Ordering::Relaxed) < self.max_counters {
            return true;
        }
        self.held.fetch_sub(1, Ordering::Relaxed);
        false
    }
}

impl Store for MemoryStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        let verdicts = self.apply_now(charges, now);
        Box::pin(std::future::ready(Ok(verdicts)))
    }

    fn apply_one_now(&self, charge: &Charge, now: Nanos) -> Option<ChargeOutcome> {
        Some(self.apply_one(charge, now))
    }

    fn reset<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> ResetFuture<'a> {
        let counters = self.remove(charges, now);
        Box::pin(std::future::ready(Ok(Cleared {
            counters,
            leased_hits: 0,
        })))
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn sweep(&self, now: Nanos) {
        self.retain_active(now);
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            counters: Some(self.len() as u64),
            max_counters: Some(self.max_counters as u64),
            refused: self.refused(),
            ..StoreStats::default()
        }
    }
}

#[cfg(test)]
mod tests;
