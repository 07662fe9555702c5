//! The embedded store's promises, in process: restarts keep counters, memory follows the
//! active keys (and `--max-counters` bounds it), hot keys shard and do not slow other keys.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use sluice::algorithm::Algorithm;
use sluice::clock::{Clock, SECOND};
use sluice::store::{Charge, Gate, MemoryOptions, MemoryStore, PersistSettings, PersistentStore};

const RULES: &str = r#"
domain: test
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: sliding_log }
  - key: tenant
    shards: 4
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: fixed_window }
  - key: bucket
    shards: 4
    rate_limit: { unit: hour, requests_per_unit: 10, algorithm: token_bucket, burst: 10 }
"#;

/// One call on `key=value`: whether it was admitted.
async fn admitted(client: &mut Client, key: &str, value: &str) -> bool {
    let response = call(client, one_descriptor("test", &[(key, value)])).await;
    response.overall_code == OK
}

/// Polls `/metrics` until `series` satisfies `done`, for up to 10 s.
async fn wait_for_sample(server: &TestServer, series: &str, done: impl Fn(f64) -> bool) {
    let reached = within(Duration::from_secs(10), async || {
        done(sample(&server.metrics().await, series))
    })
    .await;
    assert!(
        reached,
        "{series} never got there: {}",
        server.metrics().await
    );
}

/// A restart on the same data directory keeps the counters: the next call is over the limit
/// with the same retry hint.
#[tokio::test(flavor = "multi_thread")]
async fn restart_keeps_counters() {
    let data = tempfile::tempdir().unwrap();
    let open = |now| {
        let settings = PersistSettings::new(data.path());
        Arc::new(PersistentStore::open(settings, MemoryOptions::default(), now).unwrap())
    };
    let server = TestServer::start_on(RULES, open(START)).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        assert!(admitted(&mut client, "user", "alice").await);
    }
    let denied = call(&mut client, one_descriptor("test", &[("user", "alice")])).await;
    assert_eq!(denied.overall_code, OVER);
    server.stop().await;

    let server = TestServer::start_on(RULES, open(START + 60 * SECOND)).await;
    server.clock.set(START + 60 * SECOND);
    let mut client = server.client().await;
    let again = call(&mut client, one_descriptor("test", &[("user", "alice")])).await;
    assert_eq!(again.overall_code, OVER);
    assert_eq!(reset_ms(&again, 0), reset_ms(&denied, 0) - 60_000);
    assert!(
        admitted(&mut client, "user", "bob").await,
        "other keys are fresh"
    );
    server.stop().await;
}

/// `shards: 4` with a limit of 100: exactly 100 calls are admitted in the window across the
/// sub-counters, however many are sent; a split token bucket admits exactly its burst.
#[tokio::test(flavor = "multi_thread")]
async fn sharded_rule_admits_exactly_the_limit() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let mut tenant = 0;
    for _ in 0..600 {
        tenant += usize::from(admitted(&mut client, "tenant", "acme").await);
    }
    assert_eq!(tenant, 100);
    let mut bucket = 0;
    for _ in 0..200 {
        bucket += usize::from(admitted(&mut client, "bucket", "acme").await);
    }
    assert_eq!(bucket, 10);
    server.stop().await;
}

/// Two tasks hammer one hot key while another walks distinct keys: every distinct key is
/// admitted exactly its limit, with exact remaining counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_key_does_not_disturb_other_keys() {
    let server = TestServer::start(RULES).await;
    let hammers: Vec<_> = (0..2)
        .map(|_| {
            let addr = server.grpc_addr;
            tokio::spawn(async move {
                let mut client = connect(addr).await;
                let mut admitted_hot = 0;
                for _ in 0..400 {
                    admitted_hot += usize::from(admitted(&mut client, "user", "hot").await);
                }
                admitted_hot
            })
        })
        .collect();
    let mut client = server.client().await;
    for i in 0..100 {
        let user = format!("cold-{i}");
        for left in [2, 1, 0] {
            let response = call(&mut client, one_descriptor("test", &[("user", &user)])).await;
            assert_eq!(response.overall_code, OK, "{user}");
            assert_eq!(response.statuses[0].limit_remaining, left, "{user}");
        }
        assert!(!admitted(&mut client, "user", &user).await, "{user}");
    }
    let mut hot = 0;
    for hammer in hammers {
        hot += hammer.await.unwrap();
    }
    assert_eq!(hot, 3, "the hot key is exact too");
    server.stop().await;
}

/// A charge on a distinct counter, as a rule with a one-minute fixed window would make.
fn distinct(i: u64) -> Charge {
    let limit = limit(Algorithm::FixedWindow, 10, 60 * SECOND);
    charge("test", ("ip", &i.to_string()), limit, 1, Gate::Enforced)
}

/// A million distinct keys, then idleness: the counter count (the `sluice_active_counters`
/// gauge) returns to zero and the tables give their memory back. The keys go straight into
/// the server's store to keep the test fast; the sweep and the gauge are the server's own.
#[tokio::test(flavor = "multi_thread")]
async fn million_keys_are_reclaimed_when_idle() {
    let store = Arc::new(MemoryStore::with_options(MemoryOptions {
        max_counters: 2_000_000,
        ..MemoryOptions::default()
    }));
    let server = TestServer::start_on(RULES, store.clone()).await;
    let now = server.clock.now();
    std::thread::scope(|scope| {
        for part in 0..2u64 {
            let store = &store;
            scope.spawn(move || {
                for i in (part * 500_000)..((part + 1) * 500_000) {
                    assert!(store.apply_now(&[distinct(i)], now)[0].verdict.admitted);
                }
            });
        }
    });
    let gauge = r#"sluice_active_counters{backend="memory"}"#;
    wait_for_sample(&server, gauge, |n| n == 1_000_000.0).await;
    let full = store.capacity();
    server.advance(Duration::from_secs(120));
    wait_for_sample(&server, gauge, |n| n == 0.0).await;
    assert!(
        store.capacity() < full / 100,
        "{} slots left of {full}",
        store.capacity()
    );
    server.stop().await;
}

/// `--max-counters`: past the bound a call that needs a new counter is OVER_LIMIT (and
/// counted in `sluice_counters_refused_total`); known keys keep working; after the idle
/// counters are reclaimed new keys are admitted again.
#[tokio::test(flavor = "multi_thread")]
async fn max_counters_is_enforced() {
    let store = Arc::new(MemoryStore::with_options(MemoryOptions {
        max_counters: 50,
        ..MemoryOptions::default()
    }));
    let server = TestServer::start_on(RULES, store).await;
    let mut client = server.client().await;
    for i in 0..50 {
        assert!(admitted(&mut client, "user", &format!("u{i}")).await);
    }
    let refused = call(&mut client, one_descriptor("test", &[("user", "new")])).await;
    assert_eq!(refused.overall_code, OVER);
    assert_eq!(reset_ms(&refused, 0), 1_000);
    assert!(
        admitted(&mut client, "user", "u7").await,
        "known keys keep counting"
    );
    wait_for_sample(&server, "sluice_counters_refused_total", |n| n == 1.0).await;
    server.advance(Duration::from_secs(3_601));
    wait_for_sample(
        &server,
        r#"sluice_active_counters{backend="memory"}"#,
        |n| n == 0.0,
    )
    .await;
    assert!(admitted(&mut client, "user", "new").await);
    server.stop().await;
}
