//! RLQS shares of a `scope: global` limit draw on the region's portion: the RLQS book cuts what
//! this replica may hand out of a limit by its group's portion, and [`RegionalPortion`] answers
//! the region's for the buckets of global limits. Each second the book gives it the buckets it
//! holds, and those under global limits become units claimed with the counters
//! ([`Regions::note_buckets`]).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Regions;
use super::units::{self, Unit, UnitKind, UnitName};
use crate::clock::Nanos;
use crate::rlqs::{BucketView, GroupPortion};
use crate::rules::bucket::tightest;
use crate::rules::{LimitKind, RuleSet, Scope};
use crate::store::BucketId;

/// The scope of the limit an RLQS bucket of `domain` is shared under: the one the RLQS book
/// hands out (the tightest counted limit of the node the bucket reaches); `Region` when no
/// limit applies.
pub fn bucket_scope(rules: &RuleSet, domain: &str, bucket: &BucketId) -> Scope {
    let Some(found) = rules.domain(domain).and_then(|d| d.lookup_bucket(bucket)) else {
        return Scope::Region;
    };
    let node = found.node();
    let counted = node.limits.iter().filter_map(|rule| match &rule.kind {
        LimitKind::Counted(limit) => Some((limit, rule.scope)),
        LimitKind::Unlimited => None,
    });
    let counted: Vec<_> = counted.collect();
    let Some(limit) = tightest(counted.iter().map(|(limit, _)| *limit)) else {
        return Scope::Region;
    };
    counted
        .iter()
        .find(|(l, _)| std::ptr::eq(*l, limit))
        .map_or(Scope::Region, |(_, scope)| *scope)
}

/// The region's portions of global limits, as the RLQS book asks for them.
pub struct RegionalPortion {
    regions: Arc<Regions>,
    rules: Arc<ArcSwap<RuleSet>>,
}

impl RegionalPortion {
    /// `regions`' portions, for the buckets `rules` puts under a global limit.
    pub fn new(regions: Arc<Regions>, rules: Arc<ArcSwap<RuleSet>>) -> Self {
        Self { regions, rules }
    }
}

impl GroupPortion for RegionalPortion {
    fn portion(&self, domain: &str, bucket: &BucketId, now: Nanos) -> f64 {
        if bucket_scope(&self.rules.load(), domain, bucket) == Scope::Global {
            self.regions.bucket_portion(domain, bucket, now)
        } else {
            1.0
        }
    }

    fn note(&self, buckets: &[BucketView], now: Nanos) {
        self.regions.note_buckets(buckets, &self.rules.load(), now);
    }
}

impl Regions {
    /// The region's portion (0..=1) of an RLQS bucket at `now`: its live claim or the floor.
    pub fn bucket_portion(&self, domain: &str, bucket: &BucketId, now: Nanos) -> f64 {
        let key = units::bucket_unit_key(domain, bucket);
        let held = self.buckets.get(&key, |u| u.live_portion(now));
        self.portion(held.unwrap_or(0.0), now)
    }

    /// Notes at `now` the buckets the RLQS book holds under global limits (per `rules`), with
    /// the demand this replica's streams report, for the next round to claim.
    pub fn note_buckets(&self, views: &[BucketView], rules: &RuleSet, now: Nanos) {
        for view in views {
            let (Some(rate), Some(rule)) = (view.limit, &view.rule) else {
                continue;
            };
            if bucket_scope(rules, &view.domain, &view.bucket) != Scope::Global {
                continue;
            }
            let per_second = rate.per_second();
            let demand: f64 = (view.holders.iter())
                .filter(|h| h.reporting)
                .map(|h| h.demand_per_second.unwrap_or(per_second))
                .sum();
            let key = units::bucket_unit_key(&view.domain, &view.bucket);
            let make = || {
                let name = UnitName {
                    domain: view.domain.clone(),
                    bucket: view.bucket.clone(),
                    rule: rule.clone(),
                    limit: 0,
                    kind: UnitKind::Bucket,
                };
                Unit::new(Arc::new(name), per_second, now)
            };
            self.buckets.with(&key, make, |unit| {
                unit.rate = per_second;
                unit.demand = demand;
                unit.seen = now;
            });
        }
    }
}
