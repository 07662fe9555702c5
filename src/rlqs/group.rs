//! A portion above this replica's: the part of a limit granted to the group of replicas it
//! belongs to (one region's portion of a `scope: global` limit), which cuts what the book
//! hands out and learns from it the demand of the buckets the group shares.

use crate::clock::Nanos;

use super::assign::BucketId;
use super::view::BucketView;

/// The group of replicas this one belongs to, for the limits it shares with other groups.
pub trait GroupPortion: Send + Sync {
    /// The part (0..=1) of bucket `bucket` of `domain`'s limit this replica's group may hand
    /// out at `now`: 1 for a limit the group does not share.
    fn portion(&self, domain: &str, bucket: &BucketId, now: Nanos) -> f64;

    /// The buckets of enforced limits the book holds, with its streams' demand, given once a
    /// second on the book's thread (keep it quick): what the group's next claim asks for.
    fn note(&self, buckets: &[BucketView], now: Nanos);
}
