//! §6.3: envoyproxy/ratelimit's config and matching cases (`config_test.go`) as calls: each
//! descriptor's status (limit, unit, name, remaining) and the stats key its hit is counted under
//! (envoyproxy/ratelimit's Prometheus labels `key1`/`key2`, the first two levels after the domain).

use sluice::proto::RateLimitDescriptor;
use sluice::proto::rate_limit_response::rate_limit::Unit;

use super::harness::{
    Entries, Replay, Seen, Tally, fixture, named_ok, no_limit, ok, seen, unlimited,
};
use crate::common::ratelimit::{room_in_window, unix_now};
use crate::common::redis::RedisServer;
use crate::common::{descriptor, request, with_override};

/// `(descriptor entries, envoyproxy/ratelimit's status after one call, the stats labels key1/key2
/// it counts under)`.
type Case = (Entries, Seen, Option<(&'static str, &'static str)>);

fn basic_cases() -> Vec<Case> {
    vec![
        (&[("key1", "something")], no_limit(), None),
        (&[("key1", "value1")], no_limit(), None),
        (
            &[("key2", "value2"), ("subkey", "subvalue")],
            no_limit(),
            None,
        ),
        (
            &[("key5", "value5"), ("subkey5", "subvalue")],
            no_limit(),
            None,
        ),
        (
            &[("key1", "value1"), ("subkey1", "something")],
            ok(5, "SECOND", 4),
            Some(("key1_value1", "subkey1")),
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            ok(10, "SECOND", 9),
            Some(("key1_value1", "subkey1_subvalue1")),
        ),
        (
            &[("key2", "something")],
            ok(20, "MINUTE", 19),
            Some(("key2", "")),
        ),
        (
            &[("key2", "value2")],
            ok(30, "MINUTE", 29),
            Some(("key2_value2", "")),
        ),
        (&[("key2", "value3")], no_limit(), None),
        (&[("key3", "foo")], ok(1, "HOUR", 0), Some(("key3", ""))),
        (
            &[("key4", "foo")],
            named_ok(1, "DAY", "key4_rate_limit", 0),
            Some(("key4", "")),
        ),
        (&[("key6", "foo")], unlimited(), None),
        (
            &[("key7", "unspecified_value")],
            ok(70, "MINUTE", 69),
            Some(("key7_unspecified_value", "")),
        ),
        (
            &[("key7", "another_value")],
            ok(70, "MINUTE", 69),
            Some(("key7_another_value", "")),
        ),
    ]
}

fn wildcard_cases() -> Vec<Case> {
    let minute = || ok(20, "MINUTE", 19);
    vec![
        (&[("noVal", "foo1")], minute(), Some(("noVal", ""))),
        (
            &[("noVal", "foo2")],
            ok(20, "MINUTE", 19),
            Some(("noVal", "")),
        ),
        (&[("wild", "foo1")], minute(), Some(("wild_foo*", ""))),
        (
            &[("wild", "foo2")],
            ok(20, "MINUTE", 19),
            Some(("wild_foo*", "")),
        ),
        (
            &[("nestedWild", "val1"), ("wild", "goo2")],
            minute(),
            Some(("nestedWild_val1", "wild_goo*")),
        ),
        (&[("wild", "bar")], no_limit(), None),
        (&[("noWild", "foo1")], no_limit(), None),
        (
            &[("midWild", "barab")],
            minute(),
            Some(("midWild_bar*b", "")),
        ),
        (
            &[("midWild", "bar123b")],
            minute(),
            Some(("midWild_bar*b", "")),
        ),
        (
            &[("midWild", "barb")],
            minute(),
            Some(("midWild_bar*b", "")),
        ),
        (&[("midWild", "bara")], no_limit(), None),
        (&[("midWild", "xbarb")], no_limit(), None),
        (
            &[("multiWild", "foo123bar456baz")],
            minute(),
            Some(("multiWild_foo*bar*baz", "")),
        ),
        (
            &[("multiWild", "foobarbaz")],
            minute(),
            Some(("multiWild_foo*bar*baz", "")),
        ),
        (&[("multiWild", "foo123baz")], no_limit(), None),
        (&[("multiWild", "bar456baz")], no_limit(), None),
    ]
}

