//! The message mapping: what Envoy's validation would refuse is refused, answers keep their
//! order and whole seconds.

use std::num::NonZeroU32;

use super::convert;
use crate::proto::envoy::service::rate_limit_quota::v3::BucketId;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use crate::proto::well_known;
use crate::rlqs::{Assignment, Incoming, Strategy};

fn usage(entries: &[(&str, &str)], seconds: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }),
        time_elapsed: Some(well_known::Duration { seconds, nanos: 0 }),
        num_requests_allowed: 3,
        num_requests_denied: 1,
    }
}

#[test]
fn a_usage_maps_to_the_book_and_bad_ones_are_refused() {
    let ok = convert::usage(usage(&[("tenant", "a")], 5)).unwrap();
    assert_eq!(ok.elapsed, 5 * crate::clock::SECOND);
    assert_eq!((ok.allowed, ok.denied), (3, 1));
    for bad in [
        usage(&[], 5),
        usage(&[("", "a")], 5),
        usage(&[("k", "")], 5),
        usage(&[("k", "v")], -1),
    ] {
        assert!(convert::usage(bad).is_err());
    }
    let long = "x".repeat(crate::rules::bucket::MAX_BUCKET_TEXT + 1);
    assert!(convert::usage(usage(&[("k", &long)], 5)).is_err());
}

#[test]
fn answers_keep_their_order_and_whole_seconds() {
    let bucket = |v: &str| {
        [("tenant".to_string(), v.to_string())]
            .into_iter()
            .collect()
    };
    let n = |v| NonZeroU32::new(v).unwrap();
    let answers = [
        Assignment::Assign {
            bucket: bucket("a"),
            strategy: Strategy::TokenBucket {
                max_tokens: n(10),
                tokens_per_fill: n(3),
                fill_interval_seconds: n(7),
            },
            ttl_seconds: 10,
        },
        Assignment::Abandon {
            bucket: bucket("b"),
        },
    ];
    let response = convert::response(&answers);
    assert_eq!(response.bucket_action.len(), 2);
    let first = format!("{:?}", response.bucket_action[0]);
    assert!(
        first.contains("max_tokens: 10") && first.contains("seconds: 7"),
        "{first}"
    );
    assert!(format!("{:?}", response.bucket_action[1]).contains("AbandonAction"));
}

/// A message with one bad usage is refused whole, naming the bucket escaped and cut short.
#[test]
fn a_bad_usage_refuses_the_message_and_is_quoted_safely() {
    use crate::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
    let hostile = format!("\u{1b}[31m{}", "x".repeat(200));
    let message = RateLimitQuotaUsageReports {
        domain: "d".into(),
        bucket_quota_usages: vec![usage(&[("tenant", "a")], 5), usage(&[("k", &hostile)], -1)],
    };
    let Incoming::Invalid(reason) = convert::report(message) else {
        panic!("refused");
    };
    assert!(
        !reason.contains('\u{1b}') && reason.contains("\\u{1b}"),
        "{reason}"
    );
    assert!(reason.len() < 200, "{reason}");
}
