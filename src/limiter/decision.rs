//! The outcome of one call: the overall code, one status per descriptor, response headers and
//! dynamic metadata.

use std::borrow::Cow;
use std::sync::Arc;

use super::HeaderText;
use crate::clock::Nanos;
use crate::rules::Unit;

/// OK or over the limit. Being over the limit is a normal result, never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Let the request through.
    Ok,
    /// Refuse the request.
    OverLimit,
}

/// The limit reported in a status (`current_limit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedLimit {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// The unit; `None` for a `window:` that is no envoyproxy/ratelimit unit (reported as UNKNOWN).
    pub unit: Option<Unit>,
    /// The rule's `name`, if any.
    pub name: Option<Arc<str>>,
}

/// The status of one descriptor, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// OK or OVER_LIMIT (a shadow-mode rule over its limit reports OK).
    pub code: Code,
    /// The applied limit; `None` when no limit applied (no match, whitelist, unlimited, replaced).
    pub limit: Option<ReportedLimit>,
    /// Requests left (`u32::MAX` for unlimited, 0 when over or when no limit applied).
    pub remaining: u32,
    /// On OVER_LIMIT the time after which the same call is admitted; on OK the time until the
    /// counter is back to full allowance; rounded up as the response options say (whole
    /// seconds by default). `None` when no limit applied.
    pub reset_after: Option<Nanos>,
}

impl DescriptorStatus {
    /// OK with no limit: no rule matched, a whitelist entry, or a replaced limit.
    pub fn unlimited_by_absence() -> Self {
        Self {
            code: Code::Ok,
            limit: None,
            remaining: 0,
            reset_after: None,
        }
    }

    /// OK for an `unlimited: true` rule.
    pub fn unlimited() -> Self {
        Self {
            code: Code::Ok,
            limit: None,
            remaining: u32::MAX,
            reset_after: None,
        }
    }
}

/// The answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The overall code.
    pub code: Code,
    /// One status per request descriptor, same order.
    pub statuses: Vec<DescriptorStatus>,
    /// Headers for the response to the client, as the response options choose: draft-10
    /// (`RateLimit-Policy`, `RateLimit`, and on OVER_LIMIT `Retry-After` and `cache-control`),
    /// envoyproxy/ratelimit's three, or none; plus `x-ratelimit-mode: degraded` on a fail-open
    /// answer.
    pub headers: Vec<(Cow<'static, str>, HeaderText)>,
    /// envoyproxy/ratelimit's `dynamic_metadata` Struct, as JSON; `None` unless the response
    /// options ask for it.
    pub dynamic_metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// How the store fared: its round trip, or that the call was answered without it.
    pub store: StoreUse,
}

/// How a call used the counter store (for traces; metrics record the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreUse {
    /// Nothing to count: no descriptor had a counted limit.
    #[default]
    Skipped,
    /// The store answered after this long.
    Answered(std::time::Duration),
    /// The store failed after this long; each rule's `failure_mode` answered (degraded).
    Failed(std::time::Duration),
}
