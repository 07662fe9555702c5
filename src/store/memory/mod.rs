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

mod packed;
mod shard;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use self::shard::{Hasher, Shard};
use super::saved::{CounterView, SavedCounter};
use super::{Charge, CounterKey, Outcome, Store, StoreFuture, StoreStats, gate};
use crate::algorithm::{self, State, Verdict};
use crate::clock::{Nanos, SECOND};

/// The default bound on counters held: about 160 MB with typical 50-byte keys.
pub const DEFAULT_MAX_COUNTERS: usize = 1_000_000;

/// The retry hint of a call refused because the store is full: the sweep runs every second.
pub const FULL_RETRY: Nanos = SECOND;

/// How a [`MemoryStore`] is built.
#[derive(Debug, Clone, Copy)]
pub struct MemoryOptions {
    /// Lock shards (rounded up to a power of two).
    pub shards: usize,
    /// Most counters held; a call that would create one more is refused.
    pub max_counters: usize,
    /// Track changed counters for a journal ([`MemoryStore::drain_dirty`]).
    pub journal: bool,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, usize::from);
        Self {
            shards: cores * 16,
            max_counters: DEFAULT_MAX_COUNTERS,
            journal: false,
        }
    }
}

/// The in-memory store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: Hasher,
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
            hasher: Hasher::default(),
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

    /// Takes in a counter read from disk, combined with any state already held for it.
    /// Counters idle at `now` are skipped, and so are new ones once the store is full.
    /// Returns whether the counter is held afterwards.
    pub fn restore(&self, saved: SavedCounter, now: Nanos) -> bool {
        if saved.idle_at <= now {
            return false;
        }
        let mut shard = self.shards[self.shard_of(&saved.key)].lock();
        let known = shard
            .get(&saved.key, packed::algorithm_of(&saved.state))
            .is_some();
        if !known && !self.reserve() {
            return false;
        }
        shard.restore(saved);
        true
    }

    fn shard_of(&self, key: &CounterKey) -> usize {
        (self.hasher.hash_one(key) as usize) & (self.shards.len() - 1)
    }

    /// Reserves room for one more counter; false when the store is full.
    fn reserve(&self) -> bool {
        if self.held.fetch_add(1, Ordering::Relaxed) < self.max_counters {
            return true;
        }
        self.held.fetch_sub(1, Ordering::Relaxed);
        false
    }

    /// The synchronous core of [`Store::apply`].
    pub fn apply_now(&self, charges: &[Charge], now: Nanos) -> Vec<Outcome> {
        if let [charge] = charges {
            return vec![self.apply_one(charge, now)];
        }
        let shard_ids: Vec<usize> = charges.iter().map(|c| self.shard_of(&c.key)).collect();
        let mut order: Vec<usize> = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        // Lock in ascending order: every call does, so no two calls wait on each other in a cycle.
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, self.shards[i].lock())).collect();

        // Pending states, so a call naming one counter twice sees its own earlier charge.
        let mut pending: Vec<(usize, State)> = Vec::new();
        let mut outcomes = Vec::with_capacity(charges.len());
        let mut reserved = 0;
        for (i, charge) in charges.iter().enumerate() {
            let earlier = pending
                .iter()
                .rev()
                .find(|(j, _)| charges[*j].key == charge.key)
                .map(|(_, s)| s);
            let held = match earlier {
                Some(_) => None,
                None => guard_for(&guards, shard_ids[i]).get(&charge.key, charge.limit.algorithm),
            };
            let stored = earlier.or(held.as_deref());
            let (verdict, next) = algorithm::decide(&charge.limit, stored, now, charge.cost);
            let (outcome, next) = match next {
                // A new counter: only if there is room for it.
                Some(_) if stored.is_none() && !self.reserve() => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    (full(), None)
                }
                Some(next) => {
                    reserved += usize::from(stored.is_none());
                    (Outcome::judged(charge, stored, now, verdict), Some(next))
                }
                None => (Outcome::judged(charge, stored, now, verdict), None),
            };
            outcomes.push(outcome);
            drop(held);
            if let Some(next) = next {
                pending.push((i, next));
            }
        }

        let blocked = gate::blocked(
            charges
                .iter()
                .zip(&outcomes)
                .map(|(c, o)| (c.gate, o.verdict.admitted)),
        );
        if blocked {
            self.held.fetch_sub(reserved, Ordering::Relaxed);
            return outcomes;
        }
        for (i, state) in pending {
            let charge = &charges[i];
            let idle_at = algorithm::idle_at(&charge.limit, &state);
            guard_for_mut(&mut guards, shard_ids[i]).put(&charge.key, state, idle_at, self.journal);
        }
        outcomes
    }
}

