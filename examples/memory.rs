//! Memory per active counter: fills a `MemoryStore` with counters of one algorithm and reports
//! the growth of the process's resident set (VmRSS in /proc/self/status) per counter.
//!
//! Run: `cargo run --release --example memory -- ALGORITHM [COUNTERS] [HITS]`
//! (defaults: 1,000,000 counters, 1 hit each; HITS > 1 spreads the hits over time, which only
//! the sliding log stores one by one). Prints one JSON line. Linux only (reads /proc).

use sluice::algorithm::{Algorithm, Limit};
use sluice::clock::{MILLI, SECOND};
use sluice::store::{Charge, CounterKeyBuilder, Gate, MemoryStore};

// The `sluice` binary's allocator, so the bytes are what the server would hold.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn rss_bytes() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS line")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .ok_or("bad VmRSS line")?;
    Ok(kib * 1024)
}

fn main() -> Result<(), String> {
    // As the server does: see `sluice::huge_pages`.
    sluice::huge_pages::disable_unless_asked();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: memory ALGORITHM [COUNTERS] [HITS]";
    let algorithm = args
        .first()
        .and_then(|a| Algorithm::from_name(a))
        .ok_or(usage)?;
    let count: u64 = args
        .get(1)
        .map_or(Ok(1_000_000), |n| n.parse())
        .map_err(|_| usage)?;
    let hits: u64 = args
        .get(2)
        .map_or(Ok(1), |n| n.parse())
        .map_err(|_| usage)?;
    let limit = Limit {
        algorithm,
        requests: 1_000,
        window: 60 * SECOND,
        burst: 1_000,
        origin: 0,
        recording: Default::default(),
    };
    // A realistic key: domain, one descriptor entry with a per-client value, the limit identity.
    let charges: Vec<[Charge; 1]> = (0..count)
        .map(|i| {
            let mut key = CounterKeyBuilder::new("edge");
            key.entry("api_key", &format!("customer-{i:08}"));
            [Charge {
                key: key.finish(0, algorithm, limit.window),
                limit,
                cost: 1,
                gate: Gate::Enforced,
                lease: 0,
                descriptor: 0,
            }]
        })
        .collect();
    let store = MemoryStore::new();
    let before = rss_bytes()?;
    let start = 1_767_225_600 * SECOND;
    for hit in 0..hits {
        for c in &charges {
            store.apply_now(c, start + hit * MILLI);
        }
    }
    let after = rss_bytes()?;
    // The pre-built charges' keys are cloned into the store, so they are not counted twice.
    let per = (after.saturating_sub(before)) as f64 / count.max(1) as f64;
    println!(
        r#"{{"algorithm":"{algorithm}","counters":{},"hits_per_counter":{hits},"rss_delta_bytes":{},"bytes_per_counter":{per:.0}}}"#,
        store.len(),
        after.saturating_sub(before)
    );
    Ok(())
}
