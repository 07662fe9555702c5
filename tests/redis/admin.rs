//! The admin listener on a real Redis: counters read and reset, checked by calls before and
//! after, on a standalone Redis (a plain limit, a sharded one, a leased one: the hits this
//! replica holds shown and given back), on Redis Cluster (with envoyproxy/ratelimit's key
//! layout, a descriptor's counters in two slots: its first limit in the untagged upstream key,
//! the second in sluice's tagged one) and through Sentinel.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice::store::redis::{RedisClock, RedisKeyLayout};
use sluice::store::{RedisSettings, RedisStore};

use crate::common::admin;
use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::sentinel::{SENTINEL_PASSWORD, SentinelSet};
use crate::common::{OK, OVER, TestServer, call, one_descriptor};

const RULES: &str = "\
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: fixed_window }
  - key: hot
    shards: 4
    rate_limit: { unit: hour, requests_per_unit: 8, algorithm: sliding_window }
  - key: leased
    rate_limit: { unit: hour, requests_per_unit: 6, algorithm: fixed_window, lease: 3 }
  - key: two
    rate_limits:
      - { unit: hour, requests_per_unit: 2, algorithm: fixed_window }
      - { unit: hour, requests_per_unit: 10, algorithm: sliding_window }
";

/// `n` calls of `key=value`; their codes.
async fn calls(server: &TestServer, key: &str, value: &str, n: usize) -> Vec<i32> {
    let mut client = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..n {
        let answer = call(&mut client, one_descriptor("edge", &[(key, value)])).await;
        codes.push(answer.overall_code);
    }
    codes
}

/// The counters of the first limit of a `GET /counters` answer.
fn counters(body: &Value) -> Vec<Value> {
    body["limits"][0]["counters"]
        .as_array()
        .unwrap_or_else(|| panic!("no counters in {body}"))
        .clone()
}

fn used(body: &Value) -> u64 {
    counters(body)
        .iter()
        .map(|c| c["used"].as_u64().expect("used"))
        .sum()
}

/// Limit 3: three calls pass, the fourth is over; the counter reads 3 used; a reset deletes
/// its key, and the next call passes.
async fn a_counter_is_read_and_reset(server: &TestServer) {
    let query = "domain=edge&descriptor=api_key=k1";
    assert_eq!(calls(server, "api_key", "k1", 4).await, [OK, OK, OK, OVER]);
    let read = admin::get(server, query).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(used(&read.body), 3, "{}", read.body);
    assert_eq!(counters(&read.body)[0]["admits"], false);
    let reset = admin::reset(server, query).await;
    assert_eq!(reset.status, 200, "{reset:?}");
    assert_eq!(reset.body["counters_cleared"], 1, "{}", reset.body);
    assert_eq!(calls(server, "api_key", "k1", 1).await, [OK]);
    assert_eq!(used(&admin::get(server, query).await.body), 1);
}

/// Limit 8 over 4 shards: each shard's count is shown, and a reset clears every shard.
async fn every_shard_is_reset(server: &TestServer) {
    let query = "domain=edge&descriptor=hot=h";
    let before = calls(server, "hot", "h", 40).await;
    let admitted = before.iter().filter(|c| **c == OK).count();
    assert!(admitted <= 8, "{before:?}");
    let read = admin::get(server, query).await;
    assert_eq!(counters(&read.body).len(), 4, "{}", read.body);
    assert_eq!(used(&read.body) as usize, admitted, "{}", read.body);
    let reset = admin::reset(server, query).await;
    assert_eq!(reset.body["reset"][0]["shards_reset"], 4, "{}", reset.body);
    let cleared = reset.body["counters_cleared"].as_u64().unwrap();
    assert!((1..=4).contains(&cleared), "{}", reset.body);
    assert_eq!(used(&admin::get(server, query).await.body), 0);
    assert_eq!(
        calls(server, "hot", "h", 1).await,
        [OK],
        "every shard is empty"
    );
}

