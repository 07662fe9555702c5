//! Embedded-store figures: memory per counter by algorithm, and the cost of persistence on the
//! decision path. A plain program (no harness): `cargo bench --bench embedded_store`.
//!
//! Memory is measured as the growth of the process's resident set while a fresh store takes
//! in one million counters, each algorithm in its own child process so freed memory of one
//! run cannot hide the next one's.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice::algorithm::{Algorithm, Limit};
use sluice::clock::SECOND;
use sluice::store::{
    Charge, CounterKeyBuilder, Gate, MemoryOptions, MemoryStore, PersistSettings, PersistentStore,
};

/// The real binary as a child process, shared with the integration tests.
#[allow(dead_code)]
#[path = "../tests/common/process.rs"]
mod process;

use process::Serve;

const COUNTERS: u64 = 1_000_000;
const NOW: u64 = 1_767_225_600 * SECOND;

fn charge(algorithm: Algorithm, i: u64) -> Charge {
    let limit = Limit {
        algorithm,
        requests: 100,
        window: 60 * SECOND,
        burst: 100,
        origin: 0,
        recording: Default::default(),
    };
    let mut key = CounterKeyBuilder::new("edge");
    key.entry(
        "remote_address",
        &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
    );
    Charge {
        key: key.finish(0, algorithm, limit.window),
        limit,
        cost: 1,
        gate: Gate::Enforced,
        lease: 0,
        descriptor: 0,
    }
}

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Child: fills a store with a million counters of `algorithm` and prints bytes per counter.
fn memory_child(algorithm: Algorithm) {
    let charges: Vec<Charge> = (0..COUNTERS).map(|i| charge(algorithm, i)).collect();
    let key_bytes: usize = charges.iter().map(|c| c.key.as_bytes().len()).sum();
    let store = MemoryStore::with_options(MemoryOptions {
        max_counters: usize::MAX,
        ..MemoryOptions::default()
    });
    let before = rss();
    for c in &charges {
        store.apply_now(std::slice::from_ref(c), NOW);
    }
    let grown = rss() - before;
    // Each stored key is one allocation of its bytes (glibc: rounded up to 16, 8 of header).
    let key_heap = charges
        .iter()
        .map(|c| (c.key.as_bytes().len() + 8).div_ceil(16) * 16)
        .sum::<usize>() as f64;
    let per = grown as f64 / COUNTERS as f64;
    println!(
        "{:<15} {:>7.1} B/counter in all; {:>6.1} B without the key's own allocation (avg key {:.0} B); {} slots for {} counters",
        algorithm.name(),
        per,
        per - key_heap / COUNTERS as f64,
        key_bytes as f64 / COUNTERS as f64,
        store.capacity(),
        store.len()
    );
    black_box(&store);
}

/// Decisions per second on `threads` threads over `keys` distinct counters, while (with a
/// persistent store) the journal is flushed every 50 ms as the server does.
fn throughput(
    store: Arc<MemoryStore>,
    persist: Option<PersistentStore>,
    keys: u64,
    threads: u64,
) -> f64 {
    let charges: Arc<Vec<Charge>> = Arc::new(
        (0..keys)
            .map(|i| charge(Algorithm::SlidingWindow, i))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = persist.map(|p| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                p.flush_now(NOW, false);
            }
        })
    });
    let run = Duration::from_secs(3);
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, charges) = (store.clone(), charges.clone());
            std::thread::spawn(move || {
                let mut done = 0u64;
                let mut i = t * 7_919;
                while started.elapsed() < run {
                    for _ in 0..1_000 {
                        i = (i + 104_729) % keys;
                        let c = &charges[i as usize];
                        black_box(store.apply_now(std::slice::from_ref(c), NOW + done));
                        done += 1;
                    }
                }
                done
            })
        })
        .collect();
    let total: u64 = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(f) = flusher {
        let _ = f.join();
    }
    total as f64 / elapsed
}

/// Calls per second through the real server (release binary) with `args`: 4 connections with
/// 32 calls in flight each, over 10,000 distinct counters, for 5 s. Client and server share
/// the machine, so the figure is a lower bound; the comparison between runs is the point.
fn server_calls_per_second(args: &[&str]) -> f64 {
    use sluice::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
    use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

    let yaml = "domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n";
    let server = Serve::new()
        .rules(yaml)
        .args(["--log-level", "warn"])
        .args(args)
        .start();
    let grpc = server.grpc_addr;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let calls = runtime.block_on(async move {
        let run = Duration::from_secs(5);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..4u64 {
            let client = RateLimitServiceClient::connect(format!("http://{grpc}"))
                .await
                .expect("connect");
            for s in 0..32u64 {
                let mut client = client.clone();
                tasks.push(tokio::spawn(async move {
                    let mut done = 0u64;
                    let mut i = c * 32 + s;
                    while started.elapsed() < run {
                        i = (i + 7_919) % 10_000;
                        let request = RateLimitRequest {
                            domain: "bench".into(),
                            descriptors: vec![RateLimitDescriptor {
                                entries: vec![Entry {
                                    key: "remote_address".into(),
                                    value: format!("10.0.{}.{}", i >> 8, i & 255),
                                }],
                                limit: None,
                                hits_addend: None,
                            }],
                            hits_addend: 0,
                        };
                        if client.should_rate_limit(request).await.is_ok() {
                            done += 1;
                        }
                    }
                    done
                }));
            }
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap_or(0);
        }
        total as f64 / started.elapsed().as_secs_f64()
    });
    drop(server);
    calls
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --all-targets` runs bench programs too: measure only under `cargo bench`.
    if !args.iter().any(|a| a == "--bench" || a == "--memory-child") {
        println!("embedded_store: run with `cargo bench --bench embedded_store`");
        return;
    }
    if let Some(name) = args.iter().skip_while(|a| *a != "--memory-child").nth(1) {
        if let Some(algorithm) = Algorithm::from_name(name) {
            memory_child(algorithm);
        }
        return;
    }
    println!("== memory per counter (1,000,000 counters, RSS growth)");
    let me = std::env::current_exe().expect("own path");
    for algorithm in Algorithm::ALL {
        let status = std::process::Command::new(&me)
            .args(["--memory-child", algorithm.name()])
            .status();
        if !status.is_ok_and(|s| s.success()) {
            println!("{}: child failed", algorithm.name());
        }
    }
    println!("== decisions per second, sliding_window, 2 threads (journal flushed every 50 ms)");
    for keys in [1_000u64, 100_000] {
        let memory = Arc::new(MemoryStore::new());
        let plain = throughput(memory, None, keys, 2);
        let dir = tempfile::tempdir().expect("temp dir");
        let persistent = PersistentStore::open(
            PersistSettings::new(dir.path()),
            MemoryOptions::default(),
            NOW,
        )
        .expect("open");
        let with = throughput(persistent.memory().clone(), Some(persistent), keys, 2);
        println!(
            "{keys:>7} keys: --no-persist {:>10.0}/s   persisting {:>10.0}/s   ({:+.1} %)",
            plain,
            with,
            (with / plain - 1.0) * 100.0
        );
    }
    println!(
        "== calls per second through the server (gRPC, 4 connections x 32 in flight, 10,000 keys)"
    );
    for round in 1..=2 {
        let plain = server_calls_per_second(&["--no-persist"]);
        let with = server_calls_per_second(&[]);
        println!(
            "round {round}: --no-persist {plain:>8.0}/s   default (persisting every 50 ms) {with:>8.0}/s   ({:+.1} %)",
            (with / plain - 1.0) * 100.0
        );
    }
}
