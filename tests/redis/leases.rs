//! Leases (`lease: N`) on a real Redis: two replicas sharing a leased limit never admit past
//! it, answer most calls from held hits, give up at most N − 1 hits each per window, take
//! nothing for a blocked call, keep answering from held hits while Redis is away, and count in
//! envoyproxy/ratelimit's own key in its layout.

use std::sync::Arc;
use std::time::Duration;

use sluice::algorithm::{Algorithm, Limit};
use sluice::clock::{Nanos, SECOND};
use sluice::store::redis::RedisClock;
use sluice::store::{Charge, Gate, RedisSettings, RedisStore, Store};

use crate::common::charge;
use crate::common::redis::RedisServer;

/// A multiple of every window here, in nanoseconds (the stores run on the caller's clock).
const T0: Nanos = 1_767_225_600 * SECOND;

async fn replica(url: &str) -> Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Caller,
        timeout: Duration::from_secs(2),
        ..RedisSettings::new(url)
    };
    Arc::new(RedisStore::connect(settings).await.expect("redis store"))
}

fn leased(algorithm: Algorithm, requests: u64, lease: u32, value: &str) -> Charge {
    let limit = Limit {
        algorithm,
        requests,
        window: 60 * SECOND,
        burst: requests,
        origin: 0,
        recording: Default::default(),
    };
    Charge {
        lease,
        descriptor: 0,
        ..charge("edge", ("api_key", value), limit, 1, Gate::Enforced)
    }
}

fn answered(store: &RedisStore) -> u64 {
    store.stats().leases.expect("redis reports leases").answered
}

#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn replicas_share_a_leased_limit_without_passing_it() {
    let server = RedisServer::start();
    let replicas = [replica(&server.url()).await, replica(&server.url()).await];
    for (algorithm, value) in [
        (Algorithm::FixedWindow, "fixed"),
        (Algorithm::SlidingWindow, "sliding"),
    ] {
        let c = leased(algorithm, 40, 5, value);
        let charges = std::slice::from_ref(&c);
        for window in 0..2 {
            let start = T0 + window * 60 * SECOND;
            let mut admitted = 0;
            for i in 0..100 {
                let store = &replicas[i % 2];
                let now = start + (i as Nanos) * 100_000_000;
                let outcomes = store.apply(charges, now).await.expect("redis answers");
                admitted += u64::from(outcomes[0].verdict.admitted);
            }
            // Within the limit; at most N − 1 = 4 hits held unused by each replica.
            assert!(
                admitted <= 40,
                "{value} window {window}: {admitted} admitted"
            );
            assert!(
                admitted >= 40 - 2 * 4,
                "{value} window {window}: {admitted} admitted"
            );
            if algorithm == Algorithm::SlidingWindow {
                // The next window starts with this one's count weighing fully: stop here.
                break;
            }
        }
    }
    let local = answered(&replicas[0]) + answered(&replicas[1]);
    assert!(local >= 60, "only {local} calls answered from leases");
}

#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_blocked_call_takes_no_lease() {
    let server = RedisServer::start();
    let store = replica(&server.url()).await;
    let a = leased(Algorithm::FixedWindow, 100, 10, "a");
    let mut closed = leased(Algorithm::FixedWindow, 0, 0, "closed");
    closed.lease = 0;
    let outcomes = store
        .apply(&[a.clone(), closed], T0)
        .await
        .expect("redis answers");
    assert!(outcomes[0].verdict.admitted && !outcomes[1].verdict.admitted);
    assert_eq!(
        outcomes[0].verdict.remaining, 99,
        "as if alone, and uncommitted"
    );
    assert_eq!(
        server.cli(&["DBSIZE"]).trim(),
        "0",
        "nothing committed, no lease taken"
    );
    // Alone, it leases: 1 + 9 counted in Redis, 90 left there and 9 held here.
    let outcomes = store
        .apply(std::slice::from_ref(&a), T0)
        .await
        .expect("redis answers");
    assert_eq!(outcomes[0].verdict.remaining, 99);
    // The key holds NUL separators: read it over a connection, not redis-cli's arguments.
    let client = redis::Client::open(server.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let count: String = redis::cmd("HGET")
        .arg(&keys[0])
        .arg("n")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(count, "10");
}

