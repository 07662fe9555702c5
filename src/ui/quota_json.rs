//! The page's view of the quota book: every bucket with each stream's demand and share.

use serde_json::{Value, json};

use crate::quota::{BucketView, Strategy};

/// Most buckets listed (the first by domain and bucket id); the count says how many there are.
pub(super) const MAX_LISTED: usize = 200;

/// The buckets, each with its rule, limit and holders.
pub(super) fn buckets(views: &[BucketView]) -> Value {
    json!({
        "count": views.len(),
        "buckets": views.iter().take(MAX_LISTED).map(bucket).collect::<Vec<_>>(),
    })
}

fn bucket(view: &BucketView) -> Value {
    let id: Vec<String> = view
        .bucket
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    json!({
        "domain": &*view.domain,
        "bucket": id.join(","),
        "rule": view.rule.as_deref(),
        "limit": view.limit.map(|l| json!({
            "per_second": l.per_second(),
            "burst": l.burst,
        })),
        "holders": view.holders.iter().map(|h| json!({
            "stream": h.stream.0,
            "demand_per_second": h.demand_per_second,
            "share_per_second": h.rate_per_second,
            "strategy": h.strategy.map(describe),
            "reporting": h.reporting,
        })).collect::<Vec<_>>(),
    })
}

fn describe(strategy: Strategy) -> String {
    match strategy {
        Strategy::AllowAll => "ALLOW_ALL".to_string(),
        Strategy::DenyAll => "DENY_ALL".to_string(),
        Strategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        } => format!("{tokens_per_fill} per {fill_interval_seconds} s, up to {max_tokens}"),
    }
}
