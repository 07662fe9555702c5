//! RLQS messages ↔ the wing's vocabulary; a report that Envoy's own validation would refuse
//! ends the stream with `INVALID_ARGUMENT`.

use crate::clock::{Nanos, SECOND};
use crate::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket, rate_limit_strategy};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, AbandonAction, QuotaAssignmentAction,
};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction as WireAction;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use crate::proto::envoy::service::rate_limit_quota::v3::{
    BucketId as WireBucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::proto::well_known;
use crate::rlqs::{Assignment, BucketId, Incoming, Report, Strategy, Usage};
use crate::rules::bucket::check_bucket;

/// One message of a stream as the wing takes it: a report, or why it is refused.
pub(super) fn report(message: RateLimitQuotaUsageReports) -> Incoming {
    let usages = message.bucket_quota_usages.into_iter().map(usage);
    match usages.collect::<Result<Vec<Usage>, String>>() {
        Ok(usages) => Incoming::Report(Report {
            domain: message.domain,
            usages,
        }),
        Err(reason) => Incoming::Invalid(reason),
    }
}

/// A usage entry as the book takes it; a bucket without entries, an empty key or value, or a
/// negative elapsed time is the client's mistake.
pub(super) fn usage(wire: BucketQuotaUsage) -> Result<Usage, String> {
    let bucket = bucket_id(wire.bucket_id)?;
    let elapsed = match wire.time_elapsed {
        None => 0,
        Some(d) => elapsed(&d).ok_or_else(|| {
            format!(
                "bucket {}: time_elapsed must not be negative",
                describe(&bucket)
            )
        })?,
    };
    Ok(Usage {
        bucket,
        elapsed,
        allowed: wire.num_requests_allowed,
        denied: wire.num_requests_denied,
    })
}

fn bucket_id(wire: Option<WireBucketId>) -> Result<BucketId, String> {
    let entries = wire.map(|id| id.bucket).unwrap_or_default();
    if entries.is_empty() {
        return Err("a bucket usage needs a bucket_id with at least one entry".into());
    }
    if entries.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
        return Err("bucket_id keys and values must not be empty".into());
    }
    let bucket: BucketId = entries.into_iter().collect();
    check_bucket(&bucket).map_err(|e| format!("bucket {}: {e}", describe(&bucket)))?;
    Ok(bucket)
}

fn elapsed(d: &well_known::Duration) -> Option<Nanos> {
    let seconds = u64::try_from(d.seconds).ok()?;
    let nanos = u64::try_from(d.nanos).ok()?;
    Some(seconds.saturating_mul(SECOND).saturating_add(nanos))
}

/// `{k=v, k=v}` for messages, each key and value escaped and cut to 64 characters (the id may
/// be refused for being too long, or hold control characters).
pub(super) fn describe(bucket: &BucketId) -> String {
    let shown = |text: &str| -> String {
        let cut: String = text.chars().take(64).collect();
        let more = if cut.len() < text.len() { "…" } else { "" };
        format!("{}{more}", cut.escape_debug())
    };
    let entries: Vec<String> = (bucket.iter().take(16))
        .map(|(k, v)| format!("{}={}", shown(k), shown(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// The response carrying `answers`, in their order.
pub(super) fn response(answers: &[Assignment]) -> RateLimitQuotaResponse {
    RateLimitQuotaResponse {
        bucket_action: answers.iter().map(action).collect(),
    }
}

fn action(answer: &Assignment) -> WireAction {
    let (bucket, action) = match answer {
        Assignment::Assign {
            bucket,
            strategy,
            ttl_seconds,
        } => (
            bucket,
            bucket_action::BucketAction::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(seconds(*ttl_seconds)),
                rate_limit_strategy: Some(strategy_message(strategy)),
            }),
        ),
        Assignment::Abandon { bucket } => (
            bucket,
            bucket_action::BucketAction::AbandonAction(AbandonAction {}),
        ),
    };
    WireAction {
        bucket_id: Some(WireBucketId {
            bucket: bucket.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }),
        bucket_action: Some(action),
    }
}

fn strategy_message(strategy: &Strategy) -> RateLimitStrategy {
    use rate_limit_strategy::{BlanketRule, Strategy as Wire};
    let strategy = match strategy {
        Strategy::AllowAll => Wire::BlanketRule(BlanketRule::AllowAll as i32),
        Strategy::DenyAll => Wire::BlanketRule(BlanketRule::DenyAll as i32),
        Strategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        } => Wire::TokenBucket(TokenBucket {
            max_tokens: max_tokens.get(),
            tokens_per_fill: Some(well_known::UInt32Value {
                value: tokens_per_fill.get(),
            }),
            fill_interval: Some(seconds(fill_interval_seconds.get())),
        }),
    };
    RateLimitStrategy {
        strategy: Some(strategy),
    }
}

/// Whole seconds: Envoy 1.40 floors TTLs and fill intervals to seconds.
fn seconds(seconds: u32) -> well_known::Duration {
    well_known::Duration {
        seconds: i64::from(seconds),
        nanos: 0,
    }
}
