//! RLQS streams doing their worst against the real binary (issue 40): thousands of streams
//! that never say a word, domains of a megabyte or holding escapes, and SIGTERM with streams
//! open. Each judged by counts and statuses; the waits are generous liveness bounds.
//!
//! `SLUICE_TEST_BIN=<an earlier build>` runs them against it: each failed on the release
//! before the RLQS wing.

use crate::common;

use std::time::Duration;

use common::process::{Serve, Sluice};
use common::rlqs::{RlqsStream, bucket, channel, usage};
use common::sample;
use tonic::Code;

const RULES: &str = crate::common::rlqs::TEN_A_SECOND;

/// The default bound on a stream's first report (three report intervals), and the slack a
/// loaded machine gets past it.
const FIRST_REPORT_WITHIN: Duration = Duration::from_secs(15);
const SLACK: Duration = Duration::from_secs(30);

async fn metrics(sluice: &Sluice) -> String {
    let (status, body) = common::http(sluice.http_addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    body
}

/// A stream that reports and is answered: an Envoy.
async fn envoy(sluice: &Sluice, tenant: &str) -> RlqsStream {
    let mut stream = RlqsStream::open(sluice.grpc_addr).await.expect("a place");
    let id = bucket(&[("tenant", tenant)]);
    stream.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    stream.until(&[&id]).await;
    stream
}

/// Issue 40, item 5: 10,000 streams opened and never written to. At most 1,000 wait at once
/// (each new one past that ends the oldest waiting), they are counted from their opening, and
/// they are ended once the bound on a first report has passed; an Envoy, which reports at
/// once, is served meanwhile. They used to hold every place for good (the Envoy was refused)
/// and were not counted at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_streams_are_counted_ended_and_lock_no_envoy_out() {
    let sluice = Serve::new().rules(RULES).start();
    let mut silent = Vec::new();
    for _ in 0..10 {
        let connection = channel(sluice.grpc_addr).await;
        let opened = (0..1_000).map(|_| RlqsStream::open_on(connection.clone()));
        for stream in futures_util::future::join_all(opened).await {
            silent.push(stream.expect("opened"));
        }
    }
    let mut envoy = envoy(&sluice, "acme").await;
    common::eventually(
        Duration::from_secs(10),
        "every open stream counted",
        async || {
            let body = metrics(&sluice).await;
            let waiting = sample(&body, "sluice_rlqs_streams_unbound");
            (500.0..=1_000.0).contains(&waiting)
                && sample(&body, "sluice_rlqs_streams") == waiting + 1.0
        },
    )
    .await;
    // Every silent stream ends, saying why; the Envoy's stays.
    let wait = FIRST_REPORT_WITHIN + SLACK;
    let ended = silent.iter_mut().map(|s| s.try_next_within(wait));
    let (mut crowded_out, mut timed_out) = (0, 0);
    for ended in futures_util::future::join_all(ended).await {
        let status = ended.expect_err("ended with a status");
        match status.code() {
            Code::ResourceExhausted => crowded_out += 1,
            Code::DeadlineExceeded => timed_out += 1,
            _ => panic!("{status:?}"),
        }
    }
    assert!(
        timed_out <= 1_000 && crowded_out >= 9_000,
        "{crowded_out} + {timed_out}"
    );
    common::eventually(Duration::from_secs(5), "the gauges follow", async || {
        let body = metrics(&sluice).await;
        sample(&body, "sluice_rlqs_streams") == 1.0
            && sample(&body, "sluice_rlqs_streams_unbound") == 0.0
    })
    .await;
    let id = bucket(&[("tenant", "acme")]);
    envoy.send("quota", vec![usage(id.clone(), 5, 3, 0)]).await;
    envoy.until(&[&id]).await;
}

/// Issue 40, item 8: an RLQS domain is at most 1,024 bytes (as an RLS call's) and holds no
/// control character (it reaches logs, labels and the page); 40 streams with 1 MiB domains
/// leave `/metrics` small.
#[tokio::test]
async fn domains_are_bounded_and_plain() {
    let sluice = Serve::new().rules(RULES).start();
    let id = bucket(&[("tenant", "a")]);
    let refused = async |domain: String| {
        let mut stream = RlqsStream::open(sluice.grpc_addr).await.expect("a place");
        stream.send(&domain, vec![usage(id.clone(), 0, 1, 0)]).await;
        stream.try_next().await.expect_err("refused")
    };
    let status = refused("d".repeat(1_025)).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("1024"), "{status:?}");
    let status = refused("edge\n\u{1b}[31mforged".to_string()).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(!status.message().contains('\u{1b}'), "{status:?}");
    for _ in 0..40 {
        refused("x".repeat(1 << 20)).await;
    }
    let mut fits = RlqsStream::open(sluice.grpc_addr).await.expect("a place");
    fits.send(&"d".repeat(1_024), vec![usage(id.clone(), 0, 1, 0)])
        .await;
    fits.until(&[&id]).await;
    let body = metrics(&sluice).await;
    assert!(body.len() < 256 * 1024, "/metrics is {} bytes", body.len());
    assert!(
        !sluice.log().contains('\u{1b}'),
        "an escape reached the log"
    );
}

/// Issue 40, item 13: SIGTERM with RLQS streams open ends them at once (each told
/// `UNAVAILABLE`, so its Envoy reconnects elsewhere) and the process exits long before its
/// grace period; it used to wait all of it.
#[tokio::test]
async fn sigterm_ends_open_streams_at_once() {
    let mut sluice = Serve::new()
        .rules(RULES)
        .args(["--shutdown-grace", "60s"])
        .start();
    let mut streams = Vec::new();
    for tenant in ["a", "b", "c"] {
        streams.push(envoy(&sluice, tenant).await);
    }
    sluice.terminate();
    for stream in &mut streams {
        let status = stream.try_next_within(SLACK).await.expect_err("ended");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    }
    let status = sluice.exited_within(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit 0 well within the 60 s grace: {status:?}"
    );
}
