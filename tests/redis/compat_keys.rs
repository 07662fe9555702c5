//! `--redis-key-layout upstream`: `fixed_window` counters live in envoyproxy/ratelimit's keys, as
//! plain integers with envoyproxy/ratelimit's expiry, so envoyproxy/ratelimit and sluice replicas
//! on one Redis share their counts during a rolling migration.
//!
//! The expected keys are written out as envoyproxy/ratelimit builds them (reference
//! envoy-ratelimit.md §2.6: prefix + domain + "_" + (key + "_" + value + "_")… + window start in
//! Unix seconds), never computed with sluice's code; envoyproxy/ratelimit itself is emulated with
//! `redis-cli` running its commands (`INCRBY key 1`, then `EXPIRE key window + jitter`).

use std::time::Duration;

use sluice::algorithm::Algorithm;
use sluice::clock::SECOND;
use sluice::store::redis::{RedisClock, RedisKeyLayout};
use sluice::store::{RedisSettings, RedisStore};

use crate::common::process::Sluice;
use crate::common::ratelimit::unix_now;
use crate::common::redis::RedisServer;
use crate::common::{OK, OVER, TestServer, call, connect, one_descriptor};

/// The rules of envoyproxy/ratelimit's own key-layout tests (`fixed_window` comes from
/// `--default-algorithm`, as in a migration), and two rules whose keys collide
/// envoyproxy/ratelimit.
const RULES: &str = "\
domain: domain
descriptors:
  - key: key
    value: value
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: key2
    value: value2
    descriptors:
      - key: subkey2
        value: subvalue2
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: key3
    value: value3
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: key4
    value: value4
    rate_limit: { unit: day, requests_per_unit: 10 }
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: a_b
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: a
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: sliding
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: sliding_window }
";

/// A store on `redis` with envoyproxy/ratelimit's layout, `prefix` and no expiry jitter.
async fn store(redis: &RedisServer, prefix: &str) -> std::sync::Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: Duration::from_secs(2),
        key_prefix: prefix.into(),
        key_layout: RedisKeyLayout::Compat,
        expiration_jitter: Duration::ZERO,
        ..RedisSettings::new(redis.url())
    };
    std::sync::Arc::new(RedisStore::connect(settings).await.expect("store"))
}

/// A server whose rules count with `fixed_window` unless they say otherwise.
async fn fixed_window_server(store: std::sync::Arc<RedisStore>) -> TestServer {
    TestServer::start_adjusted(RULES, store, |s| {
        s.load.default_algorithm = Algorithm::FixedWindow;
        s.limiter.default_algorithm = Algorithm::FixedWindow;
    })
    .await
}

/// Every key Redis holds, sorted.
fn keys(redis: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis.cli(&["--scan"]).lines().map(str::to_owned).collect();
    keys.sort();
    keys
}

/// The keys of envoyproxy/ratelimit's examples, at the times its tests use (1234 s and 1,000,000 s
/// after the epoch), with and without a prefix; each a string holding the count, expiring a window
/// after the hit. Other algorithms keep sluice's layout.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn keys_are_upstreams() {
    let redis = RedisServer::start();
    let server = fixed_window_server(store(&redis, "").await).await;
    let mut client = server.client().await;
    server.clock.set(1234 * SECOND);
    for entries in [
        &[("key", "value")][..],
        &[("key2", "value2"), ("subkey2", "subvalue2")],
        &[("files", "files/a.txt")],
        &[("files", "files/b.txt")],
        &[("sliding", "x")],
    ] {
        let r = call(&mut client, one_descriptor("domain", entries)).await;
        assert_eq!(r.overall_code, OK, "{entries:?}");
    }
    server.clock.set(1_000_000 * SECOND);
    for entries in [[("key3", "value3")], [("key4", "value4")]] {
        assert_eq!(
            call(&mut client, one_descriptor("domain", &entries))
                .await
                .overall_code,
            OK
        );
    }
    let all = keys(&redis);
    let upstream: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|k| k.starts_with("domain_"))
        .collect();
    assert_eq!(
        upstream,
        [
            "domain_files_files/*_1234",
            "domain_key2_value2_subkey2_subvalue2_1200",
            "domain_key3_value3_997200",
            "domain_key4_value4_950400",
            "domain_key_value_1234",
        ]
    );
    assert_eq!(
        all.len(),
        6,
        "the sliding window keeps sluice's key: {all:?}"
    );
    for (key, count, window) in [
        ("domain_key_value_1234", "1", 1),
        ("domain_files_files/*_1234", "2", 1),
        ("domain_key2_value2_subkey2_subvalue2_1200", "1", 60),
        ("domain_key3_value3_997200", "1", 3600),
        ("domain_key4_value4_950400", "1", 86400),
    ] {
        assert_eq!(redis.cli(&["TYPE", key]).trim(), "string", "{key}");
        assert_eq!(redis.cli(&["GET", key]).trim(), count, "{key}");
        let ttl: i64 = redis.cli(&["TTL", key]).trim().parse().expect("ttl");
        assert!(
            (window - 2..=window).contains(&ttl),
            "{key}: TTL {ttl}, window {window}"
        );
    }
    server.stop().await;

    let redis = RedisServer::start();
    let server = fixed_window_server(store(&redis, "prefix:").await).await;
    let mut client = server.client().await;
    server.clock.set(1234 * SECOND);
    call(&mut client, one_descriptor("domain", &[("key", "value")])).await;
    assert_eq!(keys(&redis), ["prefix:domain_key_value_1234"]);
    server.stop().await;
}

