//! The RLQS wing's figures: open streams, tracked buckets, actions sent, and the requests Envoys
//! report per rule (through the capped series, as the RLS call's are).

use prometheus::{IntCounterVec, IntGauge};

use super::capped::CappedCounters;
use super::names::{
    RLQS_ASSIGNMENTS, RLQS_BUCKETS, RLQS_REPORTED, RLQS_STREAMS, RLQS_STREAMS_UNBOUND,
};
use super::{Families, Metrics};

/// The `domain` and `key` of reports for buckets no rule limits.
const NO_RULE_KEY: &str = "_no_rule_";

/// The RLQS families.
pub(super) struct RlqsFigures {
    streams: IntGauge,
    unbound: IntGauge,
    buckets: IntGauge,
    assignments: IntCounterVec,
    reported: CappedCounters<3>,
}

impl RlqsFigures {
    /// Registers the families; the reported series are capped at `max_series`, folds counted in
    /// `folded`.
    pub(super) fn new(
        families: &Families<'_>,
        max_series: usize,
        folded: prometheus::IntCounter,
    ) -> Self {
        let reported = families.counter_vec(
            RLQS_REPORTED,
            "Requests Envoys reported over the quota service, by rule and outcome.",
            &["domain", "key", "outcome"],
        );
        Self {
            streams: families.gauge(
                RLQS_STREAMS,
                "Quota service (RLQS) streams open, from their opening.",
            ),
            unbound: families.gauge(
                RLQS_STREAMS_UNBOUND,
                "Quota service (RLQS) streams open that have not sent their first report yet.",
            ),
            buckets: families.gauge(RLQS_BUCKETS, "Quota buckets tracked."),
            assignments: families.counter_vec(
                RLQS_ASSIGNMENTS,
                "Bucket actions sent to Envoys, by action.",
                &["action"],
            ),
            reported: CappedCounters::new(reported, [false, false, true], max_series, folded),
        }
    }
}

/// Which requests a report counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportedOutcome {
    /// Admitted by the Envoy.
    Allowed,
    /// Refused by the Envoy.
    Denied,
    /// Admitted under a `shadow_mode` rule that the share would have refused.
    ShadowRefused,
}

impl ReportedOutcome {
    fn label(self) -> &'static str {
        match self {
            ReportedOutcome::Allowed => "allowed",
            ReportedOutcome::Denied => "denied",
            ReportedOutcome::ShadowRefused => "shadow_refused",
        }
    }
}

impl Metrics {
    /// Sets the gauges of open streams (and of those awaiting their first report) and of
    /// tracked buckets.
    pub fn record_rlqs_load(&self, streams: usize, unbound: usize, buckets: usize) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.rlqs.streams.set(gauge(streams));
        self.rlqs.unbound.set(gauge(unbound));
        self.rlqs.buckets.set(gauge(buckets));
    }

    /// Counts one bucket action sent (`action`: token_bucket, allow_all, deny_all, abandon).
    pub fn record_rlqs_action(&self, action: &str) {
        self.rlqs.assignments.with_label_values(&[action]).inc();
    }

    /// Counts `requests` reported for the rule `key` of `domain` (`None`: no rule limits the
    /// bucket).
    pub fn record_rlqs_reported(
        &self,
        domain: &str,
        key: Option<&str>,
        outcome: ReportedOutcome,
        requests: u64,
    ) {
        if requests == 0 {
            return;
        }
        let key = key.unwrap_or(NO_RULE_KEY);
        self.rlqs
            .reported
            .get([domain, key, outcome.label()])
            .inc_by(requests);
    }
}
