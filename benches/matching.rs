//! Criterion: matching a 3-entry descriptor in a domain of 1,000 rules (`Domain::lookup`).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::Criterion;
use sluice::rules::{LoadOptions, load_sources};

// The `sluice` binary's allocator, so allocations cost here what they cost in the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A domain of 1,000 limited leaves, three levels deep: 100 tenants (90 exact values, 10
/// wildcards) × 10 paths × a key-only `method` node with a limit.
fn rules() -> String {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for t in 0..100 {
        let value = if t < 90 {
            format!("t{t}")
        } else {
            format!("w{t}-*")
        };
        yaml.push_str(&format!(
            "  - key: tenant\n    value: \"{value}\"\n    descriptors:\n"
        ));
        for p in 0..10 {
            yaml.push_str(&format!(
                "      - key: path\n        value: /p{p}\n        descriptors:\n          - key: method\n            rate_limit: {{ unit: second, requests_per_unit: 100 }}\n"
            ));
        }
    }
    yaml
}

fn lookup(c: &mut Criterion) {
    let set = load_sources(
        &[(PathBuf::from("bench.yaml"), rules())],
        &LoadOptions::default(),
    )
    .expect("bench rules load");
    let domain = set.domain("bench").expect("domain");
    let mut group = c.benchmark_group("match_3_entries_in_1000_rules");
    for (name, tenant) in [("exact", "t57"), ("wildcard", "w95-acme")] {
        let entries = [("tenant", tenant), ("path", "/p3"), ("method", "GET")];
        assert!(
            domain
                .lookup(&entries)
                .is_some_and(|m| !m.limits().is_empty())
        );
        group.bench_function(name, |b| {
            b.iter(|| black_box(domain.lookup(black_box(&entries)).is_some()))
        });
    }
    group.finish();
}

// A plain main instead of criterion_group!/criterion_main!, whose generated functions carry
// no doc comments (the crate warns on missing docs).
fn main() {
    let mut c = Criterion::default().configure_from_args();
    lookup(&mut c);
    c.final_summary();
}
