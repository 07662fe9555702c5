//! The local over-limit cache: a counter Redis denied with "retry after T" is answered from
//! memory until T, without a round trip.
//!
//! Only denials of one hit (or a check) where not even one hit fits (`available == 0`) are
//! cached, keyed by counter and limit, so a cached answer is the answer Redis would give: other
//! replicas can only add hits, which moves T later, never earlier. (A call of several hits is
//! denied until all of them fit, while one hit may fit sooner: its "nothing fits" would go
//! stale before T.) T is measured from when the call was sent
//! (before Redis answered), so an entry never outlives Redis's own denial. A limit changed by a
//! reload is a different entry. The cache is bounded: when a shard is full, expired entries
//! are dropped, and if it is still full the new denial is simply not cached.

use super::key_shards::KeyShards;

use crate::algorithm::{Algorithm, Limit, Recording, Verdict};
use crate::clock::Nanos;
use crate::store::{Charge, ChargeOutcome};

/// What one entry may take in memory, for sizing the cache in bytes (envoyproxy/ratelimit's
/// `LOCAL_CACHE_SIZE_IN_BYTES`): the key's handle and the entry (64 bytes, checked below) and
/// a control byte, doubled because a hash table may be half empty just after it grows, plus
/// the key's own bytes on the heap (a domain and one or two descriptor entries: about 48):
/// 178, rounded up.
const ENTRY_BYTES: usize = 192;

/// Local-cache entries that fit in `bytes` (envoyproxy/ratelimit's `LOCAL_CACHE_SIZE_IN_BYTES`;
/// 0 stays 0, which disables the cache).
pub fn local_cache_entries(bytes: u64) -> usize {
    usize::try_from(bytes / ENTRY_BYTES as u64).unwrap_or(usize::MAX)
}

/// A cached denial, of one hit (or a check: only those are cached, so the cost needs no field).
#[derive(Debug, Clone, Copy)]
struct CachedDenial {
    limit: Limit,
    /// Until when the denial holds (cache clock).
    until: Nanos,
}

/// Whether `charge` carries hits its limit records even when denied: such a denial says when
/// that charge fits, not when a check does, the next such charge must reach Redis, and a denial
/// held for its counter no longer says when the counter admits again. Not so a fixed window
/// counted as envoyproxy/ratelimit counts (the `ratelimit` personality): past its limit it
/// refuses until its window ends whatever more it holds, and envoyproxy/ratelimit's own local
/// cache answers such calls without counting them either.
fn recorded(charge: &Charge) -> bool {
    charge.cost > 0
        && match charge.limit.recording {
            Recording::AdmittedOnly => false,
            Recording::AlwaysCompat => charge.limit.algorithm != Algorithm::FixedWindow,
            Recording::Always => true,
        }
}

/// The cache.
#[derive(Debug)]
pub struct OverLimitCache {
    shards: KeyShards<CachedDenial>,
}

impl OverLimitCache {
    /// A cache of at most about `capacity` entries (0 disables it).
    pub fn new(capacity: usize) -> Self {
        let count = 16;
        Self {
            shards: KeyShards::new(count, capacity),
        }
    }

    /// The cached outcome of `charge` at `now`, if its counter is known to deny it. A charge
    /// its limit records past the limit is never answered here: its hits must reach Redis.
    pub fn lookup(&self, charge: &Charge, now: Nanos) -> Option<ChargeOutcome> {
        if self.shards.per_shard == 0 || recorded(charge) {
            return None;
        }
        let key = charge.key.as_bytes();
        let shard = self.shards.shard(key).lock();
        let entry = shard.get(key)?;
        let hit = entry.limit == charge.limit && charge.cost <= 1 && now < entry.until;
        hit.then(|| ChargeOutcome {
            verdict: Verdict {
                admitted: false,
                remaining: 0,
                reset_after: entry.until - now,
            },
            available: 0,
        })
    }

    /// Remembers `outcome` of `charge`, answered by Redis after `sent_at`, if it is a denial
    /// of one hit (or a check) where not even one hit fits; a charge recorded past its limit
    /// drops its counter's entry instead.
    pub fn remember(&self, charge: &Charge, sent_at: Nanos, outcome: &ChargeOutcome) {
        if self.shards.per_shard == 0 {
            return;
        }
        if recorded(charge) {
            // Its hits moved the counter's next admission later than any denial held here.
            self.forget(std::slice::from_ref(charge));
            return;
        }
        if charge.cost > 1 || outcome.verdict.admitted || outcome.available > 0 {
            return;
        }
        let entry = CachedDenial {
            limit: charge.limit,
            until: sent_at.saturating_add(outcome.verdict.reset_after),
        };
        let key = charge.key.as_bytes();
        let mut shard = self.shards.shard(key).lock();
        if shard.len() >= self.shards.per_shard && !shard.contains_key(key) {
            shard.retain(|_, e| e.until > sent_at);
            if shard.len() >= self.shards.per_shard {
                return;
            }
        }
        shard.insert(key.into(), entry);
    }

