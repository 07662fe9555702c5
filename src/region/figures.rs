//! What a replica tells operators about its region: the members, its floor, whether the global
//! store answers, and each unit's portion (for `/metrics`, `/ui` and `/healthcheck`).

use std::collections::HashMap;
use std::sync::Arc;

use super::Regions;
use super::units::UnitKind;
use crate::clock::Nanos;

/// The most units listed (the busiest first).
const LISTED: usize = 200;

/// A global limit: its domain, its rule's full key and its position among the rule's limits.
pub type LimitId = (Arc<str>, Arc<str>, u8);

/// One unit as operators see it.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitFigures {
    /// The domain.
    pub domain: Arc<str>,
    /// The rule's full key.
    pub rule: Arc<str>,
    /// The limit's position among the rule's limits.
    pub limit: u8,
    /// A counter of RLS calls or an RLQS bucket.
    pub kind: UnitKind,
    /// The bucket id (`""` = a counter's key in hex).
    pub name: String,
    /// This replica's demand, hits per second.
    pub demand: f64,
    /// The region's demand and the other regions', at the last answer.
    pub region_demand: f64,
    /// The other regions' demand at the last answer.
    pub others_demand: f64,
    /// The portion enforced now (the live claim or the floor, the larger).
    pub portion: f64,
    /// The live claim alone (0 when none).
    pub claimed: f64,
}

/// The region as this replica sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionFigures {
    /// The region's name.
    pub region: String,
    /// The members at the last answer (0 before the first).
    pub members: u32,
    /// The floor enforceable now.
    pub floor: f64,
    /// Whether the last round reached the global store.
    pub reachable: bool,
    /// How long ago a round last reached it (`None`: never).
    pub last_answer_ago: Option<Nanos>,
    /// Since how long rounds fail, and why, while they do.
    pub failing: Option<(Nanos, String)>,
    /// Units claimed in the last round that reached the store.
    pub claimed: usize,
    /// Several processes claim for this region while each counts alone (the embedded store):
    /// together they may admit that many times the region's portion.
    pub shared_by_lone_stores: Option<u32>,
    /// Units tracked.
    pub units: usize,
    /// The busiest units first (at most 200).
    pub busiest: Vec<UnitFigures>,
    /// Per global limit (domain, rule, limit position): the portion of its busiest unit.
    pub by_limit: Vec<(LimitId, f64)>,
}

impl RegionFigures {
    /// Whether some units may be on their floor because the global store does not answer.
    pub fn degraded(&self) -> bool {
        !self.reachable
    }
}

impl Regions {
    /// The figures at `now`.
    pub fn figures(&self, now: Nanos) -> RegionFigures {
        let floor = self.floor_at(now);
        let mut all = Vec::new();
        let mut each = |_: &[u8], unit: &mut super::units::Unit| {
            let claimed = unit.live_portion(now);
            let (region_demand, others_demand) = unit
                .answer
                .map_or((0.0, 0.0), |a| (a.region_demand, a.others_demand));
            all.push(UnitFigures {
                domain: unit.name.domain.clone(),
                rule: unit.name.rule.clone(),
                limit: unit.name.limit,
                kind: unit.name.kind,
                name: unit_text(&unit.name.bucket),
                demand: unit.demand,
                region_demand,
                others_demand,
                portion: claimed.max(floor),
                claimed,
            });
            true
        };
        self.counters.retain(&mut each);
        self.buckets.retain(&mut each);
        all.sort_by(|a, b| b.demand.total_cmp(&a.demand));
        let mut by_limit: HashMap<LimitId, f64> = HashMap::new();
        for unit in &all {
            let id = (unit.domain.clone(), unit.rule.clone(), unit.limit);
            by_limit.entry(id).or_insert(unit.portion);
        }
        let standing = self.standing.lock();
        let units = all.len();
        all.truncate(LISTED);
        let mut by_limit: Vec<_> = by_limit.into_iter().collect();
        by_limit.sort_by(|a, b| a.0.cmp(&b.0));
        RegionFigures {
            region: self.options.name.clone(),
            members: standing.members,
            floor,
            reachable: standing.last_ok.is_some() && standing.failing.is_none(),
            last_answer_ago: standing.last_ok.map(|t| now.saturating_sub(t)),
            failing: (standing.failing.as_ref())
                .map(|(t, why)| (now.saturating_sub(*t), why.clone())),
            claimed: standing.claimed,
            shared_by_lone_stores: (!self.options.shared_store && standing.replicas > 1)
                .then_some(standing.replicas),
            units,
            busiest: all,
            by_limit,
        }
    }
}

/// A unit's name in words: an RLQS bucket's entries `k=v,k=v`, a counter's key in hex.
fn unit_text(bucket: &crate::store::BucketId) -> String {
    match bucket.get("") {
        Some(hex) => format!("counter {hex}"),
        None => {
            let entries: Vec<String> = bucket.iter().map(|(k, v)| format!("{k}={v}")).collect();
            entries.join(",")
        }
    }
}

impl Regions {
    /// One line on the global store at `now`, for `/healthcheck`: reachable, not heard from
    /// yet, or degraded (cut off: the last portions until they lapse, then the floor).
    pub fn health_line(&self, now: Nanos) -> String {
        let figures = self.figures(now);
        let name = &figures.region;
        let floor = figures.floor;
        if let Some(processes) = figures.shared_by_lone_stores {
            return format!(
                "region {name}: misconfigured: {processes} processes on the embedded store claim \
                 as this region, each counting alone: give each its own --region, or share a \
                 Redis (--store redis)"
            );
        }
        match (&figures.failing, figures.last_answer_ago) {
            (None, Some(_)) => format!(
                "region {name}: global store reachable, {} regions, floor {floor:.4}",
                figures.members
            ),
            (None, None) => {
                format!("region {name}: global store not heard from yet")
            }
            (Some((since, why)), _) => format!(
                "region {name}: degraded: the global store has not answered for {:.1}s ({why}); \
                 global limits on their last portions until they lapse, then on the floor \
                 {floor:.4}",
                *since as f64 / 1e9
            ),
        }
    }
}