#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn held_hits_answer_while_redis_is_away() {
    let mut server = RedisServer::start();
    let store = replica(&server.url()).await;
    let c = leased(Algorithm::FixedWindow, 100, 10, "away");
    let charges = std::slice::from_ref(&c);
    store.apply(charges, T0).await.expect("redis answers");
    server.kill();
    for i in 1..10 {
        let outcomes = store
            .apply(charges, T0 + i * SECOND)
            .await
            .expect("answered from held hits");
        assert!(outcomes[0].verdict.admitted);
    }
    assert!(
        store.apply(charges, T0 + 10 * SECOND).await.is_err(),
        "none held now"
    );
}

/// In envoyproxy/ratelimit's key layout a lease is counted in envoyproxy/ratelimit's own key
/// (`INCRBY` by the cost and the leased hits), so envoyproxy/ratelimit replicas sharing the key
/// see the leased hits as taken.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_lease_in_upstreams_layout_counts_in_upstreams_key() {
    use sluice::store::redis::RedisKeyLayout;
    let server = RedisServer::start();
    let settings = RedisSettings {
        clock: RedisClock::Caller,
        timeout: Duration::from_secs(2),
        key_layout: RedisKeyLayout::Compat,
        key_prefix: String::new(),
        expiration_jitter: Duration::ZERO,
        ..RedisSettings::new(server.url())
    };
    let store = RedisStore::connect(settings).await.expect("redis store");
    let c = leased(Algorithm::FixedWindow, 100, 10, "up");
    let charges = std::slice::from_ref(&c);
    let first = store.apply(charges, T0).await.expect("redis answers");
    // 1 + 9 counted in the key; 90 left there, 9 held here.
    assert_eq!(first[0].verdict.remaining, 99);
    // The key names the window: edge_api_key_up_<window start in seconds>.
    let key = format!("edge_api_key_up_{}", T0 / SECOND);
    assert_eq!(server.cli(&["GET", &key]).trim(), "10");
    for _ in 0..4 {
        let o = store.apply(charges, T0 + SECOND).await.expect("held");
        assert!(o[0].verdict.admitted);
    }
    assert_eq!(answered(&store), 4, "answered from held hits");
    assert_eq!(
        server.cli(&["GET", &key]).trim(),
        "10",
        "no round trip for those"
    );
}

/// A leased calendar limit (a Paris day, its window placed by sluice and named in its key):
/// two replicas never pass it, most calls are answered from held hits, and the hits held at
/// local midnight stay with the day that ended: the next day starts from its own count.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn replicas_share_a_leased_calendar_day() {
    use sluice::rules::{Calendar, Period};
    let server = RedisServer::start();
    let replicas = [replica(&server.url()).await, replica(&server.url()).await];
    let paris = Calendar::new(Period::Day, "Europe/Paris").expect("a known zone");
    // 2026-03-29T22:00:00Z: midnight in Paris, at the end of a 23-hour day.
    let midnight: Nanos = 1_774_821_600 * SECOND;
    let day_charge = |now| {
        let (start, end) = paris.window(now).expect("a window");
        let limit = Limit {
            window: end - start,
            origin: start,
            ..leased(Algorithm::FixedWindow, 40, 5, "calendar").limit
        };
        Charge {
            lease: 5,
            ..charge("edge", ("api_key", "calendar"), limit, 1, Gate::Enforced)
        }
    };
    assert_eq!(day_charge(midnight - 1).limit.window, 23 * 3_600 * SECOND);
    for start in [midnight - 10 * SECOND, midnight] {
        let mut admitted = 0;
        for i in 0..100 {
            let now = start + (i as Nanos) * 100_000_000;
            let c = day_charge(now);
            let outcomes = replicas[i % 2]
                .apply(std::slice::from_ref(&c), now)
                .await
                .expect("redis answers");
            admitted += u64::from(outcomes[0].verdict.admitted);
        }
        assert!((32..=40).contains(&admitted), "{admitted} admitted");
    }
    assert!(answered(&replicas[0]) + answered(&replicas[1]) > 0);
}
