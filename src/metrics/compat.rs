//! envoyproxy/ratelimit's `ratelimit_service_*` families: per-rule hits split into over / near /
//! within as envoyproxy/ratelimit splits them, rule loads, gRPC calls and their failures.

use std::sync::Arc;

use prometheus::{Histogram, IntCounter, IntCounterVec};

use super::names::{
    CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, GLOBAL_SHADOW_MODE, RESPONSE_TIME, SERVICE_ERROR,
    SHOULD_RATE_LIMIT, SHOULD_RATE_LIMIT_ERROR, STORE_ERROR, TOTAL_REQUESTS,
};
use super::series::{PerRuleSeries, RuleSeries, SeriesSlot};
use super::{Families, Metrics, RuleCounters};

/// How one descriptor's hits fell against its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitOutcome {
    /// Hits of the call (its cost).
    pub hits: u64,
    /// The limit's capacity (requests, or token bucket burst).
    pub capacity: u64,
    /// Hits that would have fit before the call.
    pub available: u64,
    /// Whether the descriptor's limit admitted the call.
    pub admitted: bool,
    /// Whether a shadow-mode rule let an over-limit call through.
    pub shadowed: bool,
}

/// envoyproxy/ratelimit's split of a call's hits into over / near / within (reference §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HitSplit {
    /// Hits over the limit.
    pub over: u64,
    /// Hits in (floor(limit × ratio), limit].
    pub near: u64,
    /// Hits of a call answered OK (near-limit hits included).
    pub within: u64,
}

/// Splits hits as envoyproxy/ratelimit does, with "count before" = capacity − available.
pub(crate) fn split_hits(outcome: &HitOutcome, near_ratio: f64) -> HitSplit {
    let limit = outcome.capacity;
    let near_threshold = ((limit as f64) * near_ratio).floor() as u64;
    let before = limit.saturating_sub(outcome.available);
    let after = before.saturating_add(outcome.hits);
    if !outcome.admitted {
        if before >= limit {
            return HitSplit {
                over: outcome.hits,
                ..HitSplit::default()
            };
        }
        let over = after.saturating_sub(limit);
        let near = limit.saturating_sub(near_threshold.max(before));
        return HitSplit {
            over,
            near,
            within: 0,
        };
    }
    let near = if after > near_threshold {
        after - near_threshold.max(before)
    } else {
        0
    };
    HitSplit {
        over: 0,
        near,
        within: outcome.hits,
    }
}

/// The envoyproxy/ratelimit families.
pub(super) struct Compat {
    pub(super) series: PerRuleSeries,
    near_ratio: f64,
    pub(super) config_load_success: IntCounter,
    pub(super) config_load_error: IntCounter,
    pub(super) global_shadow_mode: IntCounter,
    pub(super) should_rate_limit_error: IntCounterVec,
    pub(super) total_requests: IntCounter,
    pub(super) response_time: Histogram,
}

impl Compat {
    /// Registers the families.
    pub(super) fn new(families: &Families<'_>, near_ratio: f64, max_series: usize) -> Self {
        let method = [SHOULD_RATE_LIMIT];
        Self {
            series: PerRuleSeries::new(families, max_series),
            near_ratio,
            config_load_success: families.counter(CONFIG_LOAD_SUCCESS, "Rule sets loaded."),
            config_load_error: families
                .counter(CONFIG_LOAD_ERROR, "Rule sets that failed to load."),
            global_shadow_mode: families.counter(
                GLOBAL_SHADOW_MODE,
                "Calls over the limit answered OK by global shadow mode.",
            ),
            should_rate_limit_error: zeroed(
                families.counter_vec(SHOULD_RATE_LIMIT_ERROR, "Calls that failed.", &["err_type"]),
                &[SERVICE_ERROR, STORE_ERROR],
            ),
            total_requests: families
                .counter_vec(TOTAL_REQUESTS, "gRPC calls.", &["grpc_method"])
                .with_label_values(&method),
            response_time: families
                .latency_vec(
                    RESPONSE_TIME,
                    "gRPC call latency in seconds.",
                    &["grpc_method"],
                )
                .with_label_values(&method),
        }
    }
}

/// `family` with a series at 0 for each of `labels`: a failure that never happened is a 0 on
/// dashboards and in alerts, not a missing series.
fn zeroed(family: IntCounterVec, labels: &[&str]) -> IntCounterVec {
    for label in labels {
        family.with_label_values(&[label]);
    }
    family
}

