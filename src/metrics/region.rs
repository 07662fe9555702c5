//! A region's figures: its portion of each global limit, its floor, the members, whether the
//! global store answers, and the claim rounds' outcomes and latency.

use std::time::Duration;

use prometheus::{GaugeVec, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts};

use super::names::{
    REGION_CLAIM_SECONDS, REGION_CLAIMS, REGION_FLOOR, REGION_GLOBAL_STORE_REACHABLE,
    REGION_MEMBERS, REGION_PORTION,
};
use super::{Families, Metrics};

/// Claim latency buckets, 1 ms to 5 s: the global store may be a continent away.
const CLAIM_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0,
];

/// The region families.
pub(super) struct RegionFigures {
    portion: GaugeVec,
    floor: GaugeVec,
    members: IntGaugeVec,
    reachable: IntGaugeVec,
    claims: IntCounterVec,
    claim_seconds: Histogram,
}

impl RegionFigures {
    /// Registers the families.
    pub(super) fn new(families: &Families<'_>) -> Self {
        let region = &["region"];
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            families.register(GaugeVec::new(Opts::new(name, help), labels))
        };
        let latency = HistogramOpts::new(
            REGION_CLAIM_SECONDS,
            "Time one claim round in the global store took.",
        )
        .buckets(CLAIM_BUCKETS.to_vec());
        Self {
            portion: gauge(
                REGION_PORTION,
                "This region's portion of each global limit (its busiest counter or bucket).",
                &["domain", "key", "limit"],
            ),
            floor: gauge(
                REGION_FLOOR,
                "The floor this region may enforce on every unit of a global limit.",
                region,
            ),
            members: families.gauge_vec(
                REGION_MEMBERS,
                "Regions sharing the global store at the last claim.",
                region,
            ),
            reachable: families.gauge_vec(
                REGION_GLOBAL_STORE_REACHABLE,
                "1 while the last claim reached the global store.",
                region,
            ),
            claims: families.counter_vec(
                REGION_CLAIMS,
                "Claim rounds in the global store, by outcome.",
                &["outcome"],
            ),
            claim_seconds: families.register(Histogram::with_opts(latency)),
        }
    }
}

impl Metrics {
    /// One claim round: whether the global store answered, and how long it took.
    pub fn record_region_round(&self, answered: bool, took: Duration) {
        let figures = &self.region;
        let outcome = if answered { "answered" } else { "failed" };
        figures.claims.with_label_values(&[outcome]).inc();
        figures.claim_seconds.observe(took.as_secs_f64());
    }

    /// The region `region`: its members, its floor, whether the global store answers; the
    /// portions published next replace the previous ones.
    pub fn record_region(&self, region: &str, members: u32, floor: f64, reachable: bool) {
        let figures = &self.region;
        figures
            .members
            .with_label_values(&[region])
            .set(i64::from(members));
        figures.floor.with_label_values(&[region]).set(floor);
        figures
            .reachable
            .with_label_values(&[region])
            .set(i64::from(reachable));
        figures.portion.reset();
    }

    /// The region's portion of the limit at position `limit` of rule `key` in `domain`.
    pub fn record_region_portion(&self, domain: &str, key: &str, limit: u8, portion: f64) {
        let position = limit.to_string();
        (self.region.portion)
            .with_label_values(&[domain, key, position.as_str()])
            .set(portion);
    }
}
