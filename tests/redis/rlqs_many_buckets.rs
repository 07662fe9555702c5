//! What 100,000 live RLQS buckets on three replicas cost Redis (issue 41, item 4): a real Redis,
//! three release servers on it, 1,000 raw streams (a third on each replica) each reporting 100
//! tenants of its own every 5 s; over 30 s, Redis's own CPU (`INFO cpu`) and script runs (`INFO
//! commandstats`) for the replicas' claims, and each replica's resident memory a bucket. The run
//! fails, printing no figure, unless the work happened. Run it on a release build:
//!
//! ```sh
//! cargo build --release && SLUICE_TEST_BIN=target/release/sluice \
//!   cargo test --release --test redis rlqs_many_buckets -- --ignored --nocapture
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::process::{Serve, Sluice};
use crate::common::redis::RedisServer;
use crate::common::rlqs::{RlqsStream, bucket, channel, usage};
use crate::common::sample;

/// An enforced limit for each tenant, far above what a tenant reports (10 a second), so no
/// bucket's portion has a reason to move: the cost measured is that of buckets at rest.
const RULES: &str = crate::common::rlqs::HUNDRED_A_SECOND;

const REPLICAS: usize = 3;
/// A debug build (`scripts/test`) runs a tenth of the streams: a check that the measurement
/// works, not a figure.
const STREAMS: usize = if cfg!(debug_assertions) { 100 } else { 1_000 };
/// Tenants (buckets) of its own each stream reports.
const PER_STREAM: usize = 100;
const BUCKETS: usize = STREAMS * PER_STREAM;
/// HTTP/2 connections to each replica, its streams spread over them.
const CONNECTIONS: usize = 10;
const EVERY: Duration = Duration::from_secs(5);
/// How long Redis is watched.
const SPAN: Duration = Duration::from_secs(30);
/// Requests allowed a bucket in each report (denied: a quarter of it).
const ALLOWED: u64 = 40;

/// Resident memory of a process, from `/proc/<pid>/status`.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// A numeric field of `INFO` (`name:value` lines).
fn info_field(info: &str, name: &str) -> f64 {
    (info.lines())
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in INFO: {info}"))
}

/// What Redis reports of itself at one instant.
struct RedisStats {
    /// CPU seconds, user and system.
    cpu: f64,
    /// Script runs (`EVALSHA` and `EVAL`) and their µs.
    runs: u64,
    runs_usec: u64,
    /// Every command's calls.
    commands: u64,
    used_memory: f64,
    at: Instant,
}

