//! Restarts of the real binary on one `--data-dir`: SIGTERM loses nothing, SIGKILL loses at
//! most the last flush interval, a damaged journal tail is skipped, expired windows stay gone.

use crate::common;

use std::time::{Duration, Instant};

use common::process::{Serve, Sluice};
use common::*;
use sluice::proto::RateLimitResponse;

const RULES: &str = r#"
domain: test
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: sliding_log }
  - key: brief
    rate_limit: { window: 1s, requests_per_unit: 2, algorithm: sliding_log }
"#;

/// One call on `key=value` to the server.
async fn hit(server: &Sluice, key: &str, value: &str) -> RateLimitResponse {
    let mut client = connect(server.grpc_addr).await;
    call(&mut client, one_descriptor("test", &[(key, value)])).await
}

/// Calls `key=value` until refused; returns how many were admitted and the refusal.
async fn exhaust(server: &Sluice, key: &str, value: &str) -> (usize, RateLimitResponse) {
    for admitted in 0..100 {
        let response = hit(server, key, value).await;
        if response.overall_code == OVER {
            return (admitted, response);
        }
    }
    panic!("{key}={value} was never refused");
}

/// A metric sample of the running server.
async fn metric(server: &Sluice, series: &str) -> f64 {
    let (status, body) = http(server.http_addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    sample(&body, series)
}

/// Waits until two more journal flushes have completed: the second started after now, so
/// everything admitted before this call is on disk.
async fn two_flushes(server: &Sluice) {
    let flushes = "sluice_persist_flushes_total";
    let start = metric(server, flushes).await;
    let flushed = within(Duration::from_secs(10), async || {
        metric(server, flushes).await >= start + 2.0
    })
    .await;
    assert!(flushed, "the journal was not flushed: {}", server.log());
}

/// The refusal's retry hint after a restart is the one before it, less the time between.
fn assert_same_hint(before: &RateLimitResponse, after: &RateLimitResponse, between: Duration) {
    let (before, after) = (reset_ms(before, 0), reset_ms(after, 0));
    let slack = between.as_millis() as u64 + 1_000;
    assert!(
        after <= before && after + slack >= before,
        "hint {after} ms after the restart, {before} ms before"
    );
}

/// SIGTERM, then a restart: the next call is OVER_LIMIT with the right retry hint.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_then_restart_keeps_the_count() {
    let mut server = Sluice::start(RULES, &[]);
    let (admitted, before) = exhaust(&server, "user", "alice").await;
    assert_eq!(admitted, 3);
    let stopped = Instant::now();
    assert_eq!(server.stop().code(), Some(0));
    let server = server.restart(&[]);
    let after = hit(&server, "user", "alice").await;
    assert_eq!(after.overall_code, OVER, "{}", server.log());
    assert_same_hint(&before, &after, stopped.elapsed());
    let retry_after = header(&after, "retry-after").expect("Retry-After");
    assert_eq!(retry_after, reset_ms(&after, 0).div_ceil(1_000).to_string());
    assert_eq!(hit(&server, "user", "bob").await.overall_code, OK);
}

/// SIGKILL after one flush interval: the admitted calls were on disk, the count survives.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_after_a_flush_keeps_the_count() {
    let mut server = Sluice::start(RULES, &["--persist-interval", "50ms"]);
    let (admitted, before) = exhaust(&server, "user", "alice").await;
    assert_eq!(admitted, 3);
    two_flushes(&server).await;
    let killed = Instant::now();
    server.kill();
    let server = server.restart(&[]);
    let after = hit(&server, "user", "alice").await;
    assert_eq!(after.overall_code, OVER, "{}", server.log());
    assert_same_hint(&before, &after, killed.elapsed());
}

/// A corrupt journal tail: the server still starts, says so, and keeps the intact records.
#[tokio::test(flavor = "multi_thread")]
async fn corrupt_journal_tail_keeps_intact_records() {
    let mut server = Sluice::start(RULES, &[]);
    assert_eq!(exhaust(&server, "user", "kept").await.0, 3);
    two_flushes(&server).await;
    assert_eq!(exhaust(&server, "user", "lost").await.0, 3);
    assert_eq!(server.stop().code(), Some(0));

    let mut journals: Vec<_> = std::fs::read_dir(server.data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    journals.sort();
    let journal = journals.last().expect("a journal");
    let mut bytes = std::fs::read(journal).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0xff;
    bytes.extend_from_slice(b"\x40\x00\x00\x00 a torn write");
    std::fs::write(journal, bytes).unwrap();

    let server = server.restart(&[]);
    assert_eq!(
        hit(&server, "user", "kept").await.overall_code,
        OVER,
        "{}",
        server.log()
    );
    assert_eq!(
        hit(&server, "user", "lost").await.overall_code,
        OK,
        "{}",
        server.log()
    );
    let log = server.log();
    assert!(log.contains("checksum mismatch"), "{log}");
}

/// Windows that passed while the server was down are not restored; live ones are.
#[tokio::test(flavor = "multi_thread")]
async fn expired_windows_are_not_resurrected() {
    let mut server = Sluice::start(RULES, &[]);
    assert_eq!(exhaust(&server, "brief", "x").await.0, 2);
    assert_eq!(exhaust(&server, "user", "x").await.0, 3);
    assert_eq!(server.stop().code(), Some(0));
    // The 1 s window is surely over after this; the hour is not.
    std::thread::sleep(Duration::from_millis(1_500));
    let server = server.restart(&[]);
    assert_eq!(
        metric(&server, "sluice_persist_restored_counters").await,
        1.0
    );
    assert_eq!(exhaust(&server, "brief", "x").await.0, 2);
    assert_eq!(hit(&server, "user", "x").await.overall_code, OVER);
}

/// A second server on a data directory in use refuses to start and says why.
#[test]
fn data_dir_in_use_is_refused() {
    let server = Sluice::start(RULES, &[]);
    let out = Serve::new()
        .config(server.rules_dir())
        .data_dir(server.data_dir())
        .output();
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("in use by another sluice"),
        "{}",
        out.stderr
    );
}
