//! Response options end to end through a real Envoy (the `ratelimit` HTTP filter, DRAFT_VERSION_03
//! headers on) in front of the real sluice binary: `x-ratelimit-reset` against `Retry-After`,
//! envoyproxy/ratelimit's headers, and dynamic metadata read by Envoy.

use crate::common;

use common::envoy::{Bootstrap, Envoy, Stack};
use common::http1::{Response, Upstream};
use common::process::Sluice;

/// One request per key per minute, envoyproxy/ratelimit's fixed window: the reset is the time to
/// the next minute, almost never a whole number of seconds.
const ONE_PER_MINUTE: &str = r#"
domain: e2e
descriptors:
  - key: generic_key
    value: per_key
    metadata: { backend: primary, zone: { name: eu } }
    descriptors:
      - key: key
        metadata: { backend: per-key }
        rate_limit: { name: per_key, unit: minute, requests_per_unit: 1, algorithm: fixed_window }
"#;

fn number(response: &Response, name: &str) -> u64 {
    let value = response.expect_header(name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {value:?} is not a number in {response:#?}"))
}

/// Envoy reads only the whole seconds of `duration_until_reset` for `x-ratelimit-reset`; sluice
/// reports whole seconds rounded up, so on a 429 it equals `Retry-After`, and on a 200 it
/// equals the `t` of sluice's `RateLimit` header.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn x_ratelimit_reset_equals_retry_after() {
    let stack = Stack::start(ONE_PER_MINUTE, &[], false);
    let key = [("x-key", "reset")];
    let ok = stack.get("/", &key);
    assert_eq!(ok.status, 200, "{ok:#?}");
    let t = ok
        .expect_header("ratelimit")
        .rsplit_once(";t=")
        .and_then(|(_, t)| t.parse::<u64>().ok())
        .expect("RateLimit has t");
    assert_eq!(number(&ok, "x-ratelimit-reset"), t, "{ok:#?}");
    let refused = stack.get("/", &key);
    if refused.status == 200 {
        // The minute turned between the two calls: the next one is refused.
        let again = stack.get("/", &key);
        return compare_on_429(&again);
    }
    compare_on_429(&refused);
}

fn compare_on_429(refused: &Response) {
    assert_eq!(refused.status, 429, "{refused:#?}");
    let retry_after = number(refused, "retry-after");
    assert!((1..=60).contains(&retry_after), "{refused:#?}");
    assert_eq!(
        number(refused, "x-ratelimit-reset"),
        retry_after,
        "{refused:#?}"
    );
}

/// `--response-headers upstream` with custom names: Envoy passes envoyproxy/ratelimit's three
/// headers to the client on 200 and 429, and sluice adds none of its own.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn upstream_headers_through_envoy() {
    let args = [
        "--response-headers",
        "upstream",
        "--limit-header",
        "X-RL-Limit",
        "--remaining-header",
        "X-RL-Remaining",
        "--reset-header",
        "X-RL-Reset",
    ];
    let stack = Stack::start(ONE_PER_MINUTE, &args, false);
    let key = [("x-key", "upstream")];
    let ok = stack.get("/", &key);
    assert_eq!(ok.status, 200, "{ok:#?}");
    assert_eq!(ok.expect_header("x-rl-limit"), "1");
    assert_eq!(ok.expect_header("x-rl-remaining"), "0");
    let reset = number(&ok, "x-rl-reset");
    assert!((1..=60).contains(&reset), "{ok:#?}");
    let mut refused = stack.get("/", &key);
    if refused.status == 200 {
        refused = stack.get("/", &key);
    }
    assert_eq!(refused.status, 429, "{refused:#?}");
    assert_eq!(refused.expect_header("x-rl-remaining"), "0");
    assert_eq!(
        number(&refused, "x-rl-reset"),
        number(&refused, "x-ratelimit-reset")
    );
    for sluice_own in [
        "ratelimit",
        "ratelimit-policy",
        "retry-after",
        "cache-control",
    ] {
        assert!(refused.header(sluice_own).is_none(), "{refused:#?}");
    }
}

/// `--response-dynamic-metadata`: Envoy stores the Struct under `envoy.filters.http.ratelimit`,
/// where a route's header formatter reads the merged rule metadata.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn dynamic_metadata_reaches_envoy() {
    let sluice = Sluice::start(ONE_PER_MINUTE, &["--response-dynamic-metadata"]);
    let upstream = Upstream::start();
    let bootstrap = Bootstrap {
        sluice: sluice.grpc_addr,
        upstream: upstream.addr,
        failure_mode_deny: false,
    }
    .yaml();
    // The catch-all route answers with two values of the rate-limit filter's metadata.
    let catch_all = "- match: { prefix: \"/\" }\n";
    let with_headers = format!(
        "{catch_all}                response_headers_to_add:
                - header: {{ key: x-rl-backend, value: \"%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:backend)%\" }}
                - header: {{ key: x-rl-domain, value: \"%DYNAMIC_METADATA(envoy.filters.http.ratelimit:domain)%\" }}
"
    );
    assert!(bootstrap.contains(catch_all), "{bootstrap}");
    let envoy = Envoy::start(&bootstrap.replace(catch_all, &with_headers));
    let stack = Stack {
        sluice,
        upstream,
        envoy,
    };
    let ok = stack.get("/", &[("x-key", "meta")]);
    assert_eq!(ok.status, 200, "{ok:#?}");
    assert_eq!(ok.expect_header("x-rl-domain"), "e2e");
    // Only the rule the descriptor reached counts: the parent node has no limit of its own.
    assert_eq!(ok.expect_header("x-rl-backend"), "per-key");
}
