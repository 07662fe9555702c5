//! Heap allocations of `Limiter::check` on the common path: an admitted call of one descriptor
//! with one limit, on the embedded store, after the first call created its counter and
//! statistics series. Counted with a counting global allocator (`stats_alloc`, wrapping the
//! system allocator); this binary holds this one test, so nothing else allocates meanwhile.
//! The response itself (its statuses and the list of its headers) is allowed; everything else the call does is
//! derived from the rules once, when they compile, or kept on the stack.

use std::alloc::System;
use std::sync::Arc;

use arc_swap::ArcSwap;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

use sluice::clock::{ManualClock, SECOND};
use sluice::limiter::{Code, Decision, Descriptor, Limiter, LimiterOptions, Request};
use sluice::metrics::Metrics;
use sluice::rules::{LoadOptions, load_sources};
use sluice::store::MemoryStore;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The rule `scripts/bench-callgrind` measures: one counter per user, never reached.
const RULES: &str = r#"
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000000 }
"#;

/// The same with a named limit: the name is reported in every status, shared with the rule.
const NAMED_RULES: &str = r#"
domain: bench
descriptors:
  - key: user
    rate_limit: { name: per_user, unit: second, requests_per_unit: 1000000000 }
"#;

/// The heap blocks a decision owns: its statuses and its headers' list. The headers' values
/// are the rule's policy text (shared) and numbers, and a limit's name is the rule's own, so
/// neither takes a block of its own.
fn response_blocks(d: &Decision) -> usize {
    usize::from(!d.statuses.is_empty()) + usize::from(!d.headers.is_empty())
}

// One test in this binary: two would allocate at the same time on two threads.
#[test]
fn admitted_one_descriptor_call_allocates_only_its_response() {
    for rules in [RULES, NAMED_RULES] {
        check_allocations(rules);
    }
}

fn check_allocations(text: &str) {
    let sources = [("rules.yaml".into(), text.into())];
    let rules = load_sources(&sources, &LoadOptions::default()).expect("rules compile");
    let limiter = Limiter::new(
        Arc::new(ArcSwap::from_pointee(rules)),
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(1_767_225_600 * SECOND)),
        LimiterOptions::default(),
        Arc::new(Metrics::new(0.8, 1_000)),
    );
    let request = Request {
        domain: "bench".into(),
        descriptors: vec![Descriptor {
            entries: vec![("user".into(), "u-1".into())],
            ..Descriptor::default()
        }],
        hits_addend: 0,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    // The first call creates the counter and the rule's statistics series.
    runtime.block_on(limiter.check(&request)).expect("decided");
    for _ in 0..3 {
        let (decision, stats) = runtime.block_on(async {
            let region = Region::new(GLOBAL);
            let decision = limiter.check(&request).await.expect("decided");
            (decision, region.change())
        });
        assert_eq!(decision.code, Code::Ok);
        let named = decision.statuses[0]
            .limit
            .as_ref()
            .and_then(|l| l.name.as_deref());
        assert_eq!(named.is_some(), text == NAMED_RULES);
        let blocks = stats.allocations + stats.reallocations;
        let own = blocks - response_blocks(&decision).min(blocks);
        eprintln!(
            "allocations {} reallocations {} response blocks {} => the call's own: {own}",
            stats.allocations,
            stats.reallocations,
            response_blocks(&decision)
        );
        assert_eq!(own, 0, "{stats:?}");
    }
}