fn redis_stats(redis: &RedisServer) -> RedisStats {
    let cpu = redis.cli(&["INFO", "cpu"]);
    let stats = redis.cli(&["INFO", "commandstats"]);
    let memory = redis.cli(&["INFO", "memory"]);
    let (mut runs, mut runs_usec, mut commands) = (0, 0, 0);
    for line in stats.lines().map(str::trim) {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| -> u64 {
            (fields.split(','))
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        commands += field("calls");
        if name == "evalsha" || name == "eval" {
            runs += field("calls");
            runs_usec += field("usec");
        }
    }
    RedisStats {
        cpu: info_field(&cpu, "used_cpu_sys") + info_field(&cpu, "used_cpu_user"),
        runs,
        runs_usec,
        commands,
        used_memory: info_field(&memory, "used_memory"),
        at: Instant::now(),
    }
}

async fn metrics(sluice: &Sluice) -> String {
    crate::common::http(sluice.http_addr, "GET", "/metrics", "")
        .await
        .1
}

/// The sum of every sample of `family` whose labels contain `label`.
fn sum_of(metrics: &str, family: &str, label: &str) -> f64 {
    (metrics.lines())
        .filter(|l| l.starts_with(family) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Buckets held, over every replica.
async fn buckets_held(replicas: &[Sluice]) -> f64 {
    let mut held = 0.0;
    for sluice in replicas {
        held += sample(&metrics(sluice).await, "sluice_rlqs_buckets");
    }
    held
}

/// Requests reported allowed, as the replicas counted them.
async fn reported_allowed(replicas: &[Sluice]) -> f64 {
    let mut allowed = 0.0;
    for sluice in replicas {
        let text = metrics(sluice).await;
        allowed += sum_of(&text, "sluice_rlqs_reported_total{", "outcome=\"allowed\"");
    }
    allowed
}

/// One stream on `channel` reporting its 100 tenants every 5 s, the first report after
/// `delay` (so reports spread over the interval, as a fleet's do), until `stop`.
async fn reporter(
    channel: tonic::transport::Channel,
    n: usize,
    delay: Duration,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) {
    let ids: Vec<_> = (0..PER_STREAM)
        .map(|b| bucket(&[("tenant", &format!("s{n}-b{b}"))]))
        .collect();
    tokio::time::sleep(delay).await;
    let mut stream = RlqsStream::open_on(channel).await.expect("a stream");
    let mut elapsed = 0;
    while !stop.load(Ordering::Relaxed) {
        let usages = (ids.iter())
            .map(|id| usage(id.clone(), elapsed, ALLOWED, ALLOWED / 4))
            .collect();
        if !stream.try_send("quota", usages).await {
            return;
        }
        sent.fetch_add(1, Ordering::Relaxed);
        stream.drain(EVERY).await;
        elapsed = 5;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of a few minutes (run it on a release build, see the module)"]
async fn what_many_buckets_cost_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let replicas: Vec<Sluice> = (0..REPLICAS)
        .map(|_| {
            let args = ["--store", "redis", "--redis-url", url.as_str()];
            Serve::new().rules(RULES).args(args).start()
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle: Vec<u64> = replicas.iter().map(|s| rss(s.pid())).collect();
    let redis_idle = redis_stats(&redis);

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut channels = Vec::new();
    for sluice in &replicas {
        let mut mine = Vec::new();
        for _ in 0..CONNECTIONS {
            mine.push(channel(sluice.grpc_addr).await);
        }
        channels.push(mine);
    }
    let tasks: Vec<_> = (0..STREAMS)
        .map(|n| {
            let channel = channels[n % REPLICAS][(n / REPLICAS) % CONNECTIONS].clone();
            let delay = EVERY * n as u32 / STREAMS as u32;
            tokio::spawn(reporter(channel, n, delay, stop.clone(), sent.clone()))
        })
        .collect();
    // A liveness bound: the replicas take in every new bucket and claim each in Redis.
    crate::common::eventually(
        Duration::from_secs(180),
        "every bucket held over the three replicas",
        async || buckets_held(&replicas).await == BUCKETS as f64,
    )
    .await;
    // One interval more, so every bucket has been claimed and re-reported at rest.
    tokio::time::sleep(EVERY).await;

    let before = redis_stats(&redis);
    let (sent0, allowed0) = (
        sent.load(Ordering::Relaxed),
        reported_allowed(&replicas).await,
    );
    tokio::time::sleep(SPAN).await;
    let after = redis_stats(&redis);
    let (sent1, allowed1) = (
        sent.load(Ordering::Relaxed),
        reported_allowed(&replicas).await,
    );
    let held = buckets_held(&replicas).await;
    let full: Vec<u64> = replicas.iter().map(|s| rss(s.pid())).collect();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("no reporter failed");
    }

    // The work happened: every bucket still held, the reports counted, the claims run.
    assert_eq!(held, BUCKETS as f64, "buckets held at the end of the span");
    let reports = sent1 - sent0;
    let expected = (STREAMS as f64 * SPAN.as_secs_f64() / EVERY.as_secs_f64()) as u64;
    assert!(
        reports * 10 >= expected * 9,
        "{reports} reports of {expected}"
    );
    let counted = (allowed1 - allowed0) / (ALLOWED * PER_STREAM as u64) as f64;
    assert!(
        counted >= reports as f64 * 0.9,
        "the replicas counted {counted:.0} reports of {reports} sent"
    );
    let runs = after.runs - before.runs;
    assert!(runs > 0, "no claim ran in Redis in the span");

    let wall = (after.at - before.at).as_secs_f64();
    let cores = (after.cpu - before.cpu) / wall;
    let runs_a_second = runs as f64 / wall;
    let usec_a_run = (after.runs_usec - before.runs_usec) as f64 / runs as f64;
    let commands_a_second = (after.commands - before.commands) as f64 / wall;
    let per_replica = BUCKETS as f64 / REPLICAS as f64;
    let per_bucket: Vec<String> = (idle.iter().zip(&full))
        .map(|(idle, full)| format!("{:.0}", full.saturating_sub(*idle) as f64 / per_replica))
        .collect();
    let redis_per_bucket = (after.used_memory - redis_idle.used_memory) / BUCKETS as f64;
    eprintln!(
        "{BUCKETS} live buckets on three replicas: Redis {cores:.3} cores; \
         {runs_a_second:.0} script runs/s ({commands_a_second:.0} commands/s in all), \
         {usec_a_run:.0} µs a run ({:.2} µs of script a bucket a second); \
         resident memory a bucket on each replica {} B (its streams included), \
         Redis {redis_per_bucket:.0} B a bucket; {reports} reports in {wall:.1} s",
        usec_a_run * runs_a_second / BUCKETS as f64,
        per_bucket.join(" / "),
    );
}