fn share_threshold_cases() -> Vec<Case> {
    vec![
        (
            &[("files", "files/a.pdf")],
            ok(100, "MINUTE", 99),
            Some(("files_files/*", "")),
        ),
        (
            &[("files", "files/b.csv")],
            ok(100, "MINUTE", 98),
            Some(("files_files/*", "")),
        ),
        (
            &[("route", "api/users"), ("method", "GET")],
            ok(60, "MINUTE", 59),
            Some(("route_api/*", "method")),
        ),
        (
            &[("service", "svc/a"), ("endpoint", "get")],
            ok(80, "MINUTE", 79),
            Some(("service_svc/*", "endpoint_get")),
        ),
        (
            &[("nested", "parent"), ("files", "nested/x")],
            ok(200, "MINUTE", 199),
            Some(("nested_parent", "files_nested/*")),
        ),
        (
            &[("files", "top/a"), ("files", "nested/b")],
            ok(300, "MINUTE", 299),
            Some(("files_top/*", "files_nested/*")),
        ),
        (
            &[("path", "path/a"), ("file", "file/b"), ("type", "pdf")],
            ok(120, "MINUTE", 119),
            Some(("path_path/*", "file_file/*")),
        ),
        (
            &[("file", "test1")],
            ok(50, "MINUTE", 49),
            Some(("file_test1", "")),
        ),
        (
            &[("file", "test2")],
            ok(100, "MINUTE", 99),
            Some(("file_test*", "")),
        ),
        (
            &[("midpath", "/api/users/v1")],
            ok(10, "MINUTE", 9),
            Some(("midpath_/api*v1", "")),
        ),
        (
            &[("multiroute", "svc1ep2rpc")],
            ok(10, "MINUTE", 9),
            Some(("multiroute_svc*ep*rpc", "")),
        ),
        (
            &[("tenant", "t1prod"), ("resource", "res1v2")],
            ok(10, "MINUTE", 9),
            Some(("tenant_t*prod", "resource_res*v2")),
        ),
    ]
}

/// Runs `cases` against the rule file `name`, one call each.
async fn replay_cases(tally: &mut Tally, redis: &RedisServer, name: &str, cases: Vec<Case>) {
    let rules = fixture(name);
    let mut replay = Replay::start(&[(name, &rules)], &[], &redis_addr(redis)).await;
    for (entries, upstream, stats) in cases {
        let response = replay
            .call(request("test-domain", vec![descriptor(entries)]))
            .await;
        tally.same(&format!("{name} {entries:?}"), upstream, seen(&response, 0));
        if let Some((key1, key2)) = stats {
            let hits = replay.stat("total_hits", "test-domain", key1, key2).await;
            let case = format!("{name} {entries:?} counts under {key1}.{key2}");
            tally.same(&case, true, hits >= 1.0);
        }
    }
}

/// `127.0.0.1:<port>`, envoyproxy/ratelimit's REDIS_URL for a TCP Redis.
pub fn redis_addr(redis: &RedisServer) -> String {
    format!("127.0.0.1:{}", redis.port)
}

/// basic_config, wildcard and share_threshold, case by case.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn matching_cases() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.3 matching");
    replay_cases(&mut tally, &redis, "basic_config.yaml", basic_cases()).await;
    replay_cases(&mut tally, &redis, "wildcard.yaml", wildcard_cases()).await;
    replay_cases(
        &mut tally,
        &redis,
        "share_threshold.yaml",
        share_threshold_cases(),
    )
    .await;
    unknown_domain(&mut tally, &redis).await;
    tally.finish();
}

