//! The embedded in-memory store: sharded maps, each shard behind its own short-held mutex.
//!
//! There is no global lock: a call locks only the shards its counters live in, always in
//! ascending shard order so two calls can never deadlock, and holds them only for the pure
//! algorithm arithmetic (no await, no I/O). One authoritative state per counter makes
//! concurrent calls on one key exact.

use std::collections::HashMap;
use std::hash::BuildHasher;

use parking_lot::{Mutex, MutexGuard};

use super::{Charge, CounterKey, Outcome, Store, StoreFuture, gate};
use crate::algorithm::{self, Limit, State};
use crate::clock::Nanos;

type Hasher = foldhash::fast::RandomState;

/// One stored counter: its state and the limit it was last charged under (for reclaiming).
#[derive(Debug, Clone)]
struct Counter {
    limit: Limit,
    state: State,
}

type Shard = HashMap<CounterKey, Counter, Hasher>;

/// The in-memory store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: Hasher,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store with enough shards that unrelated keys rarely share a lock.
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, usize::from);
        Self::with_shards((cores * 16).next_power_of_two())
    }

    /// A store with `count` shards (rounded up to a power of two, at least 1).
    pub fn with_shards(count: usize) -> Self {
        let count = count.max(1).next_power_of_two();
        let shards = (0..count).map(|_| Mutex::new(Shard::default())).collect();
        Self {
            shards,
            hasher: Hasher::default(),
        }
    }

    /// The number of counters held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True when no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every counter whose state is equivalent to "never seen" at `now`.
    pub fn retain_active(&self, now: Nanos) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(|_, c| !algorithm::is_idle(&c.limit, &c.state, now));
            removed += before - shard.len();
        }
        removed
    }

    fn shard_of(&self, key: &CounterKey) -> usize {
        (self.hasher.hash_one(key) as usize) & (self.shards.len() - 1)
    }

    /// The synchronous core of [`Store::apply`].
    pub fn apply_now(&self, charges: &[Charge], now: Nanos) -> Vec<Outcome> {
        let shard_ids: Vec<usize> = charges.iter().map(|c| self.shard_of(&c.key)).collect();
        let mut order: Vec<usize> = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        // Lock in ascending order: every call does, so no two calls wait on each other in a cycle.
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, self.shards[i].lock())).collect();

        // Pending states, so a call naming one counter twice sees its own earlier charge.
        let mut pending: Vec<(usize, State)> = Vec::new();
        let mut verdicts = Vec::with_capacity(charges.len());
        for (i, charge) in charges.iter().enumerate() {
            let earlier = pending
                .iter()
                .rev()
                .find(|(j, _)| charges[*j].key == charge.key)
                .map(|(_, s)| s);
            let stored = match earlier {
                Some(state) => Some(state),
                None => guard_for(&guards, shard_ids[i])
                    .get(&charge.key)
                    .map(|c| &c.state),
            };
            let (verdict, next) = algorithm::decide(&charge.limit, stored, now, charge.cost);
            verdicts.push(Outcome::judged(charge, stored, now, verdict));
            if let Some(next) = next {
                pending.push((i, next));
            }
        }

        let blocked = gate::blocked(
            charges
                .iter()
                .zip(&verdicts)
                .map(|(c, o)| (c.gate, o.verdict.admitted)),
        );
        if !blocked {
            for (i, state) in pending {
                let charge = &charges[i];
                let shard = guard_for_mut(&mut guards, shard_ids[i]);
                let counter = Counter {
                    limit: charge.limit,
                    state,
                };
                // Overwrite a known counter in place: insert() would clone the key only to drop it.
                match shard.get_mut(&charge.key) {
                    Some(slot) => *slot = counter,
                    None => {
                        shard.insert(charge.key.clone(), counter);
                    }
                }
            }
        }
        verdicts
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

    fn sweep(&self, now: Nanos) -> Option<usize> {
        self.retain_active(now);
        Some(self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::clock::SECOND;
    use crate::store::{CounterKeyBuilder, Gate};

    fn charge(name: &str, requests: u64, cost: u64, gate: Gate) -> Charge {
        let limit = Limit {
            algorithm: Algorithm::FixedWindow,
            requests,
            window: 60 * SECOND,
            burst: requests,
        };
        let mut key = CounterKeyBuilder::new("d");
        key.entry("k", name);
        Charge {
            key: key.finish(0, limit.algorithm, limit.window),
            limit,
            cost,
            gate,
        }
    }

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
}