impl MemoryStore {
    /// [`MemoryStore::apply_now`] for a call with one counter (the common case): one lock,
    /// no bookkeeping of pending states. A lone charge blocks its call exactly when denied.
    fn apply_one(&self, charge: &Charge, now: Nanos) -> Outcome {
        let mut shard = self.shards[self.shard_of(&charge.key)].lock();
        let held = shard.get(&charge.key, charge.limit.algorithm);
        let stored = held.as_deref();
        let (verdict, next) = algorithm::decide(&charge.limit, stored, now, charge.cost);
        let Some(next) = next else {
            return Outcome::judged(charge, stored, now, verdict);
        };
        if stored.is_none() && !self.reserve() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return full();
        }
        let outcome = Outcome::judged(charge, stored, now, verdict);
        drop(held);
        let idle_at = algorithm::idle_at(&charge.limit, &next);
        shard.put(&charge.key, next, idle_at, self.journal);
        outcome
    }
}

/// The outcome of a charge refused because the store is full.
fn full() -> Outcome {
    Outcome {
        verdict: Verdict {
            admitted: false,
            remaining: 0,
            reset_after: FULL_RETRY,
        },
        available: 0,
    }
}

fn guard_for<'g>(guards: &'g [(usize, MutexGuard<'_, Shard>)], shard: usize) -> &'g Shard {
    let at = guards
        .binary_search_by_key(&shard, |(i, _)| *i)
        .unwrap_or_default();
    &guards[at].1
}

fn guard_for_mut<'g, 'm>(
    guards: &'g mut [(usize, MutexGuard<'m, Shard>)],
    shard: usize,
) -> &'g mut Shard {
    let at = guards
        .binary_search_by_key(&shard, |(i, _)| *i)
        .unwrap_or_default();
    &mut guards[at].1
}

