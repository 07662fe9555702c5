//! The soak: `sluice serve` on Redis for a chosen time at half its saturated rate, while its
//! rules reload, Redis restarts and the server is SIGKILLed and restarted; every decision is
//! checked against an exact model of a fixed window (no key ever gets more than its limit in
//! one window), unexpected errors are counted, and the server's memory is sampled.
//!
//! `scripts/soak [SECONDS]` runs it (`SLUICE_SOAK_SECS`, default 120; `scripts/test` runs the
//! 2-minute version with the other ignored tests).

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::process::{Serve, Sluice};
use common::redis::RedisServer;
use common::*;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

/// Keys the load spreads over.
const KEYS: usize = 20;
/// The fixed window, in milliseconds.
const WINDOW_MS: u64 = 2_000;
/// Calls in flight at most; past it a call is not sent (and counted as shed).
const IN_FLIGHT: usize = 512;

fn rules(limit: u64, generation: u64) -> String {
    format!(
        "# generation {generation}\ndomain: soak\ndescriptors:\n  - key: k\n    failure_mode: deny\n    rate_limit: {{ window: 2s, requests_per_unit: {limit}, algorithm: fixed_window }}\n"
    )
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Admissions per key per window: those whose send and receive fall in one window, and
/// those placed by the answer's reset hint (the call spanned a window edge).
#[derive(Default)]
struct Model {
    admitted: HashMap<(usize, u64), (u64, u64)>,
}

impl Model {
    /// Records an admission of `key` sent at `sent` and answered at `received` (Unix ms)
    /// with `reset_ms` until the window's end.
    fn admit(&mut self, key: usize, sent: u64, received: u64, reset_ms: u64) {
        let entry = if sent / WINDOW_MS == received / WINDOW_MS {
            let e = self.admitted.entry((key, sent / WINDOW_MS)).or_default();
            &mut e.0
        } else {
            // The window ends at (received + reset) give or take the call's latency.
            let end = (received + reset_ms + WINDOW_MS / 2) / WINDOW_MS;
            let e = self
                .admitted
                .entry((key, end.saturating_sub(1)))
                .or_default();
            &mut e.1
        };
        *entry += 1;
    }

    /// Windows where a key got more than `limit`, and the most any key got in one window.
    fn check(&self, limit: u64) -> (Vec<String>, u64) {
        let mut most = 0;
        let mut over = Vec::new();
        for (&(key, window), &(sure, placed)) in &self.admitted {
            most = most.max(sure + placed);
            if sure + placed > limit {
                over.push(format!(
                    "key {key} window {window}: {sure} + {placed} > {limit}"
                ));
            }
        }
        (over, most)
    }
}

/// What the load saw.
#[derive(Default)]
struct Totals {
    calls: AtomicU64,
    admitted: AtomicU64,
    denied: AtomicU64,
    errors_in_faults: AtomicU64,
    errors: AtomicU64,
    shed: AtomicU64,
}

/// The state the load and the fault injector share.
struct Shared {
    clients: Mutex<Vec<Client>>,
    /// A fault is being injected (errors expected).
    faulting: AtomicBool,
    model: Mutex<Model>,
    totals: Totals,
    stop: AtomicBool,
}

async fn clients(addr: SocketAddr) -> Vec<Client> {
    let mut all = Vec::new();
    for _ in 0..8 {
        all.push(connect(addr).await);
    }
    all
}

/// One call on key `key`, recorded in the model.
async fn one_call(shared: &Shared, key: usize, n: u64) {
    let mut client = {
        let clients = shared.clients.lock();
        clients[n as usize % clients.len()].clone()
    };
    let sent = unix_ms();
    let faulting = shared.faulting.load(Ordering::SeqCst);
    let value = format!("key-{key}");
    let answer = client
        .should_rate_limit(one_descriptor("soak", &[("k", &value)]))
        .await;
    let received = unix_ms();
    let totals = &shared.totals;
    totals.calls.fetch_add(1, Ordering::Relaxed);
    match answer.map(tonic::Response::into_inner) {
        Ok(r) if r.overall_code == OK => {
            totals.admitted.fetch_add(1, Ordering::Relaxed);
            shared
                .model
                .lock()
                .admit(key, sent, received, reset_ms(&r, 0));
        }
        Ok(_) => {
            totals.denied.fetch_add(1, Ordering::Relaxed);
        }
        Err(status) => {
            if faulting || shared.faulting.load(Ordering::SeqCst) {
                totals.errors_in_faults.fetch_add(1, Ordering::Relaxed);
            } else {
                totals.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("unexpected error: {status:?}");
            }
        }
    }
}

/// Calls at `rate` per second (open loop) until stopped.
async fn load(shared: Arc<Shared>, rate: f64) {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for n in 0u64.. {
        every.tick().await;
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(permit) = gate.clone().try_acquire_owned() else {
            shared.totals.shed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            one_call(&shared, (n as usize * 7) % KEYS, n).await;
            drop(permit);
        });
    }
    let _ = gate.acquire_many(IN_FLIGHT as u32).await;
}

