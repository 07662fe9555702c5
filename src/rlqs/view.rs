//! What the book shows of itself: a page of its buckets with each stream's demand and share, for
//! the operator page, and the load figures for the metrics.

use std::sync::Arc;

use crate::rules::bucket::SharedRate;

use super::assign::{BucketId, Strategy, StreamId};

/// The most buckets one page lists, whatever is asked: a page is built on the book's thread, so
/// its cost is bounded however many buckets the book holds.
pub const MAX_PAGE: usize = 200;

/// Which buckets a page lists: in the order the book first saw them, from `after` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageQuery {
    /// List the buckets after this cursor (a page's [`Page::next`]); `None`: from the first.
    pub after: Option<u64>,
    /// At most this many (capped at [`MAX_PAGE`]).
    pub limit: usize,
}

impl Default for PageQuery {
    fn default() -> Self {
        PageQuery {
            after: None,
            limit: MAX_PAGE,
        }
    }
}

/// One page of the book.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// Buckets the book holds in all.
    pub count: usize,
    /// Streams the book serves.
    pub streams: usize,
    /// The buckets of this page.
    pub buckets: Vec<BucketView>,
    /// The cursor of the next page (`None`: this was the last).
    pub next: Option<u64>,
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
    pub limit: Option<SharedRate>,
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

/// How loaded the RLQS wing is, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Streams open, from their opening (bound to a domain or not yet).
    pub streams: usize,
    /// Of those, the streams that have not sent their first report yet.
    pub unbound: usize,
    /// Buckets the book holds.
    pub buckets: usize,
}

/// Requests per second a strategy lets through on average (0 unless a token bucket).
pub(crate) fn rate_of(strategy: Option<Strategy>) -> f64 {
    match strategy {
        Some(Strategy::TokenBucket {
            tokens_per_fill,
            fill_interval_seconds,
            ..
        }) => tokens_per_fill.get() as f64 / fill_interval_seconds.get() as f64,
        _ => 0.0,
    }
}
