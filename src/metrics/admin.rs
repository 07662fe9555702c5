//! The admin listener's figures: counter resets by domain, and requests by outcome (refusals
//! included, so a stream of 401s shows).

use prometheus::IntCounterVec;

use super::names::{
    ADMIN_DOMAIN_LABEL, ADMIN_OUTCOME_LABEL, ADMIN_OUTCOMES, ADMIN_REQUESTS, ADMIN_RESETS,
};
use super::{Families, Metrics};

/// How an admin request ended, as [`Metrics::record_admin_request`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOutcome {
    /// Answered.
    Ok,
    /// No valid bearer token: nothing was done.
    Unauthorized,
    /// No rule limits the descriptor.
    NotFound,
    /// A malformed query.
    BadRequest,
    /// The store failed (or no rules are loaded yet).
    StoreError,
}

impl AdminOutcome {
    fn label(self) -> &'static str {
        ADMIN_OUTCOMES[self as usize]
    }
}

/// The admin families.
pub(super) struct AdminFigures {
    resets: IntCounterVec,
    requests: IntCounterVec,
}

impl AdminFigures {
    /// Registers the families (no series until the first request).
    pub(super) fn new(families: &Families<'_>) -> Self {
        Self {
            resets: families.counter_vec(
                ADMIN_RESETS,
                "Counter resets made through the admin listener.",
                &[ADMIN_DOMAIN_LABEL],
            ),
            requests: families.counter_vec(
                ADMIN_REQUESTS,
                "Requests to the admin listener, by outcome.",
                &[ADMIN_OUTCOME_LABEL],
            ),
        }
    }
}

impl Metrics {
    /// Counts one reset of a descriptor's counters in `domain` (a domain the rules name: the
    /// label's values are bounded by the rules).
    pub fn record_admin_reset(&self, domain: &str) {
        self.admin.resets.with_label_values(&[domain]).inc();
    }

    /// Counts one admin request that ended as `outcome`.
    pub fn record_admin_request(&self, outcome: AdminOutcome) {
        self.admin
            .requests
            .with_label_values(&[outcome.label()])
            .inc();
    }
}
