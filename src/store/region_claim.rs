//! Regions sharing one limit through a global store: what a region's replica claims there and
//! what it gets, one level above the replicas' claims of [`super::portion`].
//!
//! A *region* is one deployment with its own store; a *member* is a region the global store has
//! heard of lately. Each member holds, per *unit* (a counter of a `scope: global` limit, or an
//! RLQS bucket of one), a portion claimed like a replica's, and a *floor*: the part of every
//! unit it may always enforce, even cut off from the global store, which the other members'
//! claims can never take while it is a member. A region's replicas claim each under their own
//! name; the region holds the largest portion any of them holds.

use std::future::Future;
use std::pin::Pin;

use super::bucket::BucketId;
use super::error::ClaimError;
use crate::clock::{Nanos, SECOND};

/// The longest any portion in the global store lives unless claimed again (a longer ttl is cut
/// to it), and so how long a raised floor waits before it may be used: by then every portion
/// granted before the raise, which left no room for it, has lapsed.
pub const SETTLE: Nanos = 15 * SECOND;

/// What a region's replica asks for one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionClaim {
    /// The domain of the unit.
    pub domain: String,
    /// The unit's name: an RLQS bucket id, or a counter's (see `region`).
    pub bucket: BucketId,
    /// What this replica was asked for the unit, allowed and refused, in hits per second.
    pub demand: f64,
    /// The whole limit's rate in hits per second: the regions' demands are weighed against it.
    pub rate: f64,
    /// The portion (0..=1) this replica enforces now: the store keeps at least this much
    /// reserved for it until its next claim says otherwise, so a lost answer never leaves the
    /// replica enforcing more than the store reserves.
    pub held: f64,
    /// How long what this claim gets holds unless claimed again (at most [`SETTLE`]).
    pub ttl: Nanos,
}

/// Who claims, and what it asks of the members' floors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegionTerms<'a> {
    /// The region's name (no `|`).
    pub region: &'a str,
    /// The replica's name, unique among the region's live replicas.
    pub replica: &'a str,
    /// The time of the claim (used only with the caller's clock; the store's own otherwise).
    pub now: Nanos,
    /// The floor (0..=1) the replica asks for its region.
    pub floor: f64,
    /// The floor the replica enforces now (kept reserved until its next claim).
    pub floor_held: f64,
    /// How long a member not heard of stays one (its floor reserved).
    pub member_ttl: Nanos,
}

/// What a region's replica got for one unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegionClaimed {
    /// The replica's portion (0..=1) of the unit's limit until its next claim: at most the
    /// region's max–min fair part by demand, never more than the other members leave (each
    /// its live portion or its floor, whichever is larger).
    pub portion: f64,
    /// The region's demand for the unit (this replica's and its region's other live
    /// replicas'), hits per second.
    pub region_demand: f64,
    /// The other regions' demand for the unit, hits per second.
    pub others_demand: f64,
    /// How many other regions hold a live portion of the unit.
    pub others: u32,
}

/// What a claim says of the members.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Membership {
    /// The floor (0..=1) the region may now enforce on every unit: what it asked, once the
    /// other members' floors left room for it and every portion granted before has lapsed.
    pub floor: f64,
    /// The members, this region included.
    pub members: u32,
    /// The region's live replicas, this one included (heard of within the member timeout).
    pub replicas: u32,
}

/// The whole answer to a region's claim.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionAnswer {
    /// The members and this region's floor.
    pub membership: Membership,
    /// One answer per claim, in claim order.
    pub claimed: Vec<RegionClaimed>,
}

/// The future of one region's claim.
pub type RegionClaimFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RegionAnswer, ClaimError>> + Send + 'a>>;

/// A region name: 1 to 64 letters, digits, `.`, `_` or `-` (it names fields in the global
/// store, `<region>|<replica>`, and labels metrics).
pub fn valid_region_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
