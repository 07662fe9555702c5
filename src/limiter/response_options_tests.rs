//! The response options through the whole limiter (real rules, the embedded store, a manual clock):
//! envoyproxy/ratelimit's headers and their choice of status, dynamic metadata and which rules'
//! metadata it merges, global quota mode, and the precision of resets.

use std::sync::Arc;

use arc_swap::ArcSwap;
use serde_json::{Value, json};

use super::*;
use crate::clock::{MILLI, ManualClock, SECOND};
use crate::rules::{LoadOptions, Unit, load_sources};

/// Fixed windows, so resets are predictable: the clock starts 2 s past a minute.
const RULES: &str = r#"
domain: d
descriptors:
  - key: a
    metadata: { route: a, nested: { tier: gold, a_only: 1 } }
    rate_limit: { unit: minute, requests_per_unit: 10, algorithm: fixed_window }
  - key: b
    metadata: { route: b, nested: { tier: silver, b_only: true }, b_key: x }
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: fixed_window }
  - key: one
    metadata: { route: one }
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: fixed_window }
  - key: two
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: fixed_window }
  - key: shadow
    shadow_mode: true
    metadata: { route: shadow }
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: fixed_window }
  - key: quota
    quota_mode: true
    metadata: { route: quota }
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: fixed_window }
  - key: quota_shadow
    quota_mode: true
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: fixed_window }
  - key: free
    metadata: { route: free }
    rate_limit: { unlimited: true }
  - key: white
    metadata: { route: white }
  - key: big
    metadata: { route: big }
    rate_limit: { unit: minute, requests_per_unit: 1, name: big, algorithm: fixed_window }
  - key: small
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: fixed_window, replaces: [{ name: big }] }
"#;

/// 2026-01-01T00:00:02Z.
const START: u64 = 1_767_225_600 * SECOND + 2 * SECOND;

struct Fixture {
    limiter: Limiter,
    clock: ManualClock,
}

fn fixture(options: LimiterOptions) -> Fixture {
    let clock = ManualClock::new(START);
    let limiter = limiter_for(RULES, options, &clock);
    Fixture { limiter, clock }
}

/// A limiter on the rules in `yaml`, the embedded store and `clock` (shared by the limiter's
/// test modules).
pub(super) fn limiter_for(yaml: &str, options: LimiterOptions, clock: &ManualClock) -> Limiter {
    let sources = [("rules.yaml".into(), yaml.into())];
    let rules = load_sources(&sources, &LoadOptions::default()).expect("rules compile");
    Limiter::new(
        Arc::new(ArcSwap::from_pointee(rules)),
        Arc::new(crate::store::MemoryStore::new()),
        Arc::new(clock.clone()),
        options,
        Arc::new(crate::metrics::Metrics::new(0.8, 1_000)),
    )
}

fn upstream_headers() -> LimiterOptions {
    let mut options = LimiterOptions::default();
    options.response.headers = HeaderStyle::Compat(CompatHeaderNames::default());
    options
}

fn with_metadata() -> LimiterOptions {
    let mut options = LimiterOptions::default();
    options.response.dynamic_metadata = true;
    options
}

fn global_quota_mode() -> LimiterOptions {
    LimiterOptions {
        global_quota_mode: true,
        ..LimiterOptions::default()
    }
}

