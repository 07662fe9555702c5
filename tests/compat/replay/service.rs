//! §6.4: envoyproxy/ratelimit's service cases (`test/service/ratelimit_test.go`): overall codes,
//! shadow and quota modes, headers, metadata, unlimited, errors, reload and health, through the
//! personality.

use std::time::Duration;

use super::harness::{
    Outcome, Replay, Tally, Transport, fixture, hits, no_limit, overall, seen, unlimited,
};
use super::matching::redis_addr;
use crate::common::http1;
use crate::common::process::poll;
use crate::common::redis::RedisServer;
use crate::common::{descriptor, eventually, request};

/// Rules for the quota cases: two quota rules and a regular one, one hit a minute each.
const QUOTA_RULES: &str = "domain: quota
descriptors:
  - { key: q1, quota_mode: true, rate_limit: { unit: minute, requests_per_unit: 1 } }
  - { key: q2, quota_mode: true, rate_limit: { unit: minute, requests_per_unit: 1 } }
  - { key: regular, rate_limit: { unit: minute, requests_per_unit: 1 } }
";

/// Two rules whose metadata overlap (`owner`).
const OVERLAP_RULES: &str = "domain: overlap
descriptors:
  - { key: first, metadata: { owner: first, tier: gold }, rate_limit: { unit: minute, requests_per_unit: 10 } }
  - { key: second, metadata: { owner: second, zone: eu }, rate_limit: { unit: minute, requests_per_unit: 10 } }
";

/// Overall codes, unlimited descriptors, errors of malformed calls.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn service_cases() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.4 service");
    let rules = fixture("basic_config.yaml");
    let mut replay =
        Replay::start(&[("basic_config.yaml", &rules)], &[], &redis_addr(&redis)).await;

    let response = replay
        .call(request(
            "test-domain",
            vec![descriptor(&[("nothing", "here")])],
        ))
        .await;
    tally.same(
        "no rule matched",
        ("OK", no_limit()),
        (overall(&response), seen(&response, 0)),
    );

    let over = hits(descriptor(&[("key3", "mixed")]), 2);
    let fine = descriptor(&[("key2", "mixed")]);
    let response = replay.call(request("test-domain", vec![over, fine])).await;
    let codes = (
        overall(&response),
        seen(&response, 0).code,
        seen(&response, 1).code,
    );
    tally.same(
        "mixed OVER and OK",
        ("OVER_LIMIT", "OVER_LIMIT", "OK"),
        codes,
    );

    let three = vec![
        descriptor(&[("key2", "u")]),
        descriptor(&[("key3", "u")]),
        descriptor(&[("key6", "u")]),
    ];
    let response = replay.call(request("test-domain", three)).await;
    tally.same("unlimited", unlimited(), seen(&response, 2));
    let stats = replay.stat("total_hits", "test-domain", "key6", "").await;
    tally.same("unlimited counts no stats", 0.0, stats);

    for (case, domain, descriptors, message) in [
        (
            "empty domain",
            "",
            vec![descriptor(&[("key2", "x")])],
            "rate limit domain must not be empty",
        ),
        (
            "no descriptors",
            "test-domain",
            vec![],
            "rate limit descriptor list must not be empty",
        ),
    ] {
        let outcome = replay
            .send(Transport::Grpc, request(domain, descriptors))
            .await;
        let upstream = Outcome::Error("Unknown".into(), message.into());
        let sluice = Outcome::Error("InvalidArgument".into(), message.into());
        tally.differs(case, upstream, sluice, outcome, "is `INVALID_ARGUMENT`");
    }
    tally.finish();
}

/// Global shadow mode: the overall code is OK, the statuses keep OVER_LIMIT.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn global_shadow_mode() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.4 global shadow");
    let rules = fixture("basic_config.yaml");
    let env = [("SHADOW_MODE", "true")];
    let mut replay =
        Replay::start(&[("basic_config.yaml", &rules)], &env, &redis_addr(&redis)).await;
    let response = replay
        .call(request(
            "test-domain",
            vec![hits(descriptor(&[("key3", "s")]), 2)],
        ))
        .await;
    let actual = (overall(&response), seen(&response, 0).code);
    tally.same("global shadow", ("OK", "OVER_LIMIT"), actual);
    let counted = replay.plain("ratelimit_service_global_shadow_mode").await;
    tally.same("global_shadow_mode counted", 1.0, counted);
    tally.finish();
}

