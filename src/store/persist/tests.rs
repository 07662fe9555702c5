//! Persistence round trips on a temporary directory: what is restored, what is not, and
//! what survives damaged files.

use std::path::Path;

use super::*;
use crate::algorithm::{Algorithm, Limit};
use std::sync::atomic::Ordering;

use crate::clock::{Nanos, SECOND};
use crate::store::{Charge, CounterKeyBuilder, Gate};

/// A minute boundary.
const T0: Nanos = 28_333_334 * 60 * SECOND;

fn charge(name: &str, algorithm: Algorithm, requests: u64, window: Nanos) -> Charge {
    let limit = Limit {
        algorithm,
        requests,
        window,
        burst: requests,
        origin: 0,
        recording: Default::default(),
    };
    let mut key = CounterKeyBuilder::new("d");
    key.entry("k", name);
    Charge {
        key: key.finish(0, algorithm, window),
        limit,
        cost: 1,
        gate: Gate::Enforced,
        lease: 0,
        descriptor: 0,
    }
}

fn open(dir: &Path, now: Nanos) -> PersistentStore {
    let settings = PersistSettings::new(dir);
    PersistentStore::open(settings, MemoryOptions::default(), now).expect("opens")
}

/// Calls `charge` until it is denied; returns how many were admitted.
fn exhaust(store: &PersistentStore, charge: &Charge, now: Nanos) -> u64 {
    let mut admitted = 0;
    while store.memory().apply_now(std::slice::from_ref(charge), now)[0]
        .verdict
        .admitted
    {
        admitted += 1;
    }
    admitted
}

fn data_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| file::FileKind::parse(n).is_some())
        .collect();
    names.sort();
    names
}

/// Every algorithm's counter comes back exactly: the same calls are denied with the same hint.
#[test]
fn restart_restores_every_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let charges: Vec<Charge> = Algorithm::ALL
        .into_iter()
        .map(|a| charge(a.name(), a, 4, 60 * SECOND))
        .collect();
    let before: Vec<_> = {
        let store = open(dir.path(), T0);
        for (i, c) in charges.iter().enumerate() {
            // Spread the hits so the sliding log holds several entries.
            for step in 0..4 {
                store
                    .memory()
                    .apply_now(std::slice::from_ref(c), T0 + step * SECOND + i as u64);
            }
        }
        store.flush_now(T0, true);
        charges
            .iter()
            .map(|c| {
                store
                    .memory()
                    .apply_now(std::slice::from_ref(c), T0 + 5 * SECOND)[0]
            })
            .collect()
    };
    let store = open(dir.path(), T0 + 5 * SECOND);
    assert_eq!(store.memory().len(), 4);
    for (c, was) in charges.iter().zip(before) {
        let now = store
            .memory()
            .apply_now(std::slice::from_ref(c), T0 + 5 * SECOND)[0];
        assert!(!now.verdict.admitted, "{}", c.limit.algorithm);
        assert_eq!(now, was, "{}", c.limit.algorithm);
    }
}

/// A budget recorded past its limit comes back past it: a counter over (its count above 32
/// bits on a sliding window: a spilled counter) and a bucket in debt keep refusing checks with
/// the same hint after a restart.
#[test]
fn counts_past_the_limit_are_restored() {
    use crate::algorithm::Recording;
    let dir = tempfile::tempdir().unwrap();
    let budgets: Vec<Charge> = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ]
    .into_iter()
    .map(|a| {
        let mut c = charge(&format!("budget-{a}"), a, 1_000, 60 * SECOND);
        c.limit.recording = Recording::Always;
        c.cost = 5_000_000_000;
        c
    })
    .collect();
    let check = |c: &Charge| Charge {
        cost: 0,
        ..c.clone()
    };
    let before: Vec<_> = {
        let store = open(dir.path(), T0);
        for c in &budgets {
            let over = store.memory().apply_now(std::slice::from_ref(c), T0)[0];
            assert!(!over.verdict.admitted, "{}", c.limit.algorithm);
        }
        store.flush_now(T0, true);
        budgets
            .iter()
            .map(|c| store.memory().apply_now(&[check(c)], T0 + SECOND)[0])
            .collect()
    };
    let store = open(dir.path(), T0 + SECOND);
    for (c, was) in budgets.iter().zip(before) {
        let now = store.memory().apply_now(&[check(c)], T0 + SECOND)[0];
        assert!(!now.verdict.admitted, "{}", c.limit.algorithm);
        assert_eq!(now, was, "{}", c.limit.algorithm);
    }
}

/// Counters whose windows passed while the server was down are not restored.
#[test]
fn expired_counters_are_not_restored() {
    let dir = tempfile::tempdir().unwrap();
    let short = charge("short", Algorithm::SlidingLog, 2, SECOND);
    let long = charge("long", Algorithm::FixedWindow, 2, 3_600 * SECOND);
    {
        let store = open(dir.path(), T0);
        exhaust(&store, &short, T0);
        exhaust(&store, &long, T0);
        store.flush_now(T0, true);
    }
    let store = open(dir.path(), T0 + 2 * SECOND);
    assert_eq!(store.memory().len(), 1);
    assert_eq!(store.persist_stats().restored, 1);
    assert_eq!(exhaust(&store, &short, T0 + 2 * SECOND), 2);
    assert_eq!(exhaust(&store, &long, T0 + 2 * SECOND), 0);
}