/// An unknown domain gives no limit; a known domain's empty descriptor is envoyproxy/ratelimit's
/// "no limit".
async fn unknown_domain(tally: &mut Tally, redis: &RedisServer) {
    let rules = fixture("basic_config.yaml");
    let mut replay = Replay::start(&[("basic_config.yaml", &rules)], &[], &redis_addr(redis)).await;
    let response = replay
        .call(request(
            "foo_domain",
            vec![descriptor(&[("key1", "value1")])],
        ))
        .await;
    tally.same("unknown domain", no_limit(), seen(&response, 0));
    let counted = replay.plain("sluice_domain_not_found_total").await;
    tally.differs(
        "unknown domain counted",
        "foo_domain.domain_not_found = 1",
        "sluice_domain_not_found_total = 1",
        if counted == 1.0 {
            "sluice_domain_not_found_total = 1"
        } else {
            "not counted"
        },
        "Calls to an unknown domain",
    );
    let empty = RateLimitDescriptor::default();
    let outcome = replay
        .send(
            super::harness::Transport::Grpc,
            request("test-domain", vec![empty]),
        )
        .await;
    let actual = match outcome {
        super::harness::Outcome::Answer(response) => format!("{:?}", seen(&response, 0)),
        super::harness::Outcome::Error(code, message) => format!("{code}: {message}"),
    };
    tally.same("empty descriptor", format!("{:?}", no_limit()), actual);
}

/// Two files of one domain merged (MERGE_DOMAIN_CONFIG=true).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn merged_domains() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.3 merging");
    let (one, two) = (
        fixture("merge_domain_key1.yaml"),
        fixture("merge_domain_key2.yaml"),
    );
    let files = [
        ("merge_domain_key1.yaml", one.as_str()),
        ("merge_domain_key2.yaml", two.as_str()),
    ];
    let env = [("MERGE_DOMAIN_CONFIG", "true")];
    let mut replay = Replay::start(&files, &env, &redis_addr(&redis)).await;
    for (entry, upstream) in [
        (("key1", "value1"), ok(10, "MINUTE", 9)),
        (("key2", "value2"), ok(20, "MINUTE", 19)),
    ] {
        let response = replay
            .call(request("test-domain", vec![descriptor(&[entry])]))
            .await;
        tally.same(&format!("merged {entry:?}"), upstream, seen(&response, 0));
    }
    tally.finish();
}

/// Request-side overrides: the override's limit, one stats key per descriptor whatever the
/// override, a new one for another value, nothing in an unknown domain.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn limit_overrides() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.3 limit override");
    let rules = fixture("basic_config.yaml");
    let mut replay =
        Replay::start(&[("basic_config.yaml", &rules)], &[], &redis_addr(&redis)).await;
    let entries = [("key1", "value1"), ("subkey1", "something")];
    // The key's last part is the window's start and names no unit, so in the first hour of a UTC
    // day the day's window and the hour's start at the same second and share one counter
    // (envoyproxy/ratelimit's key, §6.5). Both calls land in one hour, and the answer depends on
    // which.
    room_in_window(3600, 5);
    let first_hour_of_day = unix_now() % 86_400 < 3_600;
    let day = with_override(descriptor(&entries), 10, Unit::Day as i32);
    let response = replay.call(request("test-domain", vec![day])).await;
    tally.same("override 10/DAY", ok(10, "DAY", 9), seen(&response, 0));
    let hour = with_override(descriptor(&entries), 42, Unit::Hour as i32);
    let response = replay.call(request("test-domain", vec![hour])).await;
    let remaining = if first_hour_of_day { 40 } else { 41 };
    tally.same(
        "override 42/HOUR",
        ok(42, "HOUR", remaining),
        seen(&response, 0),
    );
    let stats = ("key1_value1", "subkey1_something");
    let hits = replay
        .stat("total_hits", "test-domain", stats.0, stats.1)
        .await;
    tally.same("both overrides count under one stats key", 2.0, hits);
    let other = [("key1", "value1"), ("subkey1", "other")];
    let response = replay
        .call(request(
            "test-domain",
            vec![with_override(descriptor(&other), 10, Unit::Day as i32)],
        ))
        .await;
    tally.same(
        "override, another value",
        ok(10, "DAY", 9),
        seen(&response, 0),
    );
    let hits = replay
        .stat("total_hits", "test-domain", "key1_value1", "subkey1_other")
        .await;
    tally.same("another value has its own stats", 1.0, hits);
    let unknown = with_override(descriptor(&entries), 10, Unit::Day as i32);
    let response = replay.call(request("unknown-domain", vec![unknown])).await;
    tally.same(
        "override in an unknown domain",
        no_limit(),
        seen(&response, 0),
    );
    tally.finish();
}

