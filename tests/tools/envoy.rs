//! End-to-end tests through a real Envoy: HTTP filter `ratelimit` -> the real sluice binary.

use crate::common;

use std::net::IpAddr;
use std::time::Duration;

use common::envoy::Stack;
use common::http1::{self, Response};
use common::process::poll;

/// `(generic_key=per_key, key=*)`: 3 per second per key, named `per_key`. The sliding log is
/// exact, so the fourth call inside any one second is refused however slowly the machine runs.
const PER_KEY_3_PER_SECOND: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: per_key
    descriptors:
      - key: key
        rate_limit: { name: per_key, algorithm: sliding_log, unit: second, requests_per_unit: 3 }
"#;

fn header_u64(response: &Response, name: &str) -> u64 {
    let value = response.expect_header(name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {value:?} is not a number"))
}

/// A key gets 3 OKs then a 429 with Retry-After and limit headers; others pass; it passes after.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn a_key_is_limited_then_passes_again_after_the_advertised_wait() {
    let stack = Stack::start(PER_KEY_3_PER_SECOND, &[], false);
    let alice = [("x-key", "alice")];
    for remaining in [2, 1, 0] {
        let ok = stack.get("/", &alice);
        assert_eq!(ok.status, 200, "{ok:#?}");
        assert_eq!(header_u64(&ok, "x-ratelimit-remaining"), remaining);
        assert_eq!(ok.expect_header("ratelimit-policy"), r#""per_key";q=3;w=1"#);
        assert!(ok.header("retry-after").is_none(), "{ok:#?}");
    }

    let refused = stack.get("/", &alice);
    assert_eq!(refused.status, 429, "{refused:#?}");
    // The oldest of the three leaves the 1 s log in under a second: rounded up, 1.
    let retry_after = header_u64(&refused, "retry-after");
    assert_eq!(retry_after, 1, "{refused:#?}");
    assert_eq!(refused.expect_header("cache-control"), "no-store");
    assert_eq!(refused.expect_header("x-envoy-ratelimited"), "true");
    assert_eq!(
        refused.expect_header("ratelimit"),
        format!(r#""per_key";r=0;t={retry_after}"#)
    );
    assert_eq!(refused.expect_header("x-ratelimit-remaining"), "0");
    assert!(
        refused
            .expect_header("x-ratelimit-limit")
            .starts_with(r#"3, 3;w=1;name="per_key""#),
        "{refused:#?}"
    );
    header_u64(&refused, "x-ratelimit-reset");
    assert_eq!(stack.upstream.hits(), 3, "a 429 never reaches the upstream");

    let bob = stack.get("/", &[("x-key", "bob")]);
    assert_eq!(bob.status, 200, "another key has its own counter: {bob:#?}");
    assert_eq!(bob.expect_header("x-ratelimit-remaining"), "2");

    // The wait the 429 advertised, measured from after sluice decided: enough by construction.
    std::thread::sleep(Duration::from_secs(retry_after));
    let again = stack.get("/", &alice);
    assert_eq!(again.status, 200, "after Retry-After: {again:#?}");
}

/// generic_key + request_headers nest: one counter per value; a missing header sends nothing.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn nested_descriptors_from_generic_key_and_request_headers() {
    let stack = Stack::start(
        r#"
domain: e2e
descriptors:
  - key: generic_key
    value: nested
    descriptors:
      - key: tenant
        descriptors:
          - key: plan
            value: free
            rate_limit: { unit: minute, requests_per_unit: 2 }
          - key: plan
            rate_limit: { unit: minute, requests_per_unit: 4 }
"#,
        &[],
        false,
    );
    let acme_free = [("x-tenant", "acme"), ("x-plan", "free")];
    assert_eq!(stack.statuses(3, "/nested", &acme_free), [200, 200, 429]);
    let limit = stack.get("/nested", &acme_free);
    assert!(
        limit
            .expect_header("x-ratelimit-limit")
            .starts_with("2, 2;w=60"),
        "{limit:#?}"
    );

    let acme_gold = [("x-tenant", "acme"), ("x-plan", "gold")];
    assert_eq!(
        stack.statuses(5, "/nested", &acme_gold),
        [200, 200, 200, 200, 429]
    );
    let globex_free = [("x-tenant", "globex"), ("x-plan", "free")];
    assert_eq!(stack.statuses(3, "/nested", &globex_free), [200, 200, 429]);

    // No x-plan: Envoy drops the whole descriptor, so nothing limits the request.
    let no_plan = stack.get("/nested", &[("x-tenant", "acme")]);
    assert_eq!(no_plan.status, 200, "{no_plan:#?}");
    assert!(
        no_plan.header("x-ratelimit-limit").is_none(),
        "{no_plan:#?}"
    );
}

/// remote_address counts each client address alone; the client's own x-forwarded-for is ignored.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn remote_address_limits_each_client_address() {
    let stack = Stack::start(
        r#"
domain: e2e
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 2 }
"#,
        &[],
        false,
    );
    let first: IpAddr = "127.0.0.2".parse().unwrap();
    let second: IpAddr = "127.0.0.3".parse().unwrap();
    let from = |ip, headers: &[(&str, &str)]| {
        http1::get_from(ip, stack.envoy.listener, "/ip", headers).status
    };
    assert_eq!([from(first, &[]), from(first, &[])], [200, 200]);
    assert_eq!(from(first, &[]), 429);
    assert_eq!(
        from(first, &[("x-forwarded-for", "127.0.0.9")]),
        429,
        "Envoy at the edge limits the peer address, not a client-supplied one"
    );
    assert_eq!(
        from(second, &[]),
        200,
        "another address has its own counter"
    );
}

