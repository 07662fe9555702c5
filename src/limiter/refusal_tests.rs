//! `--refusal-metadata` through the whole limiter: which rules' names `sluice_refused_by` carries,
//! in what order, beside envoyproxy/ratelimit's metadata, and nothing when nothing refused.

use serde_json::{Value, json};

use super::response_options_tests::limiter_for;
use super::*;
use crate::clock::{ManualClock, SECOND};

/// Named and unnamed limits, a rule in shadow mode, quota-mode rules: each allows 1 a minute.
const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/budgets/refusals.yaml"
));

fn options(upstream: bool) -> LimiterOptions {
    let mut options = LimiterOptions::default();
    options.response.refusal_metadata = true;
    options.response.dynamic_metadata = upstream;
    options
}

/// A call of one descriptor per `key` or `key=value` (value `v` by default); `tenant`
/// carries a second entry `model`.
fn request(descriptors: &[&str]) -> Request {
    Request {
        domain: "d".into(),
        descriptors: descriptors
            .iter()
            .map(|text| {
                let (key, value) = text.split_once('=').unwrap_or((text, "v"));
                let mut entries = vec![(key.into(), value.into())];
                if key == "tenant" {
                    entries.push(("model".into(), "m".into()));
                }
                Descriptor {
                    entries,
                    ..Descriptor::default()
                }
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Calls `descriptors` twice on a fresh limiter: the second call's `sluice_refused_by`.
fn refused_by(descriptors: &[&str], upstream: bool) -> (Option<Value>, Decision) {
    let clock = ManualClock::new(1_767_225_600 * SECOND);
    let limiter = limiter_for(RULES, options(upstream), &clock);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let call = || {
        runtime
            .block_on(limiter.check(&request(descriptors)))
            .unwrap()
    };
    let first = call();
    assert_eq!(
        first.dynamic_metadata.is_some(),
        upstream,
        "nothing refused: {first:?}"
    );
    let second = call();
    let names = second
        .dynamic_metadata
        .as_ref()
        .and_then(|m| m.get("sluice_refused_by").cloned());
    (names, second)
}

/// Every refusing descriptor's rule, in descriptor order: a limit's name, else the node's full
/// key; a descriptor with several limits by its binding one; a shadow-mode rule that would have
/// refused; the same rule twice when two descriptors hit it.
#[test]
fn names_the_refusing_rules_in_descriptor_order() {
    let call = ["plain", "named", "tenant", "shadow", "plain=w"];
    let (names, decision) = refused_by(&call, false);
    assert_eq!(decision.code, Code::OverLimit);
    assert_eq!(
        names,
        Some(json!("d.plain,per_user,tokens_per_minute,trial,d.plain"))
    );
}

/// Shadow mode alone refuses nothing, yet names the rule that would have.
#[test]
fn a_shadow_mode_rule_is_named_though_the_call_passes() {
    let (names, decision) = refused_by(&["shadow"], false);
    assert_eq!(decision.code, Code::Ok);
    assert_eq!(names, Some(json!("trial")));
}

/// A quota-mode descriptor over its limit is named, even while another quota-mode descriptor
/// lets the call through.
#[test]
fn quota_mode_descriptors_over_their_limit_are_named() {
    let clock = ManualClock::new(1_767_225_600 * SECOND);
    let limiter = limiter_for(RULES, options(false), &clock);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(limiter.check(&request(&["quota"])))
        .unwrap();
    let passed = runtime
        .block_on(limiter.check(&request(&["quota", "spare"])))
        .unwrap();
    assert_eq!(passed.code, Code::Ok);
    let names = passed
        .dynamic_metadata
        .and_then(|m| m.get("sluice_refused_by").cloned());
    assert_eq!(names, Some(json!("quota")));
}

/// Beside envoyproxy/ratelimit's metadata the key is added and nothing of theirs changes.
#[test]
fn beside_the_compat_metadata() {
    let (_, decision) = refused_by(&["plain", "named"], true);
    let metadata = decision.dynamic_metadata.expect("metadata");
    assert_eq!(metadata["domain"], "d");
    assert_eq!(metadata["descriptors"].as_array().map(Vec::len), Some(2));
    assert_eq!(metadata["sluice_refused_by"], "d.plain,per_user");
    assert_eq!(metadata.len(), 3, "{metadata:?}");
}

/// Without the option, no metadata at all.
#[test]
fn off_by_default() {
    let clock = ManualClock::new(1_767_225_600 * SECOND);
    let limiter = limiter_for(RULES, LimiterOptions::default(), &clock);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for _ in 0..2 {
        let d = runtime
            .block_on(limiter.check(&request(&["plain"])))
            .unwrap();
        assert_eq!(d.dynamic_metadata, None);
    }
}
