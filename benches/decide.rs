//! Criterion: one decision on the memory store per algorithm, uncontended (`MemoryStore::apply_now`
//! with a pre-built charge). Every measured call is admitted, so each one also writes its state.

use std::hint::black_box;

use criterion::Criterion;
use sluice::algorithm::{Algorithm, Limit};
use sluice::clock::{MILLI, Nanos, SECOND};
use sluice::store::{Charge, CounterKeyBuilder, Gate, MemoryStore};

// The `sluice` binary's allocator, so allocations cost here what they cost in the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// 2026-01-01T00:00:00Z.
const START: Nanos = 1_767_225_600 * SECOND;

fn charge(limit: Limit) -> [Charge; 1] {
    let mut key = CounterKeyBuilder::new("edge");
    key.entry("api_key", "customer-0042");
    [Charge {
        key: key.finish(0, limit.algorithm, limit.window),
        limit,
        cost: 1,
        gate: Gate::Enforced,
        lease: 0,
        descriptor: 0,
    }]
}

/// (name, limit, clock step per call). The window algorithms get a limit never reached; the
/// sliding log gets N = 100 with calls arriving at exactly N per window, so its log holds 100
/// entries and every call both expires one and appends one.
fn cases() -> Vec<(&'static str, Limit, Nanos)> {
    let big = 1_000_000_000_000;
    let limit = |algorithm, requests, window| Limit {
        algorithm,
        requests,
        window,
        burst: requests,
        origin: 0,
        recording: Default::default(),
    };
    vec![
        (
            "fixed_window",
            limit(Algorithm::FixedWindow, big, 60 * SECOND),
            1_000,
        ),
        (
            "sliding_window",
            limit(Algorithm::SlidingWindow, big, 60 * SECOND),
            1_000,
        ),
        (
            "token_bucket",
            limit(Algorithm::TokenBucket, big, 60 * SECOND),
            1_000,
        ),
        (
            "sliding_log_n100",
            limit(Algorithm::SlidingLog, 100, 100 * MILLI),
            MILLI,
        ),
    ]
}

fn decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store_decision");
    for (name, limit, step) in cases() {
        let store = MemoryStore::new();
        let charges = charge(limit);
        let mut now = START;
        // Warm the counter to its steady state (a full log for the sliding log).
        for _ in 0..1_000 {
            now += step;
            assert!(store.apply_now(&charges, now)[0].verdict.admitted);
        }
        group.bench_function(name, |b| {
            b.iter(|| {
                now += step;
                black_box(store.apply_now(black_box(&charges), now))
            })
        });
    }
    group.finish();
}

// A plain main instead of criterion_group!/criterion_main!, whose generated functions carry
// no doc comments (the crate warns on missing docs).
fn main() {
    let mut c = Criterion::default().configure_from_args();
    decision(&mut c);
    c.final_summary();
}
