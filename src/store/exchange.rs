//! Sharing one quota (RLQS) limit across sluice replicas: each replica claims a portion of each bucket's
//! limit in the shared store, never more than what the other live replicas leave.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use crate::clock::Nanos;

/// One replica's standing on one bucket, sent at each exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The domain of the bucket.
    pub domain: String,
    /// The bucket.
    pub bucket: BTreeMap<String, String>,
    /// What this replica's streams ask for the bucket, in requests per second.
    pub demand: f64,
    /// The fraction of the limit (0..=1) this replica would like to hand out.
    pub wanted: f64,
}

/// What the exchange answered for one claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Granted {
    /// The fraction of the limit (0..=1) this replica may hand out until its next exchange: at
    /// most `wanted`, and never more than the other live replicas' claims leave.
    pub portion: f64,
    /// The other live replicas' demand for the bucket, in requests per second.
    pub others_demand: f64,
    /// How many other live replicas claim a part of the bucket.
    pub others: u32,
}

/// Why an exchange failed: the store's own error.
pub type ExchangeError = Box<dyn std::error::Error + Send + Sync>;

/// The future of one exchange.
pub type ExchangeFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Granted>, ExchangeError>> + Send + 'a>>;

/// A store that replicas share, able to hold their claims (Redis). A claim lives `ttl`
/// nanoseconds unless renewed, so a replica that dies frees its portion after that; the answer
/// is in the order of `claims`.
pub trait QuotaExchange: Send + Sync {
    /// Records `claims` of `replica` at `now` and answers each.
    fn exchange<'a>(
        &'a self,
        replica: &'a str,
        claims: &'a [Claim],
        ttl: Nanos,
        now: Nanos,
    ) -> ExchangeFuture<'a>;
}
