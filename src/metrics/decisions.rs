//! sluice's own `sluice_*` call figures: decision and store latency, store failures,
//! decisions taken without the store, the rule set generation, unknown domains.

use prometheus::{Gauge, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge};

use super::capped::CappedCounters;
use super::names::{
    DECISION_SECONDS, DEGRADED_DECISIONS, DOMAIN_NOT_FOUND, RULES_GENERATION, RULES_LAST_SUCCESS,
    STORE_ERRORS, STORE_SECONDS,
};
use super::{Families, Metrics};

/// One backend's store latency and failure series.
#[derive(Debug, Clone)]
pub struct StoreSeries {
    seconds: Histogram,
    errors: IntCounter,
}

impl StoreSeries {
    /// Records one store round trip.
    pub fn record(&self, seconds: f64, failed: bool) {
        self.seconds.observe(seconds);
        if failed {
            self.errors.inc();
        }
    }
}

/// sluice's own call families.
pub(super) struct Decisions {
    decision_seconds: Histogram,
    store_seconds: HistogramVec,
    store_errors: IntCounterVec,
    /// By domain, first key and mode: the first two come from calls, so the family is capped.
    degraded: CappedCounters<3>,
    rules_generation: IntGauge,
    rules_last_success: Gauge,
    domain_not_found: IntCounter,
}

impl Decisions {
    /// Registers the families; the degraded decisions' series are capped at `max_series`,
    /// folds counted in `folded`.
    pub(super) fn new(families: &Families<'_>, max_series: usize, folded: IntCounter) -> Self {
        Self {
            decision_seconds: families.latency(DECISION_SECONDS, "Decision latency in seconds."),
            store_seconds: families.latency_vec(
                STORE_SECONDS,
                "Counter store latency in seconds.",
                &["backend"],
            ),
            store_errors: families.counter_vec(
                STORE_ERRORS,
                "Counter store failures.",
                &["backend"],
            ),
            degraded: CappedCounters::new(
                families.counter_vec(
                    DEGRADED_DECISIONS,
                    "Decisions taken without the store.",
                    &["domain", "key1", "mode"],
                ),
                [false, false, true],
                max_series,
                folded,
            ),
            rules_generation: families.gauge(RULES_GENERATION, "Rule set generation."),
            rules_last_success: families
                .float_gauge(RULES_LAST_SUCCESS, "Unix time of the last rule load."),
            domain_not_found: families.counter(
                DOMAIN_NOT_FOUND,
                "Descriptors in a domain that is not loaded.",
            ),
        }
    }

    /// The generation and time of the rule set just loaded.
    pub(super) fn rules_loaded(&self, generation: u64, unix_seconds: f64) {
        self.rules_generation.set(generation as i64);
        self.rules_last_success.set(unix_seconds);
    }
}

impl Metrics {
    /// Records one decision's latency.
    pub fn record_decision(&self, seconds: f64) {
        self.decisions.decision_seconds.observe(seconds);
    }

    /// The store series of `backend`, resolved once (a limiter's store does not change), so
    /// recording a round trip does not look its labels up per call.
    pub fn store_series(&self, backend: &str) -> StoreSeries {
        StoreSeries {
            seconds: self.decisions.store_seconds.with_label_values(&[backend]),
            errors: self.decisions.store_errors.with_label_values(&[backend]),
        }
    }

    /// Records a decision a rule's `failure_mode` took without the store.
    pub fn record_degraded(&self, domain: &str, rule: &str, mode: &str) {
        self.decisions.degraded.get([domain, rule, mode]).inc();
    }

    /// Records `descriptors` descriptors of a call in a domain that is not loaded.
    pub fn record_domain_not_found(&self, descriptors: u64) {
        self.decisions.domain_not_found.inc_by(descriptors);
    }
}