fn request(descriptors: &[(&str, &str)]) -> Request {
    Request {
        domain: "d".into(),
        descriptors: descriptors
            .iter()
            .map(|(k, v)| Descriptor {
                entries: vec![((*k).into(), (*v).into())],
                ..Descriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

impl Fixture {
    fn call(&self, descriptors: &[(&str, &str)]) -> Decision {
        self.check(&request(descriptors))
    }

    fn check(&self, request: &Request) -> Decision {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(self.limiter.check(request)).unwrap()
    }

    /// Calls `(key, value)` alone until nothing remains, so its next call is over its limit.
    fn use_up(&self, key: &str, value: &str) {
        while self.call(&[(key, value)]).statuses[0].remaining > 0 {}
    }
}

fn headers(d: &Decision) -> Vec<(&str, String)> {
    d.headers
        .iter()
        .map(|(k, v)| (k.as_ref(), v.to_string()))
        .collect()
}

fn upstream(limit: &str, remaining: &str, reset: &str) -> Vec<(&'static str, String)> {
    vec![
        (COMPAT_LIMIT_HEADER, limit.to_owned()),
        (COMPAT_REMAINING_HEADER, remaining.to_owned()),
        (COMPAT_RESET_HEADER, reset.to_owned()),
    ]
}

fn assert_upstream(d: &Decision, limit: &str, remaining: &str) {
    let expected = upstream(limit, remaining, "58");
    assert_eq!(headers(d), expected, "{d:#?}");
}

fn codes(d: &Decision) -> Vec<Code> {
    d.statuses.iter().map(|s| s.code).collect()
}

/// envoyproxy/ratelimit's headers describe the first status with the fewest remaining, on OK; on a
/// refusal the last refusing descriptor, whatever its position; and nothing else is added.
#[test]
fn upstream_headers_fewest_remaining_then_last_refusal() {
    let f = fixture(upstream_headers());
    assert_upstream(&f.call(&[("a", "1"), ("b", "1")]), "5", "4");
    // Equal remaining: the first keeps it.
    for _ in 0..3 {
        f.call(&[("b", "e")]);
    }
    assert_upstream(&f.call(&[("two", "t"), ("b", "e")]), "2", "1");
    f.use_up("one", "p");
    f.use_up("two", "q");
    let refused = f.call(&[("two", "q"), ("b", "2"), ("one", "p")]);
    assert_eq!(refused.code, Code::OverLimit);
    assert_upstream(&refused, "1", "0");
    let refused = f.call(&[("one", "p"), ("b", "2"), ("two", "q")]);
    assert_upstream(&refused, "2", "0");
}

/// A quota-mode refusal is chosen only by its remaining, never as a refusal; a shadow-mode
/// status (OK, 0 remaining) is chosen by its remaining; global shadow mode keeps the headers.
#[test]
fn compat_headers_with_quota_mode_shadow_and_global_shadow() {
    let f = fixture(upstream_headers());
    f.use_up("quota", "x");
    f.call(&[("two", "z")]);
    // two:z has 0 remaining first; the quota-mode refusal after it does not take its place.
    let d = f.call(&[("two", "z"), ("quota", "x")]);
    assert_eq!(
        (d.code, codes(&d)),
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
    assert_upstream(&d, "2", "0");
    f.use_up("shadow", "s");
    let d = f.call(&[("a", "s"), ("shadow", "s")]);
    assert_eq!(d.code, Code::Ok);
    assert_upstream(&d, "2", "0");

    let mut options = upstream_headers();
    options.global_shadow_mode = true;
    let f = fixture(options);
    f.call(&[("one", "g")]);
    let d = f.call(&[("a", "g"), ("one", "g")]);
    assert_eq!((d.code, codes(&d)[1]), (Code::Ok, Code::OverLimit));
    assert_upstream(&d, "1", "0");
}

/// No headers when no status has a limit (envoyproxy/ratelimit mode), or when asked for none;
/// draft-10 stays the default.
#[test]
fn no_headers_without_a_limit_or_with_none() {
    let f = fixture(upstream_headers());
    let d = f.call(&[("nothing", "x"), ("free", "x"), ("white", "x")]);
    assert!(d.headers.is_empty(), "{d:#?}");
    let mut options = LimiterOptions::default();
    options.response.headers = HeaderStyle::None;
    let f = fixture(options);
    f.use_up("one", "n");
    let d = f.call(&[("one", "n")]);
    assert_eq!(d.code, Code::OverLimit);
    assert!(d.headers.is_empty(), "{d:#?}");
    let f = fixture(LimiterOptions::default());
    f.use_up("one", "n");
    let refused = f.call(&[("one", "n")]);
    let names: Vec<&str> = headers(&refused).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        names,
        [
            "RateLimit-Policy",
            "RateLimit",
            "Retry-After",
            "cache-control"
        ]
    );
}

/// The Struct lists the call (domain, each descriptor's entries) and merges the metadata of
/// the rules that passed, the first value winning; no `hitsAddend` for a call's 0.
#[test]
fn dynamic_metadata_lists_the_call_and_merges_passed_rules() {
    let f = fixture(with_metadata());
    let d = f.call(&[("b", "1"), ("a", "1")]);
    let expected = json!({
        "domain": "d",
        "descriptors": [{"entries": ["b=1"]}, {"entries": ["a=1"]}],
        "metadata": {
            "route": "b",
            "nested": {"tier": "silver", "b_only": true, "a_only": 1},
            "b_key": "x"
        }
    });
    assert_eq!(d.dynamic_metadata.map(Value::Object), Some(expected));
    // The first rule's stored metadata did not change (envoyproxy/ratelimit's merge writes into
    // it).
    let d = f.call(&[("b", "2")]);
    assert_eq!(
        d.dynamic_metadata.unwrap()["metadata"],
        json!({"route": "b", "nested": {"tier": "silver", "b_only": true}, "b_key": "x"})
    );
    assert!(
        fixture(LimiterOptions::default())
            .call(&[("a", "1")])
            .dynamic_metadata
            .is_none()
    );
}

/// Only passed descriptors contribute: a shadow rule over its limit passed; an ordinary or
/// quota-mode refusal, an unlimited rule, a node without a limit, a replaced limit and no
/// match do not. The Struct is there even when nothing matched.
#[test]
fn dynamic_metadata_merges_only_passed_descriptors() {
    let f = fixture(with_metadata());
    for key in ["one", "shadow", "quota"] {
        f.use_up(key, "x");
    }
    let d = f.call(&[
        ("one", "x"),
        ("quota", "x"),
        ("free", "x"),
        ("white", "x"),
        ("big", "x"),
        ("small", "x"),
        ("shadow", "x"),
    ]);
    assert_eq!(d.code, Code::OverLimit);
    let metadata = d.dynamic_metadata.unwrap();
    assert_eq!(metadata["metadata"], json!({"route": "shadow"}));
    assert_eq!(metadata["descriptors"].as_array().unwrap().len(), 7);
    let d = f.call(&[("nothing", "x")]);
    assert_eq!(
        d.dynamic_metadata.map(Value::Object),
        Some(json!({"domain": "d", "descriptors": [{"entries": ["nothing=x"]}]}))
    );
}

/// The call's `hitsAddend` when not 0; a descriptor's `hitsAddend` when set, even 0; its
/// `limit` override as Go's prototext.
#[test]
fn dynamic_metadata_carries_hits_and_overrides() {
    let f = fixture(with_metadata());
    let mut call = request(&[("a", "h"), ("nothing", "o")]);
    call.hits_addend = 3;
    call.descriptors[0].hits_addend = Some(0);
    call.descriptors[1].limit_override = Some(LimitOverride {
        requests_per_unit: 7,
        unit: Unit::Hour,
    });
    let d = f.check(&call);
    assert_eq!(
        d.dynamic_metadata.map(Value::Object),
        Some(json!({
            "domain": "d",
            "descriptors": [
                {"entries": ["a=h"], "hitsAddend": 0},
                {"entries": ["nothing=o"], "limit": "requests_per_unit:7 unit:HOUR"}
            ],
            "hitsAddend": 3,
            "metadata": {"route": "a", "nested": {"tier": "gold", "a_only": 1}}
        }))
    );
}

/// Global quota mode: refused only when every descriptor but unlimited ones is over; the
/// per-descriptor codes stay as they are; the call that passes is charged.
#[test]
fn global_quota_mode_refuses_only_when_every_descriptor_is_over() {
    let f = fixture(global_quota_mode());
    f.use_up("one", "x");
    let d = f.call(&[("one", "x"), ("two", "y")]);
    assert_eq!(
        (d.code, codes(&d)),
        (Code::Ok, vec![Code::OverLimit, Code::Ok])
    );
    assert_eq!(f.call(&[("two", "y")]).statuses[0].remaining, 0, "charged");
    let d = f.call(&[("one", "x"), ("two", "y")]);
    assert_eq!(d.code, Code::OverLimit);
    // An unlimited descriptor is left out.
    assert_eq!(f.call(&[("one", "x"), ("free", "y")]).code, Code::OverLimit);
}

/// Under global quota mode a descriptor no limit applies to (no match, a node without a
/// limit, a replaced limit) or a shadow-mode rule passes as a quota-mode descriptor, so the call is
/// OK, and its admitted counters are charged.
#[test]
fn global_quota_mode_passes_with_an_unlimited_by_absence_or_shadow_descriptor() {
    let f = fixture(global_quota_mode());
    f.use_up("one", "x");
    f.use_up("small", "x");
    f.use_up("shadow", "x");
    for other in [("nothing", "x"), ("white", "x"), ("shadow", "x")] {
        let d = f.call(&[("one", "x"), other]);
        assert_eq!(d.code, Code::Ok, "{other:?}: {d:#?}");
    }
    assert_eq!(
        f.call(&[("one", "x"), ("small", "x")]).code,
        Code::OverLimit
    );
    let d = f.call(&[("one", "x"), ("small", "x"), ("big", "x")]);
    assert_eq!(d.code, Code::Ok, "big is replaced: {d:#?}");
    // Passing because of an unmatched descriptor still charges what fits, even when every
    // counted quota-mode descriptor is over (only a shadow rule fits here).
    let d = f.call(&[("one", "x"), ("nothing", "x"), ("shadow", "c")]);
    assert_eq!((d.code, d.statuses[2].remaining), (Code::Ok, 1));
    assert_eq!(f.call(&[("shadow", "c")]).statuses[0].remaining, 0);
}

/// Global shadow mode applies after quota mode: statuses keep OVER_LIMIT, the call passes.
#[test]
fn global_shadow_applies_after_global_quota_mode() {
    let mut options = global_quota_mode();
    options.global_shadow_mode = true;
    let f = fixture(options);
    f.call(&[("one", "x")]);
    let d = f.call(&[("one", "x")]);
    assert_eq!((d.code, codes(&d)), (Code::Ok, vec![Code::OverLimit]));
}

/// A rule in both quota and shadow mode is a quota-mode descriptor that always passes (as
/// envoyproxy/ratelimit), so a refused quota-mode descriptor beside it does not refuse the call.
#[test]
fn a_rule_in_quota_and_shadow_mode_passes() {
    let f = fixture(LimiterOptions::default());
    f.use_up("quota", "x");
    f.use_up("quota_shadow", "x");
    assert_eq!(f.call(&[("quota", "x")]).code, Code::OverLimit);
    let d = f.call(&[("quota", "x"), ("quota_shadow", "x"), ("two", "w")]);
    assert_eq!(
        (d.code, codes(&d)),
        (Code::Ok, vec![Code::OverLimit, Code::Ok, Code::Ok])
    );
    assert_eq!(f.call(&[("two", "w")]).statuses[0].remaining, 0, "charged");
}

/// Resets are whole seconds rounded up by default, so Retry-After, RateLimit's `t` and the
/// status agree; milliseconds on request.
#[test]
fn reset_precision() {
    let f = fixture(LimiterOptions::default());
    f.clock.advance(std::time::Duration::from_millis(300));
    f.call(&[("one", "r")]);
    let d = f.call(&[("one", "r")]);
    assert_eq!(d.statuses[0].reset_after, Some(58 * SECOND));
    let h = headers(&d);
    assert!(h.contains(&("Retry-After", "58".to_owned())), "{h:?}");
    let mut options = LimiterOptions::default();
    options.response.reset_precision = ResetPrecision::Milliseconds;
    let f = fixture(options);
    f.clock.advance(std::time::Duration::from_millis(300));
    let d = f.call(&[("one", "r")]);
    assert_eq!(d.statuses[0].reset_after, Some(57_700 * MILLI));
}
