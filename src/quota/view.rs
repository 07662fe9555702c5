//! What the quota book tells its callers: a report's answers and tallies, its error, and a
//! snapshot of every bucket for the operator page and the metrics.

use std::sync::Arc;

use crate::rules::bucket::QuotaRate;

use super::assign::{Assignment, BucketId, Strategy, StreamId};

/// What one usage report produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reported {
    /// This stream's answers, to send in order after the pushes the report caused. Every
    /// reported bucket gets one (a new or changed strategy, or the same one again to restart its
    /// time to live), except buckets of a counted limit during the warm-up after a start.
    pub answers: Vec<Assignment>,
    /// One tally per reported bucket, for the metrics.
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

/// Why the book refused a report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// The stream would report more buckets than
    /// [`MAX_BUCKETS_PER_STREAM`](super::MAX_BUCKETS_PER_STREAM) (gRPC `RESOURCE_EXHAUSTED`).
    #[error("a stream may report at most {limit} buckets")]
    TooManyBuckets {
        /// The cap.
        limit: usize,
    },
    /// The stream is not open (never opened, or closed).
    #[error("unknown or closed quota stream")]
    UnknownStream,
}

/// One bucket as the book holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketView {
    /// The domain of the streams that report it.
    pub domain: Arc<str>,
    /// The bucket.
    pub bucket: BucketId,
    /// The rule it reaches (`None`: no rule).
    pub rule: Option<Arc<str>>,
    /// The limit being shared (`None` unless the rule counts).
    pub limit: Option<QuotaRate>,
    /// Every stream that holds or reports it.
    pub holders: Vec<HolderView>,
}

/// One stream's part of a bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderView {
    /// The stream.
    pub stream: StreamId,
    /// Its demand, requests per second (`None` until a report with elapsed time).
    pub demand_per_second: Option<f64>,
    /// The strategy the book last sent it (`None`: nothing yet).
    pub strategy: Option<Strategy>,
    /// Its share of the limit in requests per second (0 for blanket rules and nothing).
    pub rate_per_second: f64,
    /// `false` once the stream has closed or stopped reporting the bucket: its share stays
    /// reserved until its assignment has expired in the Envoy.
    pub reporting: bool,
}
