//! The memory store's own tests (the shared ones are in tests/store/store_contract.rs).

use super::*;
use crate::algorithm::State;
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
        fingerprint_key: None,
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
        fingerprint_key: None,
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
        store.drain_dirty(&mut |v| seen.push((v.fingerprint, v.state.clone(), v.idle_at)));
        seen.sort_by_key(|s| s.0);
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
        fingerprint_key: None,
    });
    for i in 0..10_000 {
        store.apply_now(&[charge(&i.to_string(), 5, 1, Gate::Enforced)], 0);
    }
    let big = store.capacity();
    assert_eq!(store.retain_active(60 * SECOND), 10_000);
    assert!(store.is_empty());
    assert!(store.capacity() < big / 8, "tables shrank");
}

/// A counter costs one 40-byte table slot whatever its key's length, and the tables stay
/// between 64 % and 80 % full: at most 63 bytes a counter, here with 200-byte keys.
#[test]
fn counters_cost_a_slot_not_their_key() {
    let store = MemoryStore::with_options(MemoryOptions {
        shards: 4,
        max_counters: usize::MAX,
        journal: true,
        fingerprint_key: None,
    });
    let long = "k".repeat(200);
    for i in 0..50_000 {
        store.apply_now(&[charge(&format!("{long}{i}"), 5, 1, Gate::Enforced)], 0);
    }
    assert_eq!(store.len(), 50_000);
    let bytes = store.capacity() * 40;
    assert!(bytes <= 50_000 * 63, "{} bytes a counter", bytes / 50_000);
}

/// A record written by an earlier version names its counter by key bytes: restore combines it
/// with the live counter of those bytes, as it does a record naming the fingerprint.
#[test]
fn restore_accepts_key_bytes_and_fingerprints() {
    use crate::store::saved::{SavedCounter, SavedKey};
    let store = MemoryStore::with_shards(4);
    let live = charge("a", 5, 1, Gate::Enforced);
    store.apply_now(std::slice::from_ref(&live), 0);
    let saved = |key, count| SavedCounter {
        key,
        state: State::Fixed {
            window_start: 0,
            count,
        },
        idle_at: 60 * SECOND,
    };
    assert!(store.restore(saved(SavedKey::Bytes(live.key.clone()), 3), 0));
    assert_eq!(store.len(), 1, "the same counter");
    let fp = store.fingerprint(live.key.as_bytes());
    assert!(store.restore(saved(SavedKey::Fingerprint(fp), 2), 0));
    // 3 hits restored (the most advanced state), so 2 of 5 are left.
    let left = store.apply_now(std::slice::from_ref(&live), 0)[0]
        .verdict
        .remaining;
    assert_eq!((store.len(), left), (1, 1));
}

/// Distinct keys never share a counter in practice (a fingerprint collision has probability
/// n^2 / 2^129); and if two ever did, a state of another algorithm reads as a fresh counter,
/// never as a crash.
#[test]
fn colliding_state_of_another_algorithm_reads_as_fresh() {
    use crate::algorithm::{Algorithm, Limit};
    let mut shard = super::shard::Shard::default();
    let fp = Fingerprinter::new([9; 16]).of(b"one key");
    let fixed = State::Fixed {
        window_start: 0,
        count: 5,
    };
    shard.put(fp, fixed, 60 * SECOND, false);
    let held = shard
        .get(fp, Algorithm::TokenBucket)
        .map(|s| s.into_owned());
    let limit = Limit {
        algorithm: Algorithm::TokenBucket,
        requests: 5,
        window: 60 * SECOND,
        burst: 5,
        origin: 0,
        recording: Default::default(),
    };
    let (verdict, _) = crate::algorithm::decide(&limit, held.as_ref(), 0, 1);
    assert!(verdict.admitted && verdict.remaining == 4);
}

/// Sliding logs keep exactly their entries, and are reclaimed like every counter.
#[test]
fn sliding_logs_are_exact_and_reclaimed() {
    use crate::algorithm::{Algorithm, Limit};
    use crate::store::{Charge, CounterKeyBuilder};
    let store = MemoryStore::with_shards(2);
    let limit = Limit {
        algorithm: Algorithm::SlidingLog,
        requests: 3,
        window: 10 * SECOND,
        burst: 3,
        origin: 0,
        recording: Default::default(),
    };
    let mut key = CounterKeyBuilder::new("d");
    key.entry("k", "log");
    let log = Charge {
        key: key.finish(0, Algorithm::SlidingLog, limit.window),
        limit,
        cost: 1,
        gate: Gate::Enforced,
        lease: 0,
        descriptor: 0,
    };
    let call = std::slice::from_ref(&log);
    for at in 0..3 {
        assert!(store.apply_now(call, at * SECOND)[0].verdict.admitted);
    }
    let denied = store.apply_now(call, 3 * SECOND)[0].verdict;
    assert!(!denied.admitted);
    assert_eq!(
        denied.reset_after,
        7 * SECOND,
        "the oldest entry leaves at 10 s"
    );
    assert!(store.apply_now(call, 10 * SECOND)[0].verdict.admitted);
    assert_eq!(store.retain_active(19 * SECOND), 0);
    assert_eq!(store.retain_active(20 * SECOND), 1);
    assert!(store.is_empty());
}
