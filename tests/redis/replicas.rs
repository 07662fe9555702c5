//! Several `sluice serve` processes on one Redis enforce one limit together: many concurrent
//! clients split across them on one key get exactly the limit (sliding_log, token_bucket),
//! within the documented bound (sliding_window), or with a `lease:` never more than the limit
//! and at most N − 1 fewer per replica, most calls answered without Redis.

use std::time::{Duration, Instant};

use crate::common::process::Sluice;
use crate::common::redis::RedisServer;
use crate::common::{OK, call, connect, one_descriptor};

/// Windows of an hour: nothing refills or slides noticeably while the test runs.
const RULES: &str = "\
domain: replicas
descriptors:
  - key: log
    rate_limit: { unit: hour, requests_per_unit: 60, algorithm: sliding_log }
  - key: bucket
    rate_limit: { unit: hour, requests_per_unit: 60, algorithm: token_bucket }
  - key: sliding
    rate_limit: { unit: hour, requests_per_unit: 60, algorithm: sliding_window }
  - key: leased
    rate_limit: { unit: hour, requests_per_unit: 200, algorithm: fixed_window, lease: 10 }
";

/// Sends `calls` calls on one key from `clients` concurrent clients spread round-robin
/// over `replicas`; returns how many were admitted.
async fn admitted(replicas: &[Sluice], key: &str, clients: usize, calls: usize) -> usize {
    let mut tasks = Vec::new();
    for c in 0..clients {
        let addr = replicas[c % replicas.len()].grpc_addr;
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut client = connect(addr).await;
            let mut ok = 0;
            for _ in 0..calls / clients {
                let r = call(&mut client, one_descriptor("replicas", &[(&key, "shared")])).await;
                ok += usize::from(r.overall_code == OK);
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("client task");
    }
    total
}

async fn exact_across(replica_count: usize) {
    let redis = RedisServer::start();
    let url = redis.url();
    let replicas: Vec<Sluice> = (0..replica_count)
        .map(|_| {
            Sluice::start(
                RULES,
                &[
                    "--store",
                    "redis",
                    "--redis-url",
                    &url,
                    "--redis-timeout",
                    "1s",
                ],
            )
        })
        .collect();
    for key in ["log", "bucket"] {
        let n = admitted(&replicas, key, 12, 240).await;
        assert_eq!(
            n, 60,
            "{key}: exactly the limit across {replica_count} replicas"
        );
    }
    let started = Instant::now();
    let n = admitted(&replicas, "sliding", 12, 240).await;
    // N * (1 + d / W) with d the time the test took and W an hour.
    let bound = 60.0 * (1.0 + started.elapsed().as_secs_f64() / 3600.0);
    assert!(
        n as f64 <= bound.floor() && n >= 1,
        "sliding: {n} admitted, bound {bound}"
    );
    // Leased: 400 calls on a limit of 200, leases of 10 (at most 9 held unused per replica).
    let n = admitted(&replicas, "leased", 12, 396).await;
    let floor = 200 - replica_count * 9;
    assert!(
        (floor..=200).contains(&n),
        "leased: {n} admitted, expected {floor}..=200"
    );
    // The store's figures are published once a second.
    let answered = || -> f64 {
        replicas
            .iter()
            .map(|r| {
                let metrics = crate::common::http1::get(r.http_addr, "/metrics", &[]).body;
                metrics
                    .lines()
                    .find(|l| l.starts_with("sluice_lease_answered_total{backend=\"redis\"}"))
                    .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0.0)
            })
            .sum()
    };
    crate::common::process::poll(
        Duration::from_secs(10),
        "calls answered from leases",
        || (answered() >= 100.0).then_some(()),
    );
    for replica in &replicas {
        assert!(!replica.log().contains("panicked"), "{}", replica.log());
    }
}

/// Two replicas, one Redis: exactly the limit.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn two_replicas_admit_exactly_the_limit() {
    exact_across(2).await;
}

/// Three replicas, one Redis: exactly the limit.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn three_replicas_admit_exactly_the_limit() {
    exact_across(3).await;
}
