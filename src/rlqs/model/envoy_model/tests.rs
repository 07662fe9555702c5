//! The Envoy model does what Envoy 1.40 was seen to do.

use std::num::NonZeroU32;

use super::*;

fn bucket() -> BucketId {
    BucketId::from([("name".to_string(), "staging".to_string())])
}

fn tb(max: u32, tpf: u32, interval: u32) -> Strategy {
    Strategy::TokenBucket {
        max_tokens: NonZeroU32::new(max).unwrap(),
        tokens_per_fill: NonZeroU32::new(tpf).unwrap(),
        fill_interval_seconds: NonZeroU32::new(interval).unwrap(),
    }
}

fn assign(strategy: Strategy, ttl_seconds: u32) -> Vec<Assignment> {
    vec![Assignment::Assign {
        bucket: bucket(),
        strategy,
        ttl_seconds,
    }]
}

const T0: Nanos = 1_000 * SECOND;

#[test]
fn a_new_bucket_reports_at_once_and_then_every_five_seconds() {
    let mut envoy = EnvoyModel::new(Strategy::AllowAll);
    assert_eq!(envoy.request(&bucket(), 1, T0), 1);
    let first = envoy.immediate(T0);
    assert_eq!((first[0].elapsed, first[0].allowed), (0, 1));
    assert!(envoy.immediate(T0).is_empty());
    assert!(!envoy.due(T0 + 4 * SECOND));
    envoy.request(&bucket(), 3, T0 + 2 * SECOND);
    assert!(envoy.due(T0 + 5 * SECOND));
    let report = envoy.report(T0 + 5 * SECOND);
    assert_eq!((report[0].elapsed, report[0].allowed), (5 * SECOND, 3));
    assert!(envoy.due(T0 + 10 * SECOND) && !envoy.due(T0 + 9 * SECOND));
}

#[test]
fn an_assigned_token_bucket_starts_full_and_refills_by_whole_seconds() {
    let mut envoy = EnvoyModel::new(Strategy::DenyAll);
    assert_eq!(envoy.request(&bucket(), 1, T0), 0);
    assert_eq!(envoy.apply(&assign(tb(10, 10, 60), 30), 0, T0), 10.0);
    assert_eq!(envoy.request(&bucket(), 25, T0), 10);
    // 10 per 60 s: six seconds bring one token.
    assert_eq!(envoy.request(&bucket(), 5, T0 + 6 * SECOND), 1);
}

#[test]
fn the_same_strategy_again_keeps_the_tokens() {
    let mut envoy = EnvoyModel::new(Strategy::DenyAll);
    envoy.request(&bucket(), 1, T0);
    envoy.apply(&assign(tb(10, 10, 60), 30), 0, T0);
    envoy.request(&bucket(), 8, T0);
    assert_eq!(envoy.apply(&assign(tb(10, 10, 60), 30), 0, T0), 0.0);
    assert_eq!(envoy.request(&bucket(), 5, T0), 2);
}

#[test]
fn a_changed_bucket_keeps_its_fill_ratio() {
    let mut envoy = EnvoyModel::new(Strategy::DenyAll);
    envoy.request(&bucket(), 1, T0);
    envoy.apply(&assign(tb(5, 1, 3_600), 30), 0, T0);
    envoy.request(&bucket(), 2, T0);
    // 3 of 5 left, changed to a max of 8: floor(8 × 3 / 5) = 4, one more than before.
    assert_eq!(envoy.apply(&assign(tb(8, 1, 3_600), 30), 0, T0), 1.0);
    assert_eq!(envoy.request(&bucket(), 10, T0), 4);
}

#[test]
fn a_change_of_the_interval_seconds_alone_is_ignored() {
    let mut envoy = EnvoyModel::new(Strategy::DenyAll);
    envoy.request(&bucket(), 1, T0);
    envoy.apply(&assign(tb(10, 10, 1), 30), 0, T0);
    envoy.apply(&assign(tb(10, 10, 10), 30), 0, T0);
    assert_eq!(envoy.held(T0)[0].1, tb(10, 10, 1));
}

#[test]
fn after_a_blanket_rule_a_token_bucket_starts_full() {
    let mut envoy = EnvoyModel::new(Strategy::DenyAll);
    envoy.request(&bucket(), 1, T0);
    envoy.apply(&assign(Strategy::DenyAll, 30), 0, T0);
    assert_eq!(envoy.request(&bucket(), 3, T0), 0);
    assert_eq!(envoy.apply(&assign(tb(4, 1, 60), 30), 0, T0), 4.0);
    assert_eq!(envoy.request(&bucket(), 9, T0), 4);
}

#[test]
fn an_assignment_expires_to_the_fallback_and_comes_back_full() {
    let mut envoy = EnvoyModel::new(Strategy::DenyAll);
    envoy.request(&bucket(), 1, T0);
    envoy.apply(&assign(tb(4, 1, 60), 15), 0, T0);
    envoy.request(&bucket(), 4, T0);
    assert!(envoy.held(T0 + 14 * SECOND).len() == 1);
    assert!(envoy.held(T0 + 15 * SECOND).is_empty());
    assert_eq!(envoy.request(&bucket(), 2, T0 + 15 * SECOND), 0);
    assert_eq!(
        envoy.apply(&assign(tb(4, 1, 60), 15), 0, T0 + 16 * SECOND),
        4.0
    );
}

#[test]
fn abandon_drops_the_bucket_and_its_next_request_reports_again() {
    let mut envoy = EnvoyModel::new(Strategy::AllowAll);
    envoy.request(&bucket(), 1, T0);
    envoy.immediate(T0);
    envoy.apply(&[Assignment::Abandon { bucket: bucket() }], 0, T0);
    assert!(envoy.report(T0 + 5 * SECOND).is_empty());
    envoy.request(&bucket(), 1, T0 + 6 * SECOND);
    assert_eq!(envoy.immediate(T0 + 6 * SECOND).len(), 1);
}

#[test]
fn answers_for_unknown_buckets_are_ignored() {
    let mut envoy = EnvoyModel::new(Strategy::AllowAll);
    assert_eq!(envoy.apply(&assign(tb(4, 1, 60), 15), 0, T0), 0.0);
    assert!(envoy.held(T0).is_empty());
}
