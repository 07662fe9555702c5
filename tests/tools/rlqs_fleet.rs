//! What a fleet of real RLQS streams costs the server (issue 41, items 1 and 6): 10,000 raw
//! gRPC streams (100 connections of 100) share one bucket, each reporting every 5 s as Envoy
//! 1.40 does; then each also reports 10 buckets of its own. From the server's `/proc`: the CPU
//! it spends a report, its memory a stream and a (stream, bucket). The run fails, printing no
//! figure, unless the work happened (every stream held, every bucket held, the reports counted).
//! Run it on a release build:
//!
//! ```sh
//! cargo build --release && SLUICE_TEST_BIN=target/release/sluice \
//!   cargo test --release --test tools rlqs_fleet -- --ignored --nocapture
//! ```

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::process::{Serve, Sluice, temp_dir};
use common::rlqs::{RlqsStream, bucket, channel, usage};
use common::sample;

const RULES: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100000 }
"#;

/// A debug build (`scripts/test`) runs a tenth of the fleet: a check that the measurement
/// works, not a figure.
const CONNECTIONS: usize = if cfg!(debug_assertions) { 10 } else { 100 };
const PER_CONNECTION: usize = 100;
const STREAMS: usize = CONNECTIONS * PER_CONNECTION;
/// Buckets of its own each stream reports in the second phase.
const OWN: usize = 10;
const EVERY: Duration = Duration::from_secs(5);
/// How long CPU is measured in each phase.
const SPAN: Duration = Duration::from_secs(20);

/// The server's CPU time (user + system) and resident memory, from `/proc`.
fn usage_of(pid: u32) -> (Duration, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap().split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let rss_kib: u64 = (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    // The kernel's USER_HZ is 100 on Linux.
    (Duration::from_millis(ticks * 10), rss_kib * 1024)
}

/// One stream on `channel` reporting the shared bucket (and `own` buckets of its own once
/// `more` is set) every 5 s, opened and its first report sent after `delay` (a stream awaiting
/// its first report holds one of 1,000 places), until `stop`.
async fn reporter(
    channel: tonic::transport::Channel,
    n: usize,
    delay: Duration,
    (more, stop): (Arc<AtomicBool>, Arc<AtomicBool>),
    sent: Arc<AtomicU64>,
) {
    let shared = bucket(&[("tenant", "shared")]);
    let own: Vec<_> = (0..OWN)
        .map(|b| bucket(&[("tenant", &format!("s{n}-b{b}"))]))
        .collect();
    tokio::time::sleep(delay).await;
    let mut stream = RlqsStream::open_on(channel).await.expect("a stream");
    let mut elapsed = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut usages = vec![usage(shared.clone(), elapsed, 40, 10)];
        if more.load(Ordering::Relaxed) {
            usages.extend(own.iter().map(|id| usage(id.clone(), elapsed, 4, 1)));
        }
        if !stream.try_send("quota", usages).await {
            return;
        }
        sent.fetch_add(1, Ordering::Relaxed);
        stream.drain(EVERY).await;
        elapsed = 5;
    }
}

async fn metrics(sluice: &Sluice) -> String {
    common::http(sluice.http_addr, "GET", "/metrics", "")
        .await
        .1
}

/// CPU a report over `SPAN`: (reports sent, server CPU, µs a report).
async fn measure(sluice: &Sluice, sent: &AtomicU64) -> (u64, Duration, f64) {
    let (cpu0, _) = usage_of(sluice.pid());
    let sent0 = sent.load(Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(SPAN).await;
    let (cpu1, _) = usage_of(sluice.pid());
    let reports = sent.load(Ordering::Relaxed) - sent0;
    let cpu = cpu1 - cpu0;
    let per = cpu.as_secs_f64() * 1e6 / reports.max(1) as f64;
    eprintln!(
        "{reports} reports in {:.1} s, server CPU {:.2} s",
        started.elapsed().as_secs_f64(),
        cpu.as_secs_f64()
    );
    (reports, cpu, per)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of a few minutes (run it on a release build, see the module)"]
async fn what_ten_thousand_streams_cost() {
    let rules = temp_dir(&[("quota.yaml", RULES)]);
    let sluice = Serve::new()
        .config(rules.path())
        .args(["--rlqs-max-streams", "10000"])
        .start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, idle) = usage_of(sluice.pid());
    let (more, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let channel = channel(sluice.grpc_addr).await;
        for s in 0..PER_CONNECTION {
            let n = c * PER_CONNECTION + s;
            let delay = EVERY * n as u32 / STREAMS as u32;
            let flags = (more.clone(), stop.clone());
            let channel = channel.clone();
            tasks.push(tokio::spawn(reporter(
                channel,
                n,
                delay,
                flags,
                sent.clone(),
            )));
        }
    }
    common::eventually(Duration::from_secs(120), "every stream held", async || {
        sample(&metrics(&sluice).await, "sluice_rlqs_streams") == STREAMS as f64
    })
    .await;
    tokio::time::sleep(EVERY).await;
    let (one_reports, _, one_per) = measure(&sluice, &sent).await;
    let (_, streams_rss) = usage_of(sluice.pid());
    more.store(true, Ordering::Relaxed);
    let buckets = (STREAMS * OWN + 1) as f64;
    common::eventually(Duration::from_secs(120), "every bucket held", async || {
        sample(&metrics(&sluice).await, "sluice_rlqs_buckets") == buckets
    })
    .await;
    tokio::time::sleep(EVERY).await;
    let (more_reports, _, more_per) = measure(&sluice, &sent).await;
    let (_, buckets_rss) = usage_of(sluice.pid());
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("no reporter failed");
    }
    // Every stream reported about every 5 s in each span.
    let expected = (STREAMS as f64 * SPAN.as_secs_f64() / EVERY.as_secs_f64()) as u64;
    assert!(
        one_reports * 10 >= expected * 9,
        "{one_reports} of {expected}"
    );
    assert!(
        more_reports * 10 >= expected * 9,
        "{more_reports} of {expected}"
    );
    let per_stream = streams_rss.saturating_sub(idle) as f64 / STREAMS as f64;
    let per_pair = buckets_rss.saturating_sub(streams_rss) as f64 / (STREAMS * OWN) as f64;
    eprintln!(
        "{STREAMS} streams on one bucket: {one_per:.1} µs of server CPU a report; \
         with 10 own buckets each (11 a report): {more_per:.1} µs a report; \
         memory {per_stream:.0} B a stream (resident, idle server {} MiB), \
         {per_pair:.0} B a (stream, bucket)",
        idle / (1 << 20)
    );
}