    /// Drops the entries of `charges`' counters (an admin reset: Redis's denial no longer
    /// holds).
    pub fn forget(&self, charges: &[Charge]) {
        for charge in charges {
            let key = charge.key.as_bytes();
            self.shards.shard(key).lock().remove(key);
        }
    }

    /// Drops the entries expired at `now`.
    pub fn sweep(&self, now: Nanos) {
        for shard in self.shards.all() {
            shard.lock().retain(|_, e| e.until > now);
        }
    }

    /// The number of entries held (expired ones count until the next sweep).
    pub fn len(&self) -> usize {
        self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::clock::SECOND;
    use crate::store::{CounterKeyBuilder, Gate};

    fn charge(requests: u64, cost: u64) -> Charge {
        let limit = Limit {
            algorithm: Algorithm::SlidingLog,
            requests,
            window: 60 * SECOND,
            burst: requests,
            origin: 0,
            recording: Default::default(),
        };
        let mut key = CounterKeyBuilder::new("d");
        key.entry("k", "v");
        Charge {
            key: key.finish(0, limit.algorithm, limit.window),
            limit,
            cost,
            gate: Gate::Enforced,
            lease: 0,
            descriptor: 0,
        }
    }

    fn denied(reset_after: Nanos, available: u64) -> ChargeOutcome {
        ChargeOutcome {
            verdict: Verdict {
                admitted: false,
                remaining: 0,
                reset_after,
            },
            available,
        }
    }

    /// A full counter is answered from the cache until its retry time, counted from sending.
    #[test]
    fn denial_is_cached_until_retry() {
        let cache = OverLimitCache::new(10);
        cache.remember(&charge(5, 1), 100, &denied(50, 0));
        assert_eq!(cache.lookup(&charge(5, 1), 120), Some(denied(30, 0)));
        assert_eq!(cache.lookup(&charge(5, 0), 149), Some(denied(1, 0)));
        assert_eq!(cache.lookup(&charge(5, 1), 150), None);
    }

    /// Another limit (a reload) or another cost is not answered from the cache.
    #[test]
    fn other_limit_or_cost_misses() {
        let cache = OverLimitCache::new(10);
        cache.remember(&charge(5, 1), 0, &denied(50, 0));
        assert_eq!(cache.lookup(&charge(6, 1), 1), None);
        assert_eq!(cache.lookup(&charge(5, 2), 1), None);
    }

    /// A denial of several hits is not cached: one hit may fit before all of them do, and
    /// its cached "nothing fits" would be stale (found by the Lua/Rust property test).
    #[test]
    fn denials_of_several_hits_are_not_cached() {
        let cache = OverLimitCache::new(10);
        cache.remember(&charge(5, 3), 0, &denied(50, 0));
        assert_eq!(cache.lookup(&charge(5, 3), 1), None);
    }

    /// The per-entry size behind [`ENTRY_BYTES`] holds.
    #[test]
    fn entry_size() {
        let table = std::mem::size_of::<(Box<[u8]>, CachedDenial)>() + 1;
        assert!(table <= 65, "{table}");
        assert!(2 * table + 48 <= ENTRY_BYTES);
    }

    /// A denial with room for a smaller call is not cached; nor anything when disabled.
    #[test]
    fn partial_room_and_disabled_are_not_cached() {
        let cache = OverLimitCache::new(10);
        cache.remember(&charge(5, 3), 0, &denied(50, 2));
        assert_eq!(cache.lookup(&charge(5, 3), 1), None);
        let off = OverLimitCache::new(0);
        off.remember(&charge(5, 1), 0, &denied(50, 0));
        assert_eq!(off.lookup(&charge(5, 1), 1), None);
    }

    /// Bytes to entries: 0 stays off; envoyproxy/ratelimit's smallest cache (512 KiB) is
    /// thousands.
    #[test]
    fn cache_bytes_to_entries() {
        assert_eq!(local_cache_entries(0), 0);
        assert_eq!(local_cache_entries(512 * 1024), 512 * 1024 / ENTRY_BYTES);
        assert!(local_cache_entries(512 * 1024) > 2_000);
    }
}