/// A hot sliding log journals only its new entries each interval, and still restores whole.
#[test]
fn sliding_log_journals_increments() {
    let dir = tempfile::tempdir().unwrap();
    let log = charge("log", Algorithm::SlidingLog, 1_000, 60 * SECOND);
    let store = open(dir.path(), T0);
    let mut bytes = Vec::new();
    for interval in 0..5u64 {
        for i in 0..100 {
            store
                .memory()
                .apply_now(std::slice::from_ref(&log), T0 + interval * SECOND + i);
        }
        let before = store.persist_stats().bytes;
        store.flush_now(T0, false);
        bytes.push(store.persist_stats().bytes - before);
    }
    // Each flush carries ~100 entries, not the whole (growing) log.
    assert!(bytes[4] < bytes[0] + 64, "{bytes:?}");
    drop(store);
    let store = open(dir.path(), T0 + 5 * SECOND);
    assert_eq!(exhaust(&store, &log, T0 + 5 * SECOND), 500);
}

/// Compaction writes a snapshot, deletes the files it supersedes, and loses nothing.
#[test]
fn compaction_supersedes_old_files() {
    let dir = tempfile::tempdir().unwrap();
    let settings = PersistSettings {
        compact_after: 1,
        ..PersistSettings::new(dir.path())
    };
    let store = PersistentStore::open(settings, MemoryOptions::default(), T0).unwrap();
    for i in 0..100 {
        let c = charge(&format!("k{i}"), Algorithm::TokenBucket, 3, 60 * SECOND);
        store.memory().apply_now(std::slice::from_ref(&c), T0);
        store.memory().apply_now(std::slice::from_ref(&c), T0);
    }
    store.flush_now(T0, false);
    // The compaction thread runs beside flushes; wait for it to finish.
    while store.persist_stats().snapshots == 0 {
        assert_eq!(store.persist_stats().errors, 0);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    while store.shared.compacting.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let files = data_files(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().any(|f| f.ends_with(".snapshot")), "{files:?}");
    drop(store);
    let store = open(dir.path(), T0);
    for i in 0..100 {
        let c = charge(&format!("k{i}"), Algorithm::TokenBucket, 3, 60 * SECOND);
        assert_eq!(exhaust(&store, &c, T0), 1, "k{i}");
    }
}

/// A corrupt tail of the journal is skipped; the intact records before it are kept.
#[test]
fn corrupt_tail_keeps_intact_records() {
    let dir = tempfile::tempdir().unwrap();
    let kept = charge("kept", Algorithm::FixedWindow, 2, 3_600 * SECOND);
    let lost = charge("lost", Algorithm::FixedWindow, 2, 3_600 * SECOND);
    {
        let store = open(dir.path(), T0);
        exhaust(&store, &kept, T0);
        store.flush_now(T0, false);
        exhaust(&store, &lost, T0);
        store.flush_now(T0, false);
    }
    let journal = dir.path().join(&data_files(dir.path())[0]);
    let mut bytes = std::fs::read(&journal).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x40;
    bytes.extend_from_slice(b"\x05\x00\x00\x00torn");
    std::fs::write(&journal, bytes).unwrap();
    let store = open(dir.path(), T0);
    assert_eq!(exhaust(&store, &kept, T0), 0, "intact record restored");
    assert_eq!(exhaust(&store, &lost, T0), 2, "corrupt frame skipped");
}

/// Garbage where data files belong never stops a start.
#[test]
fn garbage_files_never_stop_a_start() {
    let dir = tempfile::tempdir().unwrap();
    let junk: [&[u8]; 4] = [
        b"",
        b"SLUICE",
        b"SLUICEJ\x01\xff\xff\xff\xff",
        b"\x00\x01\x02",
    ];
    for (i, bytes) in junk.iter().enumerate() {
        std::fs::write(
            dir.path().join(file::FileKind::Journal.file_name(i as u64)),
            bytes,
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join(file::FileKind::Snapshot.file_name(9)),
        b"SLUICES\x01\x03\x00\x00\x00\x00\x00\x00\x00abc",
    )
    .unwrap();
    let store = open(dir.path(), T0);
    assert!(store.memory().is_empty());
}

/// A second server on the same directory is refused while the first holds it.
#[test]
fn directory_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), T0);
    let second = PersistentStore::open(
        PersistSettings::new(dir.path()),
        MemoryOptions::default(),
        T0,
    );
    assert!(matches!(second, Err(PersistError::Locked(_))), "{second:?}");
    drop(first);
    open(dir.path(), T0);
}
