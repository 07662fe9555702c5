//! How much of a limit this replica may hand out when several sluice replicas share it.

use crate::rules::bucket::QuotaRate;

use crate::store::BucketId;

/// This replica's part of a limit when several sluice replicas share it (on the Redis store,
/// from the demand each replica reports there). Called under the book's lock on every re-split,
/// so it must answer from what it already knows, never wait.
pub trait Portion: Send + Sync {
    /// The fraction (0..=1) of `rate` this replica may hand out for `bucket` of `domain`, given
    /// the demand its own streams report (requests per second, summed).
    fn portion(
        &self,
        domain: &str,
        bucket: &BucketId,
        rate: &QuotaRate,
        local_demand_per_second: f64,
    ) -> f64;
}

/// One replica alone: it may hand out the whole limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct WholeLimit;

impl Portion for WholeLimit {
    fn portion(&self, _: &str, _: &BucketId, _: &QuotaRate, _: f64) -> f64 {
        1.0
    }
}
