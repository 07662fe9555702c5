//! RLQS shares of a `scope: global` limit draw on the region's portion: the quota book asks a
//! [`Portion`] for the part of a limit this replica may hand out, and [`RegionalPortion`]
//! answers the replicas' part times the region's. Each round, the buckets the book holds under
//! global limits become units claimed with the counters ([`Regions::note_buckets`]).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Regions;
use super::units::{self, Unit, UnitKind, UnitName};
use crate::clock::{Clock, Nanos};
use crate::quota::{BucketView, Portion};
use crate::rules::bucket::{QuotaRate, tightest};
use crate::rules::{LimitKind, RuleSet, Scope};
use crate::store::BucketId;

/// The scope of the limit an RLQS bucket of `domain` is shared under: the one the quota book
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

/// The replicas' portion of a limit times the region's, for buckets of `scope: global` limits.
pub struct RegionalPortion {
    replicas: Arc<dyn Portion>,
    regions: Arc<Regions>,
    rules: Arc<ArcSwap<RuleSet>>,
    clock: Arc<dyn Clock>,
}

impl RegionalPortion {
    /// `replicas`' portions (this replica's among its region's), cut by `regions`' for the
    /// buckets `rules` puts under a global limit.
    pub fn new(
        replicas: Arc<dyn Portion>,
        regions: Arc<Regions>,
        rules: Arc<ArcSwap<RuleSet>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            replicas,
            regions,
            rules,
            clock,
        }
    }
}

impl Portion for RegionalPortion {
    fn portion(&self, domain: &str, bucket: &BucketId, rate: &QuotaRate, here: f64) -> f64 {
        let replicas = self.replicas.portion(domain, bucket, rate, here);
        if bucket_scope(&self.rules.load(), domain, bucket) == Scope::Global {
            replicas
                * self
                    .regions
                    .bucket_portion(domain, bucket, self.clock.now())
        } else {
            replicas
        }
    }
}

impl Regions {
    /// The region's portion (0..=1) of an RLQS bucket at `now`: its live claim or the floor.
    pub fn bucket_portion(&self, domain: &str, bucket: &BucketId, now: Nanos) -> f64 {
        let key = units::bucket_unit_key(domain, bucket);
        let held = self.buckets.get(&key, |u| u.live_portion(now));
        self.portion(held.unwrap_or(0.0), now)
    }

    /// Notes at `now` the buckets the quota book holds under global limits (per `rules`), with
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