/// What the layout gives up: envoyproxy/ratelimit joins keys and values with `_`, so `a_b=c` and
/// `a=b_c` share one counter (in sluice's layout they never do).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn underscores_collide_as_upstream() {
    let redis = RedisServer::start();
    let server = fixed_window_server(store(&redis, "").await).await;
    let mut client = server.client().await;
    server.clock.set(1234 * SECOND);
    let first = call(&mut client, one_descriptor("domain", &[("a_b", "c")])).await;
    let second = call(&mut client, one_descriptor("domain", &[("a", "b_c")])).await;
    assert_eq!((first.overall_code, second.overall_code), (OK, OVER));
    assert_eq!(keys(&redis), ["domain_a_b_c_1234"]);
    server.stop().await;
}

/// One hit as envoyproxy/ratelimit counts it (INCRBY 1, then EXPIRE window + jitter; here 3600 +
/// 300), from another process; returns the count after it.
fn upstream_hit(redis: &RedisServer, key: &str) -> u64 {
    let count = redis
        .cli(&["INCRBY", key, "1"])
        .trim()
        .parse()
        .expect("count");
    assert_eq!(redis.cli(&["EXPIRE", key, "3900"]).trim(), "1");
    count
}

/// A rolling migration: an envoyproxy/ratelimit replica (emulated from another process) and a
/// `sluice serve` replica count one `fixed_window` rule in the same Redis key, so neither
/// double-counts nor resets: sluice admits only what envoyproxy/ratelimit left, and
/// envoyproxy/ratelimit sees sluice's hits. (sluice's refusals consume nothing, as it documents.)
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn upstream_and_sluice_share_counts() {
    let redis = RedisServer::start();
    let rules = "\
domain: mig
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
";
    let sluice = Sluice::start(
        rules,
        &[
            "--store",
            "redis",
            "--redis-url",
            &redis.url(),
            "--redis-timeout",
            "1s",
            "--default-algorithm",
            "fixed_window",
            "--redis-key-layout",
            "upstream",
            "--redis-key-prefix",
            "",
        ],
    );
    let mut client = connect(sluice.grpc_addr).await;
    // A run that straddles an hour boundary would count in two windows: run it again.
    for _attempt in 0..2 {
        let hour = unix_now() / 3600 * 3600;
        let key = format!("mig_user_alice_{hour}");
        redis.cli(&["FLUSHALL"]);
        for expected in 1..=4 {
            assert_eq!(upstream_hit(&redis, &key), expected);
        }
        let mut admitted = 0;
        for _ in 0..8 {
            let r = call(&mut client, one_descriptor("mig", &[("user", "alice")])).await;
            admitted += usize::from(r.overall_code == OK);
        }
        let after = upstream_hit(&redis, &key);
        if unix_now() / 3600 * 3600 != hour {
            continue;
        }
        assert_eq!(
            admitted, 6,
            "sluice admits what upstream's 4 hits left of 10"
        );
        assert_eq!(
            after, 11,
            "upstream sees sluice's 6 hits: it is over the limit"
        );
        assert_eq!(redis.cli(&["TYPE", &key]).trim(), "string");
        assert_eq!(keys(&redis), [key.as_str()]);
        let ttl: u64 = redis.cli(&["TTL", &key]).trim().parse().expect("ttl");
        assert!(ttl > 3600 - 5 && ttl <= 3900, "TTL {ttl}");
        return;
    }
    panic!("two runs straddled an hour boundary");
}