/// A token bucket admits its burst of 5 at once despite a 1/min refill, then refuses.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn token_bucket_admits_a_burst_then_refuses() {
    let stack = Stack::start(
        r#"
domain: e2e
descriptors:
  - key: generic_key
    value: per_key
    descriptors:
      - key: key
        rate_limit: { algorithm: token_bucket, burst: 5, unit: minute, requests_per_unit: 1 }
"#,
        &[],
        false,
    );
    let key = [("x-key", "bursty")];
    assert_eq!(
        stack.statuses(5, "/", &key),
        [200, 200, 200, 200, 200],
        "the burst"
    );
    let refused = stack.get("/", &key);
    assert_eq!(refused.status, 429, "{refused:#?}");
    assert!(
        (1..=60).contains(&header_u64(&refused, "retry-after")),
        "{refused:#?}"
    );
    assert_eq!(stack.get("/", &[("x-key", "calm")]).status, 200);
}

/// Shadow mode: traffic over the limit still passes, and the headers say the limit is spent.
const SHADOW_2_PER_MINUTE: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: per_key
    descriptors:
      - key: key
        shadow_mode: true
        rate_limit: { name: trial, unit: minute, requests_per_unit: 2 }
"#;

/// A shadow_mode rule passes every request while the headers report the limit exhausted.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn shadow_mode_rule_passes_traffic_and_reports_exhaustion() {
    let stack = Stack::start(SHADOW_2_PER_MINUTE, &[], false);
    let key = [("x-key", "trial")];
    assert_eq!(stack.statuses(4, "/", &key), [200, 200, 200, 200]);
    let last = stack.get("/", &key);
    assert_eq!(last.status, 200, "{last:#?}");
    assert_eq!(last.expect_header("x-ratelimit-remaining"), "0");
    assert!(
        last.expect_header("ratelimit")
            .starts_with(r#""trial";r=0;"#),
        "{last:#?}"
    );
    assert_eq!(stack.upstream.hits(), 5);
}

