//! The vocabulary between the quota book and the RLQS streams: buckets, usage, strategies and
//! assignments.

use std::num::NonZeroU32;

use crate::clock::Nanos;
pub use crate::store::BucketId;

/// One RLQS stream, numbered by the quota book when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

/// One bucket's counts in one report of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The bucket.
    pub bucket: BucketId,
    /// The span the counts cover (0 in the report Envoy sends for a bucket it has just made).
    pub elapsed: Nanos,
    /// Requests Envoy admitted in that span.
    pub allowed: u64,
    /// Requests Envoy refused in that span.
    pub denied: u64,
}

/// How an Envoy should admit a bucket's requests: Envoy's `RateLimitStrategy`, restricted to
/// what Envoy 1.40 enforces (blanket rules and token buckets with whole-second intervals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
    /// `token_bucket`: a bucket of `max_tokens`, refilled by `tokens_per_fill` every
    /// `fill_interval_seconds`.
    TokenBucket {
        /// Capacity (Envoy requires > 0).
        max_tokens: NonZeroU32,
        /// Tokens added per fill.
        tokens_per_fill: NonZeroU32,
        /// Whole seconds between fills (Envoy ignores fractions of a second).
        fill_interval_seconds: NonZeroU32,
    },
}

/// What a stream is told about one bucket: Envoy's `Assignment`, an assignment or an abandon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// `quota_assignment_action`: use `strategy` for `ttl_seconds`.
    Assign {
        /// The bucket.
        bucket: BucketId,
        /// What Envoy enforces.
        strategy: Strategy,
        /// `assignment_time_to_live`, whole seconds.
        ttl_seconds: u32,
    },
    /// `abandon_action`: the server has forgotten the bucket.
    Abandon {
        /// The bucket.
        bucket: BucketId,
    },
}

/// A stream's way to receive assignments it did not ask for (pushed when another stream's
/// report, a reload or a departure moves its share).
pub trait Push: Send + Sync {
    /// Queues `answers` for the stream without waiting. `false` when the stream cannot take them
    /// (gone, or too far behind): the book then treats the stream as closed.
    fn push(&self, answers: Vec<Assignment>) -> bool;
}