/// Calls per second the server answers with 64 calls in flight, over `for_how_long`.
async fn saturated_rate(addr: SocketAddr, for_how_long: Duration) -> f64 {
    let calls = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + for_how_long;
    let mut workers = Vec::new();
    for w in 0..64 {
        let (calls, mut client) = (calls.clone(), connect(addr).await);
        workers.push(tokio::spawn(async move {
            while Instant::now() < until {
                let value = format!("warm-{w}");
                let _ = client
                    .should_rate_limit(one_descriptor("soak", &[("k", &value)]))
                    .await;
                calls.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    calls.load(Ordering::Relaxed) as f64 / for_how_long.as_secs_f64()
}

/// Resident memory of `pid` in KiB: the whole (`VmRSS`, which is judged), and its anonymous
/// (heap, stacks) and file-backed (the binary's pages, which the page cache can evict and
/// fault back under other processes' pressure) parts, printed so a swing can be told apart.
fn rss_kib(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

/// Marks a fault for its whole duration plus a second of settling.
async fn fault<T>(shared: &Shared, action: impl AsyncFnOnce() -> T) -> T {
    shared.faulting.store(true, Ordering::SeqCst);
    let out = action().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    shared.faulting.store(false, Ordering::SeqCst);
    out
}

/// The soak (see the module comment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: needs redis-server; scripts/soak runs it for longer"]
async fn soak() {
    let secs: u64 = std::env::var("SLUICE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let rules_dir = tempfile::tempdir().unwrap();
    let rules_file = rules_dir.path().join("rules.yaml");
    std::fs::write(&rules_file, rules(1_000_000, 0)).unwrap();
    // The model places a call that spans a window edge by its reset hint: milliseconds, not
    // the whole seconds (rounded up) that are the default.
    let url = redis.url();
    let args = [
        "--store",
        "redis",
        "--redis-url",
        &url,
        "--reset-precision",
        "milliseconds",
    ];
    let mut server: Sluice = Serve::new().config(rules_dir.path()).args(args).start();

    let (rate, limit) = calibrate(server.grpc_addr, &rules_file, secs).await;

    let shared = Arc::new(Shared {
        clients: Mutex::new(clients(server.grpc_addr).await),
        faulting: AtomicBool::new(false),
        model: Mutex::default(),
        totals: Totals::default(),
        stop: AtomicBool::new(false),
    });
    let load = tokio::spawn(load(shared.clone(), rate));
    let started = Instant::now();
    let mut rss: Vec<(u64, u64)> = Vec::new();
    let mut split: Vec<(u64, u64, u64)> = Vec::new();
    let (mut reloads, mut redis_restarts, mut kills) = (0, 0, 0);
    let mut second = 0u64;
    // SIGKILL restarts every 43 s, but at most four lives in a long run: memory must be seen
    // flat over long lives (a quarter of an hour in a 1-hour soak), not only over 43 seconds.
    let kill_every = (secs / 4).max(43);
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        second += 1;
        if second.is_multiple_of(SAMPLE_EVERY_SECS) {
            let (whole, anon, file) = rss_kib(server.pid());
            rss.push((second, whole));
            split.push((second, anon, file));
        }
        if second.is_multiple_of(17) {
            reloads += 1;
            std::fs::write(&rules_file, rules(limit, 2 + reloads)).unwrap();
        }
        if second.is_multiple_of(29) {
            redis_restarts += 1;
            fault(&shared, async || redis.restart()).await;
        }
        if second.is_multiple_of(kill_every) {
            kills += 1;
            server = fault(&shared, async || {
                server.kill();
                let server = server.restart(&args);
                let fresh = clients(server.grpc_addr).await;
                *shared.clients.lock() = fresh;
                server
            })
            .await;
            rss.push((second, 0));
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
    let _ = load.await;

    check_and_report(
        &shared,
        limit,
        &rss,
        &split,
        (reloads, redis_restarts, kills),
    );
}

/// Finds the rate the server saturates at and sets each key's limit (in `rules_file`) so that
/// half the calls of a load at half that rate are refused; the load's rate and the limit.
async fn calibrate(
    addr: std::net::SocketAddr,
    rules_file: &std::path::Path,
    secs: u64,
) -> (f64, u64) {
    let saturated = saturated_rate(addr, Duration::from_secs(5)).await;
    let rate = (saturated / 2.0).max(50.0);
    // Each key gets about twice its limit: half the calls are refused.
    let limit = ((rate / KEYS as f64) * (WINDOW_MS as f64 / 1000.0) / 2.0).max(1.0) as u64;
    std::fs::write(rules_file, rules(limit, 1)).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "saturated at {saturated:.0} calls/s; soaking {secs} s at {rate:.0}/s, limit {limit} per key per {WINDOW_MS} ms"
    );
    (rate, limit)
}

/// Prints what the soak did and checks it: no key-window over its limit, no error outside
/// the faults, both answers seen, memory flat; `faults` are the reloads, Redis restarts and
/// SIGKILL restarts.
fn check_and_report(
    shared: &Shared,
    limit: u64,
    rss: &[(u64, u64)],
    split: &[(u64, u64, u64)],
    (reloads, redis_restarts, kills): (u64, u64, u64),
) {
    let totals = &shared.totals;
    let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
    let (over, most) = shared.model.lock().check(limit);
    let windows = shared.model.lock().admitted.len();
    eprintln!(
        "soak: {} calls, {} admitted, {} refused, {} errors during faults, {} unexpected errors, {} shed; \
         {windows} key-windows checked, most admitted in one {most} (limit {limit}); \
         {reloads} reloads, {redis_restarts} Redis restarts, {kills} SIGKILL restarts",
        get(&totals.calls),
        get(&totals.admitted),
        get(&totals.denied),
        get(&totals.errors_in_faults),
        get(&totals.errors),
        get(&totals.shed),
    );
    eprintln!("RSS (s, KiB; 0 marks a restart): {rss:?}");
    eprintln!("RSS split (s, anonymous KiB, file-backed KiB): {split:?}");
    assert!(over.is_empty(), "over-admission:\n{}", over.join("\n"));
    assert_eq!(get(&totals.errors), 0, "errors outside the faults");
    assert!(get(&totals.admitted) > 0 && get(&totals.denied) > 0);
    for line in assert_flat(rss) {
        eprintln!("memory, {line}");
    }
}

/// Seconds between two memory samples.
const SAMPLE_EVERY_SECS: u64 = 10;

/// A process's first minute is its warm-up (allocator arenas, connection pools, the first
/// reloads): memory is judged after it.
const WARM_UP_SECS: u64 = 60;

/// Memory is judged by the minute: the mean of a whole minute's samples. One sample is a
/// snapshot that still counts the pages the allocator freed within the last second (mimalloc
/// hands them back a second later), and at the soak's rate that alone moves it by about 1 MiB
/// from one sample to the next; growth, which is what a leak is, shows in the minutes.
const JUDGED_SECS: u64 = 60;

/// Memory is flat: after each life's warm-up, every whole minute's mean resident set is within
/// ±10 % of its life's mean (a life needs three such minutes to be judged: lives of 43 s in a
/// short soak are not, those of a quarter of an hour in a 1-hour soak are), and within ±10 % of
/// the mean of every judged minute of the run (so memory that grows from one life to the next
/// fails too). Returns what it judged, one line per life, for the record.
fn assert_flat(rss: &[(u64, u64)]) -> Vec<String> {
    let lives = minute_means(rss);
    let mut record = Vec::new();
    for (life, minutes) in lives.iter().enumerate() {
        record.push(format!(
            "life {}: {}",
            life + 1,
            judge(minutes, "its life's", rss)
        ));
    }
    let run: Vec<f64> = lives.concat();
    record.push(format!("the run: {}", judge(&run, "the run's", rss)));
    record
}

/// Each life's whole minutes after its warm-up, as the mean of their samples (KiB).
fn minute_means(rss: &[(u64, u64)]) -> Vec<Vec<f64>> {
    let per_minute = (JUDGED_SECS / SAMPLE_EVERY_SECS) as usize;
    // Per life: each minute after the warm-up, with the sum and the count of its samples.
    let mut lives: Vec<Vec<(u64, u64, usize)>> = vec![Vec::new()];
    let mut born = 0;
    for &(second, kib) in rss {
        if kib == 0 {
            lives.push(Vec::new());
            born = second;
            continue;
        }
        if second < born + WARM_UP_SECS {
            continue;
        }
        let minute = (second - born - WARM_UP_SECS) / JUDGED_SECS;
        let life = lives.last_mut().expect("there is always a current life");
        match life.last_mut() {
            Some((at, sum, count)) if *at == minute => {
                *sum += kib;
                *count += 1;
            }
            _ => life.push((minute, kib, 1)),
        }
    }
    lives
        .into_iter()
        .map(|life| {
            life.into_iter()
                // A life's last minute is cut short by the restart or the end of the run.
                .filter(|&(_, _, count)| count == per_minute)
                .map(|(_, sum, count)| sum as f64 / count as f64)
                .collect()
        })
        .collect()
}

/// Asserts every minute mean within ±10 % of theirs; describes them.
fn judge(minutes: &[f64], of: &str, rss: &[(u64, u64)]) -> String {
    if minutes.len() < 3 {
        return format!("{} whole minutes, not judged", minutes.len());
    }
    let mean = minutes.iter().sum::<f64>() / minutes.len() as f64;
    let (low, high) = minutes
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &m| (l.min(m), h.max(m)));
    for &minute in minutes {
        let off = (minute - mean).abs() / mean;
        assert!(
            off <= 0.10,
            "a minute's mean RSS {minute:.0} KiB is {:.1} % off {of} mean {mean:.0} KiB: {rss:?}",
            off * 100.0
        );
    }
    format!(
        "{} minutes, means {low:.0}–{high:.0} KiB around {mean:.0} ({:+.1} % / {:+.1} %)",
        minutes.len(),
        (low / mean - 1.0) * 100.0,
        (high / mean - 1.0) * 100.0
    )
}

/// `secs` seconds of samples from `from`, every `SAMPLE_EVERY_SECS`, of `kib` each.
fn flat(from: u64, secs: u64, kib: u64) -> Vec<(u64, u64)> {
    (0..secs / SAMPLE_EVERY_SECS)
        .map(|i| (from + i * SAMPLE_EVERY_SECS, kib))
        .collect()
}

/// The memory check skips each life's first minute, judges whole minutes, and sees growth
/// within a life and from one life to the next, but not one sample's swing.
#[test]
fn memory_is_judged_by_the_minute_per_life_and_over_the_run() {
    // A low first minute, three flat minutes with one sample 25 % up; a restart; a second
    // flat life 5 % higher.
    let mut rss = flat(0, 60, 50);
    rss.extend(flat(60, 180, 100));
    rss[10].1 = 125;
    rss.push((240, 0));
    rss.extend(flat(240, 240, 105));
    let record = assert_flat(&rss);
    assert_eq!(record.len(), 3, "{record:?}");
    assert!(record[0].starts_with("life 1: 3 minutes"), "{record:?}");
    assert!(record[2].starts_with("the run: 6 minutes"), "{record:?}");

    // Growth within a life: 100, 100, 130.
    let mut growing = flat(60, 120, 100);
    growing.extend(flat(180, 60, 130));
    assert!(std::panic::catch_unwind(|| assert_flat(&growing)).is_err());

    // Growth from one life to the next, each flat: 100 then 130.
    let mut lives = flat(60, 180, 100);
    lives.push((240, 0));
    lives.extend(flat(300, 180, 130));
    assert!(std::panic::catch_unwind(|| assert_flat(&lives)).is_err());
}