/// shadow_mode is per node: a shadow rule over its limit answers OK (remaining 0) and counts
/// shadow_mode; its key-only sibling and its value sibling are not shadow.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn shadow_mode_per_node() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.3 shadow_mode");
    let rules = fixture("shadowmode_config.yaml");
    let name = "shadowmode_config.yaml";
    let mut replay = Replay::start(&[(name, &rules)], &[], &redis_addr(&redis)).await;
    let cases: [(Entries, u64, &str); 4] = [
        (&[("key1", "value1"), ("subkey1", "subvalue1")], 11, "OK"),
        (&[("key2", "anything")], 21, "OK"),
        (&[("key1", "value1"), ("subkey1", "other")], 6, "OVER_LIMIT"),
        (&[("key2", "value2")], 31, "OVER_LIMIT"),
    ];
    for (entries, hits, upstream) in cases {
        let d = super::harness::hits(descriptor(entries), hits);
        let response = replay.call(request("test-domain", vec![d])).await;
        let status = seen(&response, 0);
        tally.same(&format!("{entries:?} ×{hits}"), upstream, status.code);
    }
    let shadow = replay
        .stat(
            "shadow_mode",
            "test-domain",
            "key1_value1",
            "subkey1_subvalue1",
        )
        .await;
    tally.same("shadow_mode counted", true, shadow >= 1.0);
    tally.finish();
}

/// Rules for the stats-key flags: detailed_metric on a key-only tree (and off), value_to_metric
/// on every level, on a middle level only, beside detailed_metric, on a wildcard.
const STATS_RULES: &str = "domain: stats
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 10 }
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: plain-1
    rate_limit: { unit: minute, requests_per_unit: 10 }
    descriptors:
      - key: plain-2
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: v2m
    value_to_metric: true
    descriptors:
      - key: leaf
        detailed_metric: true
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: action
    value: read*
    value_to_metric: true
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: fixed
    value: configured
    value_to_metric: true
    rate_limit: { unit: minute, requests_per_unit: 10 }
";

fn stats_key_cases() -> Vec<Case> {
    let minute = || ok(10, "MINUTE", 9);
    vec![
        (
            &[("key-1", "value-1")],
            minute(),
            Some(("key-1_value-1", "")),
        ),
        (
            &[("key-1", "value-1"), ("key-2", "value-2")],
            minute(),
            Some(("key-1_value-1", "key-2_value-2")),
        ),
        (&[("plain-1", "value-1")], minute(), Some(("plain-1", ""))),
        (
            &[("plain-1", "value-1"), ("plain-2", "value-2")],
            minute(),
            Some(("plain-1", "plain-2")),
        ),
        (
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ],
            minute(),
            Some(("route_draw", "http_method_GET")),
        ),
        (
            &[("k1", "X"), ("k2", "Y"), ("k3", "Z")],
            minute(),
            Some(("k1", "k2_Y")),
        ),
        (
            &[("v2m", "a"), ("leaf", "123")],
            minute(),
            Some(("v2m_a", "leaf_123")),
        ),
        (
            &[("action", "readfile")],
            minute(),
            Some(("action_readfile", "")),
        ),
        (
            &[("fixed", "configured")],
            minute(),
            Some(("fixed_configured", "")),
        ),
    ]
}

/// The stats keys detailed_metric and value_to_metric give (the first two levels, as
/// envoyproxy/ratelimit's Prometheus mapping labels them).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn stats_keys() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.3 stats keys");
    let mut replay = Replay::start(&[("stats.yaml", STATS_RULES)], &[], &redis_addr(&redis)).await;
    for (entries, upstream, stats) in stats_key_cases() {
        let response = replay
            .call(request("stats", vec![descriptor(entries)]))
            .await;
        tally.same(&format!("stats {entries:?}"), upstream, seen(&response, 0));
        let (key1, key2) = stats.expect("every case names its stats key");
        let hits = replay.stat("total_hits", "stats", key1, key2).await;
        let case = format!("stats {entries:?} counts under {key1}.{key2}");
        tally.same(&case, 1.0, hits);
    }
    tally.finish();
}
