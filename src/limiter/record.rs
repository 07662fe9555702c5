//! Every figure of one RLS call, recorded in one place once the call is answered or refused.
//!
//! The limiter's steps note what happened (`Call`: the store's use, a degraded answer, each
//! counted descriptor's hits) and this file turns it into envoyproxy/ratelimit's families and
//! sluice's own: the rule series, global shadow mode, unknown domains, degraded answers, the
//! store's round trip, failed calls and the decision's latency. Nothing is recorded while a call
//! is planned or composed. The transport keeps one figure of its own: the gRPC method's calls
//! and latency (`Metrics::record_call`), which `/json` calls are not part of.

use std::borrow::Cow;
use std::time::Instant;

use smallvec::SmallVec;

use super::decision::{Decision, StoreUse};
use super::plan::{Plan, Resolved};
use super::request::Request;
use super::{LimitError, Limiter};
use crate::metrics::{self, HitOutcome, RuleSeries};
use crate::rules::FailureMode;

/// What a composed answer leaves for the call's figures.
#[derive(Debug, Default)]
pub(super) struct Figures {
    /// One per counted descriptor, in request order: how its hits fell against its limit.
    pub(super) hits: SmallVec<[HitOutcome; 2]>,
    /// Global shadow mode let a call over its limit through.
    pub(super) global_shadowed: bool,
}

/// What one planned call did, noted as it goes.
#[derive(Debug, Default)]
pub(super) struct Call {
    /// How the store was used.
    pub(super) store: StoreUse,
    /// The store failed and the rules' failure modes took over.
    pub(super) degraded: Option<Degraded>,
    /// What the composed answer found.
    pub(super) figures: Figures,
}

/// A call the store failed.
#[derive(Debug)]
pub(super) struct Degraded {
    /// Each charge's descriptor and rule `failure_mode` (`None`: a request-side override).
    pub(super) modes: Vec<(usize, Option<FailureMode>)>,
    /// Whether the modes answered the call (else it failed with the store's error).
    pub(super) answered: bool,
}

impl Limiter {
    /// Records a call refused before planning (malformed, or no rules yet): envoyproxy/ratelimit's
    /// service error.
    pub(super) fn record_refused(&self) {
        self.metrics.record_call_error(metrics::SERVICE_ERROR);
    }

    /// Records every figure of the call of `request`, planned as `plan`, that did `call` and
    /// ended in `result`, `started` when it arrived.
    pub(super) fn record(
        &self,
        request: &Request,
        plan: &Plan<'_>,
        call: &Call,
        result: &Result<Decision, LimitError>,
        started: Instant,
    ) {
        let metrics = &self.metrics;
        if plan.unknown_domain() {
            metrics.record_domain_not_found(request.descriptors.len() as u64);
        }
        match call.store {
            StoreUse::Skipped => {}
            StoreUse::Answered(took) => self.store_series.record(took.as_secs_f64(), false),
            StoreUse::Failed(took) => self.store_series.record(took.as_secs_f64(), true),
        }
        if let Some(degraded) = &call.degraded {
            self.record_degraded(request, degraded);
        }
        self.record_hits(request, plan, &call.figures.hits);
        if call.figures.global_shadowed {
            metrics.record_global_shadow();
        }
        if result.is_ok() {
            metrics.record_decision(started.elapsed().as_secs_f64());
        }
    }

    /// Each counted descriptor's hits against its rule's series (looked up, or read from the
    /// node's slot, even when the call failed before it had hits: the series exists from the
    /// first call that reaches the rule).
    fn record_hits(&self, request: &Request, plan: &Plan<'_>, hits: &[HitOutcome]) {
        let mut hits = hits.iter();
        for resolved in plan.slots() {
            let Resolved::Counted {
                stats_key, series, ..
            } = resolved
            else {
                continue;
            };
            let domain = &request.domain;
            let counters = match (stats_key, series) {
                (Cow::Borrowed(key), Some(slot)) => self.metrics.rule_in(slot, domain, key),
                (key, _) => RuleSeries::Looked(self.metrics.rule(domain, key)),
            };
            if let Some(hit) = hits.next() {
                self.metrics.record_hits(&counters, hit);
            }
        }
    }

    /// One degraded answer per descriptor with a counted limit, by its first key and how it was
    /// answered; a call the modes could not answer failed with the store's error.
    fn record_degraded(&self, request: &Request, degraded: &Degraded) {
        let answered = degraded.answered;
        let mut counted: SmallVec<[usize; 4]> = SmallVec::new();
        for &(descriptor, mode) in &degraded.modes {
            if counted.contains(&descriptor) {
                continue;
            }
            counted.push(descriptor);
            let key1 = request.descriptors[descriptor]
                .entries
                .first()
                .map_or("", |(k, _)| k.as_str());
            let mode = match (answered, mode) {
                (false, _) => "unavailable",
                (true, None) => "override",
                (true, Some(m)) => m.name(),
            };
            self.metrics.record_degraded(&request.domain, key1, mode);
        }
        if !answered {
            self.metrics.record_call_error(metrics::STORE_ERROR);
        }
    }
}
