//! Many RLQS streams and buckets on the Redis store for minutes (issue 40, items 1 and 3): the
//! book and the replicas' claims once deadlocked here (each held its lock while waiting for
//! the other's), hanging every call and `/healthcheck` for good. A real binary, 50 raw streams
//! of 100 buckets each reporting every second, and RLS calls and health checks that must keep
//! being answered: a liveness bound, not a timing.
//!
//! `SLUICE_TEST_BIN=<an earlier build>` runs it against that build: it hung within seconds on
//! the release before the RLQS wing.

use std::time::{Duration, Instant};

use crate::common::process::{Serve, Sluice};
use crate::common::redis::RedisServer;
use crate::common::rlqs::{RlqsStream, bucket, usage};
use crate::common::{connect, one_descriptor, sample};

const RULES: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 50, algorithm: token_bucket, burst: 50 }
"#;

const STREAMS: usize = 50;
const BUCKETS: usize = 100;
/// How long the load runs (`SLUICE_RLQS_LOAD_SECONDS` to change it).
const RUN: Duration = Duration::from_secs(120);
/// The liveness bound of one call or health check.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// A stream reporting its 100 buckets every second, reading whatever it is told.
async fn reporter(sluice: &Sluice, n: usize, until: Instant) {
    let mut stream = RlqsStream::open(sluice.grpc_addr).await.expect("a stream");
    let ids: Vec<_> = (0..BUCKETS)
        .map(|b| bucket(&[("tenant", &format!("s{n}-b{b}"))]))
        .collect();
    let mut elapsed = 0;
    while Instant::now() < until {
        let usages = ids
            .iter()
            .map(|id| usage(id.clone(), elapsed, 40, 10))
            .collect();
        stream.send("quota", usages).await;
        stream.drain(Duration::from_secs(1)).await;
        elapsed = 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn many_streams_and_buckets_on_redis_never_hang() {
    let redis = RedisServer::start();
    let url = redis.url();
    let sluice = Serve::new()
        .rules(RULES)
        .args(["--store", "redis", "--redis-url", url.as_str()])
        .start();
    let run = std::env::var("SLUICE_RLQS_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(RUN, Duration::from_secs);
    let until = Instant::now() + run;
    let reporters: Vec<_> = (0..STREAMS)
        .map(|n| {
            let sluice = &sluice;
            async move { reporter(sluice, n, until).await }
        })
        .collect();
    let checks = async {
        let mut client = connect(sluice.grpc_addr).await;
        let mut checked = 0u32;
        while Instant::now() < until {
            let call = client.should_rate_limit(one_descriptor("other", &[("k", "v")]));
            let answered = tokio::time::timeout(ANSWER_WITHIN, call).await;
            assert!(
                matches!(answered, Ok(Ok(_))),
                "an RLS call was not answered within {ANSWER_WITHIN:?} after {checked} checks"
            );
            let health = crate::common::http(sluice.http_addr, "GET", "/healthcheck", "");
            let health = tokio::time::timeout(ANSWER_WITHIN, health).await;
            assert!(
                matches!(health, Ok((200, _))),
                "/healthcheck did not answer 200 within {ANSWER_WITHIN:?} after {checked} checks"
            );
            checked += 1;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        checked
    };
    let (_, checked) = tokio::join!(futures_util::future::join_all(reporters), checks);
    assert!(checked > 0);
    let metrics = crate::common::http(sluice.http_addr, "GET", "/metrics", "");
    let (_, metrics) = tokio::time::timeout(ANSWER_WITHIN, metrics)
        .await
        .expect("/metrics");
    // Every bucket reached the book (and was claimed in Redis).
    assert_eq!(
        sample(&metrics, "sluice_rlqs_buckets"),
        (STREAMS * BUCKETS) as f64,
        "{metrics}"
    );
    assert!(
        redis.dbsize() as usize >= STREAMS * BUCKETS,
        "claims reached Redis"
    );
}
