//! The memory store's own tests (the shared ones are in tests/store_contract.rs).

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