/// Standalone Redis: a plain, a sharded and a leased limit; the leased hits this replica holds
/// are shown, and given back by a reset (the next calls count from zero in Redis).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn counters_on_redis() {
    let redis = RedisServer::start();
    let server = admin::start(RULES, crate::store(&redis.url()).await).await;
    a_counter_is_read_and_reset(&server).await;
    every_shard_is_reset(&server).await;

    let query = "domain=edge&descriptor=leased=l";
    assert_eq!(calls(&server, "leased", "l", 1).await, [OK]);
    let read = admin::get(&server, query).await;
    let counter = &counters(&read.body)[0];
    let held = counter["leased_here"].as_u64().expect("a lease is held");
    assert!(held > 0, "{}", read.body);
    assert_eq!(
        counter["used"].as_u64(),
        Some(1 + held),
        "Redis counts the leased hits: {}",
        read.body
    );
    let reset = admin::reset(&server, query).await;
    assert_eq!(reset.body["leased_hits_returned"], held, "{}", reset.body);
    assert_eq!(reset.body["counters_cleared"], 1);
    let after = admin::get(&server, query).await;
    assert_eq!(used(&after.body), 0, "{}", after.body);
    assert_eq!(counters(&after.body)[0]["leased_here"], Value::Null);
    // A lease may leave up to `lease - 1` hits unused in a window: the reset counter admits
    // exactly what a counter never used admits.
    let fresh = calls(&server, "leased", "never-used", 7).await;
    assert_eq!(fresh.last(), Some(&OVER), "{fresh:?}");
    assert_eq!(
        calls(&server, "leased", "l", 7).await,
        fresh,
        "the whole allowance again, nothing left of the old lease"
    );
    server.stop().await;
}

/// Redis Cluster, keys in envoyproxy/ratelimit's layout: a descriptor's two limits live in two
/// slots (the first in an untagged upstream key), and one reset clears both (one `DEL` per
/// slot group: a `DEL` across slots would be refused with CROSSSLOT).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn counters_on_redis_cluster() {
    let cluster = RedisCluster::start();
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: Duration::from_secs(1),
        key_layout: RedisKeyLayout::Compat,
        ..RedisSettings::new(cluster.url())
    };
    let store = Arc::new(RedisStore::connect(settings).await.expect("store"));
    let server = admin::start(RULES, store).await;
    a_counter_is_read_and_reset(&server).await;
    every_shard_is_reset(&server).await;

    let query = "domain=edge&descriptor=two=t";
    assert_eq!(calls(&server, "two", "t", 3).await, [OK, OK, OVER]);
    let read = admin::get(&server, query).await;
    let limits = read.body["limits"].as_array().expect("limits").clone();
    let used: Vec<_> = limits
        .iter()
        .map(|l| l["counters"][0]["used"].clone())
        .collect();
    // Two slot groups decide apart: the refused third call still charged the second limit.
    assert_eq!(used, [2, 3], "{}", read.body);
    let reset = admin::reset(&server, query).await;
    assert_eq!(reset.status, 200, "{reset:?}");
    assert_eq!(reset.body["counters_cleared"], 2, "{}", reset.body);
    assert_eq!(calls(&server, "two", "t", 3).await, [OK, OK, OVER]);
    server.stop().await;
}

/// Sentinel: the reset goes to the master the sentinels name.
#[tokio::test]
#[ignore = "needs redis-server and redis-sentinel (scripts/test installs them)"]
async fn counters_through_sentinel() {
    let set = SentinelSet::start();
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: Duration::from_secs(1),
        sentinel_password: Some(SENTINEL_PASSWORD.into()),
        ..RedisSettings::new(set.url())
    };
    let store = Arc::new(RedisStore::connect(settings).await.expect("store"));
    let server = admin::start(RULES, store).await;
    a_counter_is_read_and_reset(&server).await;
    every_shard_is_reset(&server).await;
    server.stop().await;
}