impl Store for MemoryStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        let verdicts = self.apply_now(charges, now);
        Box::pin(std::future::ready(Ok(verdicts)))
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
            refused: self.refused(),
            ..StoreStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Gate;

    use crate::store::testing::fixed_charge as charge;

    /// A blocked call commits none of its counters, even those that fit.
    #[test]
    fn blocked_call_commits_nothing() {
        let store = MemoryStore::with_shards(4);
        let call = [
            charge("a", 5, 1, Gate::Enforced),
            charge("b", 0, 1, Gate::Enforced),
        ];
        let verdicts = store.apply_now(&call, 0);
        assert!(verdicts[0].verdict.admitted && !verdicts[1].verdict.admitted);
        assert!(store.is_empty());
        let verdicts = store.apply_now(&call[..1], 0);
        assert_eq!(verdicts[0].verdict.remaining, 4);
    }

    /// A call naming one counter twice sees its own first charge.
    #[test]
    fn same_counter_twice_in_one_call() {
        let store = MemoryStore::with_shards(1);
        let call = [
            charge("a", 3, 2, Gate::Enforced),
            charge("a", 3, 2, Gate::Enforced),
        ];
        let verdicts = store.apply_now(&call, 0);
        assert!(verdicts[0].verdict.admitted && !verdicts[1].verdict.admitted);
        assert!(store.is_empty(), "the call was blocked: nothing committed");
    }

    /// Advisory denials do not block: the other counters are charged.
    #[test]
    fn advisory_denial_does_not_block() {
        let store = MemoryStore::with_shards(8);
        let call = [
            charge("a", 5, 1, Gate::Enforced),
            charge("b", 0, 1, Gate::Advisory),
        ];
        store.apply_now(&call, 0);
        assert_eq!(store.len(), 1);
    }

    /// Idle counters are reclaimed once their window has passed.
    #[test]
    fn idle_counters_are_reclaimed() {
        let store = MemoryStore::with_shards(2);
        store.apply_now(&[charge("a", 5, 1, Gate::Enforced)], 0);
        assert_eq!(store.retain_active(59 * SECOND), 0);
        assert_eq!(store.retain_active(60 * SECOND), 1);
        assert!(store.is_empty());
    }

    /// Threads hammering one hot key admit exactly the limit, while calls on distinct keys
    /// keep getting exact answers.
    #[test]
    fn hot_key_is_exact_and_other_keys_unaffected() {
        let store = std::sync::Arc::new(MemoryStore::new());
        let hot = std::thread::scope(|scope| {
            let hammers: Vec<_> = (0..2)
                .map(|_| {
                    let store = store.clone();
                    scope.spawn(move || {
                        (0..5_000)
                            .filter(|_| {
                                store.apply_now(&[charge("hot", 1_000, 1, Gate::Enforced)], 0)[0]
                                    .verdict
                                    .admitted
                            })
                            .count()
                    })
                })
                .collect();
            for i in 0..2_000 {
                let verdicts =
                    store.apply_now(&[charge(&format!("cold-{i}"), 1, 1, Gate::Enforced)], 0);
                assert!(
                    verdicts[0].verdict.admitted,
                    "a fresh key is always admitted"
                );
                assert_eq!(verdicts[0].verdict.remaining, 0);
            }
            hammers
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum::<usize>()
        });
        assert_eq!(hot, 1_000);
    }

    /// A full store refuses calls that would create a counter (OVER_LIMIT, 1 s hint), keeps
    /// serving the counters it holds, and takes new ones again once idle ones are swept.
    #[test]
    fn full_store_refuses_new_counters() {
        let store = MemoryStore::with_options(MemoryOptions {
            shards: 4,
            max_counters: 3,
            journal: false,
        });
        for name in ["a", "b", "c"] {
            assert!(
                store.apply_now(&[charge(name, 5, 1, Gate::Enforced)], 0)[0]
                    .verdict
                    .admitted
            );
        }
        let refused = store.apply_now(&[charge("d", 5, 1, Gate::Enforced)], 0)[0];
        assert!(!refused.verdict.admitted);
        assert_eq!(refused.verdict.reset_after, FULL_RETRY);
        assert_eq!(store.refused(), 1);
        assert!(
            store.apply_now(&[charge("a", 5, 1, Gate::Enforced)], 0)[0]
                .verdict
                .admitted
        );
        // A check (cost 0) creates nothing, so it is judged as usual.
        assert!(
            store.apply_now(&[charge("e", 5, 0, Gate::Enforced)], 0)[0]
                .verdict
                .admitted
        );
        assert_eq!(store.len(), 3);
        store.retain_active(60 * SECOND);
        assert!(
            store.apply_now(&[charge("d", 5, 1, Gate::Enforced)], 60 * SECOND)[0]
                .verdict
                .admitted
        );
    }

    /// A call refused as a whole gives back the room it reserved for its new counters.
    #[test]
    fn blocked_call_releases_reserved_room() {
        let store = MemoryStore::with_options(MemoryOptions {
            shards: 4,
            max_counters: 1,
            journal: false,
        });
        for _ in 0..3 {
            let call = [
                charge("a", 5, 1, Gate::Enforced),
                charge("b", 0, 1, Gate::Enforced),
            ];
            store.apply_now(&call, 0);
        }
        assert!(store.is_empty());
        assert!(
            store.apply_now(&[charge("c", 5, 1, Gate::Enforced)], 0)[0]
                .verdict
                .admitted
        );
    }

    /// With a journal, each changed counter is handed over once per drain, at its latest state.
    #[test]
    fn drain_hands_each_changed_counter_once() {
        let store = MemoryStore::with_options(MemoryOptions {
            shards: 2,
            journal: true,
            ..MemoryOptions::default()
        });
        for _ in 0..3 {
            store.apply_now(&[charge("a", 5, 1, Gate::Enforced)], 0);
        }
        store.apply_now(&[charge("b", 5, 2, Gate::Enforced)], 0);
        let drain = || {
            let mut seen = Vec::new();
            store.drain_dirty(&mut |v| seen.push((v.key.clone(), v.state.clone(), v.idle_at)));
            seen.sort_by(|a, b| a.0.cmp(&b.0));
            seen
        };
        let seen = drain();
        assert_eq!(seen.len(), 2);
        let counts: Vec<_> = seen
            .iter()
            .map(|(_, s, idle)| match s {
                State::Fixed { count, .. } => (*count, *idle),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(counts.contains(&(3, 60 * SECOND)) && counts.contains(&(2, 60 * SECOND)));
        assert!(drain().is_empty(), "nothing changed since");
    }

    /// The sweep gives memory back: once ten thousand counters go idle, the table shrinks.
    #[test]
    fn sweep_shrinks_tables() {
        let store = MemoryStore::with_options(MemoryOptions {
            shards: 1,
            max_counters: usize::MAX,
            journal: false,
        });
        for i in 0..10_000 {
            store.apply_now(&[charge(&i.to_string(), 5, 1, Gate::Enforced)], 0);
        }
        let big = store.capacity();
        assert_eq!(store.retain_active(60 * SECOND), 10_000);
        assert!(store.is_empty());
        assert!(store.capacity() < big / 8, "tables shrank");
    }
}
