//! Sharing one RLQS limit among sluice replicas: each claims its portion in the shared store.
//!
//! A replica never gets more than what the other replicas' reservations leave. A *portion* is a
//! replica's fraction of one limit; a *claim* is the one act by which a replica asks the shared
//! store for it (on Redis, one atomic script run per slot group). With each portion comes a
//! *floor*: the part of it the replica keeps through an outage of the store, which the others'
//! claims leave alone while the replica is a member (it claimed within `member_for`).

use std::future::Future;
use std::pin::Pin;

use super::bucket::BucketId;
use super::error::ClaimError;
use super::region_claim::{RegionClaim, RegionClaimFuture, RegionTerms};
use crate::clock::Nanos;

/// What a replica asks for one bucket when it claims.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The domain of the bucket.
    pub domain: String,
    /// The bucket.
    pub bucket: BucketId,
    /// What this replica's streams ask for the bucket, in requests per second.
    pub demand: f64,
    /// The fraction of the limit (0..=1) this replica would like to hand out.
    pub wanted: f64,
    /// The fraction of the limit (0..=1) this replica may still have handed out under earlier
    /// claims (its live portion, or its floor). A store that lost its portions (Redis came back
    /// empty) grants no more than this while the replicas declare what they hold.
    pub held: f64,
    /// How much longer than the terms' `ttl` and `member_for` this bucket's portion and floor
    /// stay reserved: the shares handed out of it live longer (its streams report less often
    /// than Envoy 1.40's 5 s, so their assignments' TTLs are longer). 0 for most buckets.
    pub reserve_longer: Nanos,
}

/// What a replica got for one claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claimed {
    /// The replica's portion: the fraction of the limit (0..=1) it may hand out until its next
    /// claim; at most `wanted`, and never more than the other live replicas' claims leave.
    pub portion: f64,
    /// The other live replicas' demand for the bucket, in requests per second.
    pub others_demand: f64,
    /// How many other live replicas hold a portion of the bucket.
    pub others: u32,
    /// The part of `portion` (at most an equal part among the bucket's members) that stays
    /// reserved for this replica until `member_for` after the claim, when it cannot claim again.
    pub floor: f64,
    /// Whether the store is settling (it lost its portions lately, see [`ClaimTerms::settle`]):
    /// the portion was cut to what the replica declared it held.
    pub settling: bool,
}

/// The future of one claim.
pub type ClaimFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Claimed>, ClaimError>> + Send + 'a>>;

/// Who claims, when, and for how long what it gets holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTerms<'a> {
    /// The replica's name, unique among the live replicas (and across its own restarts).
    pub replica: &'a str,
    /// The time of the claim (used only with the caller's clock; Redis's own otherwise).
    pub now: Nanos,
    /// How long the portions hold unless claimed again, so a replica that dies frees them.
    pub ttl: Nanos,
    /// How long the floors hold unless claimed again (at least `ttl`): while it does, a replica
    /// that cannot reach the store may go on handing out its floor.
    pub member_for: Nanos,
    /// After the store is found without its portions (new, or emptied by a restart), how long
    /// no claim gets more than the replica declares it `held`: long enough for every live
    /// replica to claim once and so declare what it holds.
    pub settle: Nanos,
}

/// A store that replicas share, able to hold their portions (Redis).
pub trait PortionStore: Send + Sync {
    /// Records the `claims` made on `terms`, atomically per bucket, and answers each, in the
    /// order of `claims`. At any instant the reservations of a bucket (each replica's portion
    /// within `ttl` of its claim, else its floor within `member_for`, each the claim's
    /// `reserve_longer` more) sum to at most the limit.
    fn claim<'a>(&'a self, terms: ClaimTerms<'a>, claims: &'a [Claim]) -> ClaimFuture<'a>;

    /// The same claim one level up, by a region's replica in the global store regions share
    /// (`region_claim`): atomically with the members' floors, answers in the order of `claims`.
    /// A store that cannot hold regions' portions refuses.
    fn claim_in_region<'a>(
        &'a self,
        _terms: RegionTerms<'a>,
        _claims: &'a [RegionClaim],
    ) -> RegionClaimFuture<'a> {
        Box::pin(async { Err("this store cannot hold regions' portions".into()) })
    }
}
