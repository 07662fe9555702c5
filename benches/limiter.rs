//! Criterion: one whole `Limiter::check` (validate, match, plan, store, statuses, headers) on a
//! current-thread runtime, for one hot key and for calls spread over 100,000 keys.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use criterion::Criterion;
use sluice::clock::{ManualClock, SECOND};
use sluice::limiter::{Descriptor, Limiter, LimiterOptions, Request};
use sluice::metrics::Metrics;
use sluice::rules::{LoadOptions, load_sources};
use sluice::store::MemoryStore;

// The `sluice` binary's allocator, so allocations cost here what they cost in the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RULES: &str = "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000000 }\n";

fn request(user: &str) -> Request {
    Request {
        domain: "bench".into(),
        descriptors: vec![Descriptor {
            entries: vec![("user".into(), user.into())],
            ..Descriptor::default()
        }],
        hits_addend: 0,
    }
}

fn check(c: &mut Criterion) {
    let rules = load_sources(
        &[(PathBuf::from("r.yaml"), RULES.into())],
        &LoadOptions::default(),
    )
    .expect("rules load");
    let clock = ManualClock::new(1_767_225_600 * SECOND);
    let limiter = Limiter::new(
        Arc::new(ArcSwap::from_pointee(rules)),
        Arc::new(MemoryStore::new()),
        Arc::new(clock),
        LimiterOptions::default(),
        Arc::new(Metrics::new(0.8, 1_000)),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("limiter_check");
    for (name, keys) in [("one_key", 1), ("100k_keys", 100_000)] {
        let requests: Vec<Request> = (0..keys).map(|k| request(&format!("u-{k}"))).collect();
        for r in &requests {
            runtime.block_on(limiter.check(r)).expect("decided");
        }
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % requests.len();
                runtime
                    .block_on(limiter.check(&requests[i]))
                    .expect("decided")
            })
        });
    }
    group.finish();
}

// A plain main instead of criterion_group!/criterion_main!, whose generated functions carry
// no doc comments (the crate warns on missing docs).
fn main() {
    let mut c = Criterion::default().configure_from_args();
    check(&mut c);
    c.final_summary();
}