/// `--shadow-mode` passes every request through an ordinary rule; headers still say it is spent.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn global_shadow_mode_passes_traffic() {
    let stack = Stack::start(PER_KEY_3_PER_SECOND, &["--shadow-mode"], false);
    let key = [("x-key", "k")];
    assert_eq!(stack.statuses(5, "/", &key), [200; 5]);
    let last = stack.get("/", &key);
    assert_eq!(
        last.expect_header("x-ratelimit-remaining"),
        "0",
        "{last:#?}"
    );
    assert_eq!(stack.upstream.hits(), 6);
}

/// The over-limit hits a shadow rule let through are counted in sluice's Prometheus metrics.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn shadow_mode_is_counted_in_metrics() {
    let stack = Stack::start(SHADOW_2_PER_MINUTE, &[], false);
    assert_eq!(stack.statuses(5, "/", &[("x-key", "trial")]), [200; 5]);
    let metrics = http1::get(stack.sluice.http_addr, "/metrics", &[]);
    assert_eq!(metrics.status, 200, "{metrics:#?}");
    let shadowed: f64 = metrics
        .body
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_shadow_mode{"))
        .filter(|l| l.contains(r#"domain="e2e""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(shadowed, 3.0, "{}", metrics.body);
}

/// Editing the rule file on disk changes what Envoy enforces, without restarting sluice.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn rule_edited_on_disk_changes_enforcement_without_restart() {
    let stack = Stack::start(&PER_KEY_3_PER_SECOND.replace("3 }", "1000 }"), &[], false);
    assert_eq!(stack.statuses(3, "/", &[("x-key", "before")]), [200; 3]);

    // Replace the file the way a ConfigMap update does: write beside it, then rename over it.
    let dir = stack.sluice.rules_dir();
    let tightened = PER_KEY_3_PER_SECOND.replace("3 }", "1 }");
    std::fs::write(dir.join(".rules.yaml.tmp"), tightened).unwrap();
    std::fs::rename(dir.join(".rules.yaml.tmp"), dir.join("rules.yaml")).unwrap();

    // A fresh key each round: its second request is refused once the new rule is live.
    let mut round = 0;
    poll(
        Duration::from_secs(10),
        "the edited rule takes effect",
        || {
            round += 1;
            let key = format!("after-{round}");
            let statuses = stack.statuses(2, "/", &[("x-key", key.as_str())]);
            (statuses == [200, 429]).then_some(())
        },
    );
}

/// One request through Envoy that passes, then sluice stops (SIGTERM, exit 0): the response
/// to the next request.
fn once_sluice_stopped(stack: &mut Stack) -> Response {
    assert_eq!(stack.get("/", &[("x-key", "k")]).status, 200);
    assert_eq!(stack.sluice.stop().code(), Some(0));
    stack.get("/", &[("x-key", "k")])
}

/// sluice stopped, failure_mode_deny false: Envoy passes and counts failure_mode_allowed.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn sluice_down_with_failure_mode_allow_passes_traffic() {
    let mut stack = Stack::start(PER_KEY_3_PER_SECOND, &[], false);
    let response = once_sluice_stopped(&mut stack);
    assert_eq!(response.status, 200, "{response:#?}");
    assert!(response.header("x-ratelimit-limit").is_none());
    let allowed = "cluster.upstream.ratelimit.failure_mode_allowed";
    assert_eq!(stack.envoy.counter(allowed), 1, "{}", stack.envoy.log());
    assert_eq!(stack.upstream.hits(), 2);
}

/// sluice stopped, failure_mode_deny true: Envoy answers 500 (its default status_on_error).
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn sluice_down_with_failure_mode_deny_refuses_traffic() {
    let mut stack = Stack::start(PER_KEY_3_PER_SECOND, &[], true);
    let response = once_sluice_stopped(&mut stack);
    assert_eq!(response.status, 500, "{response:#?}");
    assert_eq!(stack.envoy.counter("cluster.upstream.ratelimit.error"), 1);
    assert_eq!(stack.upstream.hits(), 1);
}