/// Quota mode per rule: the call is over only when every quota-mode descriptor is over (or a
/// regular one is).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn quota_cases() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.4 quota");
    let mut replay = Replay::start(&[("quota.yaml", QUOTA_RULES)], &[], &redis_addr(&redis)).await;
    // (case, [(key, over?)], envoyproxy/ratelimit's overall code)
    type QuotaCase = (&'static str, &'static [(&'static str, bool)], &'static str);
    let cases: [QuotaCase; 6] = [
        ("all quota over", &[("q1", true)], "OVER_LIMIT"),
        (
            "quota OK, regular over",
            &[("q1", false), ("regular", true)],
            "OVER_LIMIT",
        ),
        (
            "regular OK, all quota over",
            &[("regular", false), ("q1", true), ("q2", true)],
            "OVER_LIMIT",
        ),
        (
            "regular OK, quota OK",
            &[("regular", false), ("q1", false)],
            "OK",
        ),
        ("two quota, one over", &[("q1", true), ("q2", false)], "OK"),
        (
            "two quota, both over",
            &[("q1", true), ("q2", true)],
            "OVER_LIMIT",
        ),
    ];
    for (n, (case, parts, upstream)) in cases.into_iter().enumerate() {
        let value = format!("case{n}");
        let descriptors = parts
            .iter()
            .map(|(key, over)| hits(descriptor(&[(key, &value)]), if *over { 2 } else { 1 }))
            .collect();
        let response = replay.call(request("quota", descriptors)).await;
        tally.same(case, upstream, overall(&response));
    }
    tally.finish();

    let mut tally = Tally::new("§6.4 quota + global shadow");
    let env = [("SHADOW_MODE", "true")];
    let mut replay = Replay::start(&[("quota.yaml", QUOTA_RULES)], &env, &redis_addr(&redis)).await;
    let response = replay
        .call(request(
            "quota",
            vec![hits(descriptor(&[("q1", "shadow")]), 2)],
        ))
        .await;
    tally.same("quota + global shadow", "OK", overall(&response));
    tally.finish();
}

/// envoyproxy/ratelimit's headers under custom names; dynamic metadata from the rules that passed,
/// the first descriptor winning on overlap.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn headers_and_metadata() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.4 headers and metadata");
    let rules = fixture("metadata.yaml");
    let env = [
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_LIMIT_HEADER", "X-Custom-Limit"),
        ("LIMIT_REMAINING_HEADER", "X-Custom-Remaining"),
        ("LIMIT_RESET_HEADER", "X-Custom-Reset"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ];
    let mut replay = Replay::start(&[("metadata.yaml", &rules)], &env, &redis_addr(&redis)).await;
    let metadata = |response: &sluice::proto::RateLimitResponse| {
        serde_json::to_value(response).unwrap()["dynamicMetadata"]["metadata"].clone()
    };
    let both = vec![
        descriptor(&[("service", "one")]),
        descriptor(&[("service", "two")]),
    ];
    let response = replay.call(request("test-domain", both)).await;
    let expected = serde_json::json!({
        "name": "service_1",
        "service_with_quota": {"name": "service_2", "tiers": ["gold", "silver"], "weight": 0.5}
    });
    tally.same("both passed: merged", expected, metadata(&response));
    let over = vec![
        hits(descriptor(&[("service", "one")]), 100),
        descriptor(&[("service", "two")]),
    ];
    let response = replay.call(request("test-domain", over)).await;
    let only_two = serde_json::json!({
        "service_with_quota": {"name": "service_2", "tiers": ["gold", "silver"], "weight": 0.5}
    });
    tally.same("only passed descriptors", only_two, metadata(&response));
    let overlap = vec![
        descriptor(&[("first", "x")]),
        descriptor(&[("second", "x")]),
    ];
    let address = redis_addr(&redis);
    let mut overlapping = Replay::start(&[("overlap.yaml", OVERLAP_RULES)], &env, &address).await;
    let response = overlapping.call(request("overlap", overlap)).await;
    let first_wins = serde_json::json!({"owner": "first", "tier": "gold", "zone": "eu"});
    tally.same("on overlap the first wins", first_wins, metadata(&response));
    // service=one has counted 1 of its 10: 9 more leave 0.
    let response = replay
        .call(request(
            "test-domain",
            vec![hits(descriptor(&[("service", "one")]), 9)],
        ))
        .await;
    let headers: Vec<(String, String)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    tally.same(
        "custom header names",
        vec!["X-Custom-Limit", "X-Custom-Remaining", "X-Custom-Reset"],
        names,
    );
    let values: Vec<&str> = headers.iter().take(2).map(|(_, v)| v.as_str()).collect();
    tally.same("limit and remaining", vec!["10", "0"], values);
    let reset: u64 = headers.get(2).map_or(0, |(_, v)| v.parse().unwrap_or(0));
    tally.same("reset within the minute", true, (1..=60).contains(&reset));

    tally.finish();
}

/// A reload error keeps the old rules (config_load_success 2, config_load_error 1 after a good
/// reload); with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED health waits for a rule set.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn reload_and_health() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.4 reload and health");
    let rules = fixture("basic_config.yaml");
    let mut replay =
        Replay::start(&[("basic_config.yaml", &rules)], &[], &redis_addr(&redis)).await;
    replay.write_rules(
        "basic_config.yaml",
        "domain: test-domain\ndescriptors: [a, b]\n",
    );
    eventually(
        Duration::from_secs(30),
        "the bad reload is counted",
        async || replay.plain("ratelimit_service_config_load_error").await >= 1.0,
    )
    .await;
    let response = replay
        .call(request(
            "test-domain",
            vec![descriptor(&[("key2", "kept")])],
        ))
        .await;
    tally.same("old rules kept", "OK", seen(&response, 0).code);
    tally.same(
        "old rules kept (limit)",
        true,
        seen(&response, 0).limit.is_some(),
    );
    replay.write_rules("basic_config.yaml", &rules);
    eventually(
        Duration::from_secs(30),
        "the good reload is counted",
        async || replay.plain("ratelimit_service_config_load_success").await >= 2.0,
    )
    .await;
    let counts = (
        replay.plain("ratelimit_service_config_load_success").await,
        replay.plain("ratelimit_service_config_load_error").await,
    );
    tally.same("load counters", (2.0, 1.0), counts);

    let env = [("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")];
    let empty = Replay::start_bare(&[], &env, &redis_addr(&redis)).await;
    let health = http1::get(empty.ratelimit.http, "/healthcheck", &[]);
    tally.same("unhealthy without rules", true, health.status != 200);
    let mut health = crate::common::health_client(empty.ratelimit.grpc).await;
    let status = crate::common::health_status(&mut health, "").await;
    tally.same(
        "gRPC health NOT_SERVING without rules",
        "NotServing".to_owned(),
        format!("{status:?}"),
    );
    empty.write_rules("basic_config.yaml", &rules);
    poll(Duration::from_secs(30), "healthy once rules load", || {
        (http1::get(empty.ratelimit.http, "/healthcheck", &[]).status == 200).then_some(())
    });
    let mut status = crate::common::health_status(&mut health, "").await;
    // (gRPC health follows the same state; it is polled as /healthcheck was)
    crate::common::within(Duration::from_secs(30), async || {
        status = crate::common::health_status(&mut health, "").await;
        format!("{status:?}") == "Serving"
    })
    .await;
    tally.same(
        "gRPC health SERVING with rules",
        "Serving".to_owned(),
        format!("{status:?}"),
    );
    tally.finish();
}
