//! Hot-key sharding (`shards: N` on a rule): the rule's counter is split into N sub-counters,
//! each enforcing its share of the limit, and each call is charged to one of them, so calls on
//! one hot key spread over N locks instead of queueing on one.
//!
//! Routing: each call hashes the descriptor's entries together with a per-thread call
//! sequence (no state shared between threads), which spreads calls evenly over the
//! sub-counters. Sub-counter `i` of `n` gets `limit / n`, plus one while `i < limit % n`; for a
//! token bucket both the refill and the burst are split so. `n` is capped at the limit's
//! smallest figure (requests, burst), so no sub-counter gets nothing.

use std::cell::Cell;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::algorithm::{Algorithm, Limit};

thread_local! {
    /// Sharded calls checked on this thread so far.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// The routing hash of one call of a sharded descriptor.
pub(super) fn route(entries: &[(String, String)]) -> u64 {
    let call = CALLS.with(|calls| {
        let next = calls.get().wrapping_add(1);
        calls.set(next);
        next
    });
    let mut hasher = foldhash::fast::FixedState::with_seed(0x5eed).build_hasher();
    entries.hash(&mut hasher);
    call.hash(&mut hasher);
    hasher.finish()
}

/// The sub-counter `route` picks among `shards`, and its share of `limit`; `None` when the
/// limit is too small to split (it is then counted whole, unsharded).
pub(super) fn split(limit: &Limit, shards: u32, route: u64) -> Option<(Limit, u32)> {
    let smallest = match limit.algorithm {
        Algorithm::TokenBucket => limit.requests.min(limit.burst),
        _ => limit.requests,
    };
    let n = u64::from(shards).min(smallest);
    if n <= 1 {
        return None;
    }
    let i = route % n;
    let share = |total: u64| total / n + u64::from(i < total % n);
    let part = Limit {
        requests: share(limit.requests),
        burst: share(limit.burst),
        ..*limit
    };
    Some((part, i as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SECOND;

    fn limit(algorithm: Algorithm, requests: u64, burst: u64) -> Limit {
        Limit {
            algorithm,
            requests,
            window: 60 * SECOND,
            burst,
            origin: 0,
            recording: Default::default(),
        }
    }

    /// Shares add up to the limit, the remainder going to the first sub-counters.
    #[test]
    fn shares_add_up_to_the_limit() {
        let l = limit(Algorithm::FixedWindow, 10, 10);
        let shares: Vec<(u32, u64)> = (0..4)
            .map(|r| split(&l, 4, r).map(|(p, i)| (i, p.requests)).unwrap())
            .collect();
        assert_eq!(shares, [(0, 3), (1, 3), (2, 2), (3, 2)]);
        let bucket = limit(Algorithm::TokenBucket, 100, 7);
        let (part, _) = split(&bucket, 4, 3).unwrap();
        assert_eq!((part.requests, part.burst), (25, 1));
    }

    /// A limit smaller than the shard count uses fewer sub-counters; one that cannot split
    /// is counted whole.
    #[test]
    fn small_limits_use_fewer_sub_counters() {
        let l = limit(Algorithm::SlidingWindow, 2, 2);
        assert!((0..100).all(|r| split(&l, 8, r).is_some_and(|(p, i)| i < 2 && p.requests == 1)));
        assert!(split(&limit(Algorithm::SlidingLog, 1, 1), 8, 5).is_none());
        assert!(split(&limit(Algorithm::FixedWindow, 100, 100), 1, 5).is_none());
    }

    /// Successive calls of one descriptor on one thread spread over every sub-counter.
    #[test]
    fn calls_spread_over_sub_counters() {
        let entries = vec![("api_key".to_owned(), "hot".to_owned())];
        let l = limit(Algorithm::FixedWindow, 400, 400);
        let mut seen = [0u32; 4];
        for _ in 0..4_000 {
            let (_, i) = split(&l, 4, route(&entries)).unwrap();
            seen[i as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1_200).contains(&n)), "{seen:?}");
    }
}
