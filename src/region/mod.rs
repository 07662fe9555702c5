//! One limit across regions: each region enforces, on its own store, its portion of every
//! `scope: global` limit, claimed about once a second from a global store all regions reach.
//!
//! This is the replicas' claim (`rlqs`'s claims, `store::PortionStore`) one level up, in
//! the same script: a region's replica claims, per *unit* (a counter of a global limit, or an
//! RLQS bucket of one), a portion max–min fair by its region's demand, never more than the
//! other members leave, and the members' *floors*. [`Regions`] is this replica's side: the
//! units it enforces, their demand and last claims (`units.rs`), the limit a call is checked
//! against ([`Regions::limit_for`], `scale.rs`), one claim round (`claim.rs`), the RLQS
//! book's portion (`rlqs.rs`), and the global store's rules in one process for tests
//! ([`GlobalStoreModel`], `model.rs`). The request path never waits on the global store.

mod claim;
mod figures;
mod model;
mod rlqs;
mod scale;
mod units;

#[cfg(test)]
mod bound_tests;
#[cfg(test)]
mod fleet;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::algorithm::Limit;
use crate::clock::{Nanos, SECOND};

pub use claim::{CLAIM_HOLD, Round, Settled, claim_once};
pub use figures::{LimitId, RegionFigures, UnitFigures};
pub use model::GlobalStoreModel;
pub use rlqs::{RegionalPortion, bucket_scope};
pub use scale::{WHOLE_PPM, scaled};
pub use units::{Held, UnitKind, UnitName};

/// The default floor: half of an equal split among the members.
pub const DEFAULT_FLOOR_SHARE: f64 = 0.5;

/// The default time a member may go unheard before the others free its floor.
pub const DEFAULT_MEMBER_TIMEOUT: Nanos = 3600 * SECOND;

/// The shortest member timeout: a region stops using its floor [`crate::store::SETTLE`] before
/// the store may free it, and must keep it for a while.
pub const MIN_MEMBER_TIMEOUT: Nanos = 60 * SECOND;

/// The most units a replica tracks; past it, new units are enforced on the floor, unclaimed.
pub const MAX_UNITS: usize = 100_000;

/// Who this replica is among the regions, and how it shares.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionOptions {
    /// The region's name (`--region`).
    pub name: String,
    /// The floor as a part of an equal split among the members (`--region-floor`), 0..=1.
    pub floor_share: f64,
    /// How long a member may go unheard before the others free its floor
    /// (`--region-member-timeout`).
    pub member_timeout: Nanos,
    /// The most units tracked.
    pub max_units: usize,
    /// The region's replicas count on one store (Redis); `false` for the embedded store,
    /// where each process counts alone and so must be a region of its own.
    pub shared_store: bool,
}

impl RegionOptions {
    /// The defaults for the region `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            floor_share: DEFAULT_FLOOR_SHARE,
            member_timeout: DEFAULT_MEMBER_TIMEOUT,
            max_units: MAX_UNITS,
            shared_store: true,
        }
    }
}

/// This replica's side of the regions: the units it enforces and what it may enforce on them.
pub struct Regions {
    options: RegionOptions,
    replica: String,
    /// The counters of global limits RLS calls are charged to, by their keys' bytes.
    counters: units::Units,
    /// The RLQS buckets of global limits, by [`units::bucket_unit_key`].
    buckets: units::Units,
    /// The floor this replica may enforce (ppm) and until when (the member timeout, less a
    /// margin, after the last claim that reached the global store).
    floor_ppm: AtomicU32,
    floor_until: AtomicU64,
    standing: Mutex<claim::Standing>,
}

impl Regions {
    /// The side of replica `replica` (unique among its region's live replicas) of region
    /// `options.name`.
    pub fn new(options: RegionOptions, replica: impl Into<String>) -> Self {
        Self {
            counters: units::Units::new(options.max_units),
            buckets: units::Units::new(options.max_units / 4),
            options,
            replica: replica.into(),
            floor_ppm: AtomicU32::new(0),
            floor_until: AtomicU64::new(0),
            standing: Mutex::new(claim::Standing::default()),
        }
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// The floor (0..=1) this replica may enforce at `now`: none before its first claim
    /// reached the global store, nor once its membership may have lapsed there.
    pub fn floor_at(&self, now: Nanos) -> f64 {
        if now < self.floor_until.load(Ordering::Acquire) {
            f64::from(self.floor_ppm.load(Ordering::Acquire)) / f64::from(WHOLE_PPM)
        } else {
            0.0
        }
    }

    /// The limit a call of `cost` hits on the counter `counter` of the global limit `limit`
    /// is checked against at `now`: its portion (the live claim or the floor, the larger) of
    /// the limit. Notes the demand for the next claim; `name` names a counter seen first.
    pub fn limit_for(
        &self,
        counter: &[u8],
        limit: Limit,
        cost: u64,
        name: impl FnOnce() -> (Arc<str>, Arc<str>, u8),
        now: Nanos,
    ) -> Limit {
        let make = || {
            let (domain, rule, index) = name();
            let unit = UnitName {
                domain,
                bucket: units::counter_bucket(counter),
                rule,
                limit: index,
                kind: UnitKind::Counter,
            };
            units::Unit::new(Arc::new(unit), rate_of(&limit), now)
        };
        let held = self.counters.with(counter, make, |unit| {
            unit.offered = unit.offered.saturating_add(cost);
            unit.seen = now;
            unit.live_portion(now)
        });
        scaled(&limit, to_ppm(self.portion(held.unwrap_or(0.0), now)))
    }

    /// The portion (0..=1) of the counter `counter` enforced at `now` (for `/ui`).
    pub fn counter_portion(&self, counter: &[u8], now: Nanos) -> f64 {
        let held = self.counters.get(counter, |u| u.live_portion(now));
        self.portion(held.unwrap_or(0.0), now)
    }

    /// What a unit holding the live claim `held` enforces at `now`.
    fn portion(&self, held: f64, now: Nanos) -> f64 {
        held.max(self.floor_at(now))
    }
}

/// A limit's rate in hits per second.
fn rate_of(limit: &Limit) -> f64 {
    limit.requests as f64 * SECOND as f64 / limit.window.max(1) as f64
}

/// A fraction in parts per million, rounded down (a portion never admits more than its part).
fn to_ppm(fraction: f64) -> u32 {
    if fraction.is_nan() {
        return 0;
    }
    (fraction.clamp(0.0, 1.0) * f64::from(WHOLE_PPM)).floor() as u32
}