impl Metrics {
    /// The counters of the rule series for `stats_key` (`domain.key1.key2...`), created on
    /// first use; past the cap, the overflow series of the domain.
    pub fn rule(&self, domain: &str, stats_key: &str) -> Arc<RuleCounters> {
        self.compat.series.get(domain, stats_key).0
    }

    /// [`Metrics::rule`] for a rule whose stats key is fixed by the rules (`slot` is its
    /// node's): looked up once, then read from the slot.
    pub fn rule_in<'a>(
        &self,
        slot: &'a SeriesSlot,
        domain: &str,
        stats_key: &str,
    ) -> RuleSeries<'a> {
        if let Some(counters) = slot.get(self.id) {
            return RuleSeries::Resolved(counters);
        }
        let (counters, own) = self.compat.series.get(domain, stats_key);
        if own {
            slot.fill(self.id, counters.clone());
        }
        RuleSeries::Looked(counters)
    }

    /// Records one descriptor's hits against its rule series.
    pub fn record_hits(&self, counters: &RuleCounters, outcome: &HitOutcome) {
        let split = split_hits(outcome, self.compat.near_ratio);
        // Each add is an atomic read-modify-write on a line every worker thread writes; a call
        // usually adds to two of the four, so the zeros are skipped.
        let adds = [
            (&counters.total_hits, outcome.hits),
            (&counters.over_limit, split.over),
            (&counters.near_limit, split.near),
            (&counters.within_limit, split.within),
            (
                &counters.shadow_mode,
                if outcome.shadowed { outcome.hits } else { 0 },
            ),
        ];
        for (counter, n) in adds {
            if n > 0 {
                counter.inc_by(n);
            }
        }
    }

    /// Records a call over the limit that global shadow mode answered OK.
    pub fn record_global_shadow(&self) {
        self.compat.global_shadow_mode.inc();
    }

    /// Records one gRPC `ShouldRateLimit` call and its latency.
    pub fn record_call(&self, seconds: f64) {
        self.compat.total_requests.inc();
        self.compat.response_time.observe(seconds);
    }

    /// Records a failed call (`SERVICE_ERROR` or `STORE_ERROR`).
    pub fn record_call_error(&self, err_type: &str) {
        self.compat
            .should_rate_limit_error
            .with_label_values(&[err_type])
            .inc();
    }

    /// Records a successful rule load: its generation and time.
    pub fn record_rules_loaded(&self, generation: u64, unix_seconds: f64) {
        self.compat.config_load_success.inc();
        self.decisions.rules_loaded(generation, unix_seconds);
    }

    /// Records a rule load that failed (the previous rules keep serving).
    pub fn record_rules_failed(&self) {
        self.compat.config_load_error.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(capacity: u64, count_before: u64, hits: u64) -> HitOutcome {
        let available = capacity.saturating_sub(count_before);
        HitOutcome {
            hits,
            capacity,
            available,
            admitted: hits <= available,
            shadowed: false,
        }
    }

    /// Reference §4.1's worked example: limit 20, ratio 0.8.
    #[test]
    fn near_limit_worked_example() {
        assert_eq!(
            split_hits(&outcome(20, 19, 3), 0.8),
            HitSplit {
                over: 2,
                near: 1,
                within: 0
            }
        );
        assert_eq!(
            split_hits(&outcome(20, 15, 7), 0.8),
            HitSplit {
                over: 2,
                near: 4,
                within: 0
            }
        );
    }

    /// Calls within the limit count as within, and near when they pass the threshold.
    #[test]
    fn within_and_near() {
        assert_eq!(
            split_hits(&outcome(15, 11, 2), 0.8),
            HitSplit {
                over: 0,
                near: 1,
                within: 2
            }
        );
        assert_eq!(
            split_hits(&outcome(15, 0, 2), 0.8),
            HitSplit {
                over: 0,
                near: 0,
                within: 2
            }
        );
        assert_eq!(
            split_hits(&outcome(15, 13, 2), 0.8),
            HitSplit {
                over: 0,
                near: 2,
                within: 2
            }
        );
        assert_eq!(
            split_hits(&outcome(15, 15, 2), 0.8),
            HitSplit {
                over: 2,
                near: 0,
                within: 0
            }
        );
    }
}
