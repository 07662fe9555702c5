//! The vocabulary between the book and the RLQS streams: buckets, usage, strategies,
//! assignments, and what goes out to a stream.

use std::num::NonZeroU32;
use std::sync::Arc;

use crate::clock::Nanos;
pub use crate::store::BucketId;

/// One RLQS stream, numbered when it opens.
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

/// What goes out to one stream: answers (to its report, or pushed because another stream's
/// report, a reload, an expiry or a claim moved its share), and for a report, what it counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outgoing {
    /// Assignments to send, in order (none: nothing to send, e.g. during the warm-up).
    pub answers: Vec<Assignment>,
    /// Set on the answer to a report: what the report counted, for the metrics and traces.
    pub reported: Option<Reported>,
}

/// What one report of a stream counted.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// The stream's domain.
    pub domain: Arc<str>,
    /// One tally per reported bucket.
    pub tallies: Vec<Tally>,
}

/// One bucket's counts in one report, as the metrics count them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The rule the bucket reaches (`None`: no rule).
    pub rule: Option<Arc<str>>,
    /// Requests the Envoy admitted.
    pub allowed: u64,
    /// Requests the Envoy refused.
    pub denied: u64,
    /// Requests a shadow rule would have refused (0 unless the rule is in shadow mode).
    pub shadow_refused: u64,
}

/// Where the book sends a stream's answers: every answer of every stream goes this one way (the
/// stream's queue in the server, a mailbox in the simulator).
pub(crate) trait Outbox: Send {
    /// Queues `out` without waiting. `false` when the stream cannot take it (gone, or too far
    /// behind): the book then ends the stream.
    fn send(&self, out: Outgoing) -> bool;

    /// Ends the stream with `error` (it fell behind, or broke a cap): the stream stops reading
    /// and its client is told.
    fn end(&self, error: RlqsError);

    /// Whether the stream's client has gone (nothing it is sent is read any more).
    fn is_gone(&self) -> bool;
}

/// Why a stream was ended by sluice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlqsError {
    /// The client broke a rule of the protocol (gRPC `INVALID_ARGUMENT`).
    #[error("{0}")]
    Invalid(String),
    /// A cap was reached: streams, buckets a stream reports, answers waiting to be read (gRPC
    /// `RESOURCE_EXHAUSTED`).
    #[error("{0}")]
    Exhausted(String),
    /// The stream sent no first report within the bound (gRPC `DEADLINE_EXCEEDED`).
    #[error("no first report within {0:?}: a RLQS stream must name its domain at once")]
    Silent(std::time::Duration),
    /// The server is shutting down (gRPC `UNAVAILABLE`): open a stream to another replica.
    #[error("the server is shutting down")]
    ShuttingDown,
}
