//! What goes out on an RLQS stream: the wing's answers as responses, each counted (actions
//! sent, requests reported) and traced, and the error that ends a stream as its status.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tonic::Status;

use super::convert;
use crate::metrics::{Metrics, ReportedOutcome};
use crate::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use crate::rlqs::{Assignment, Outgoing, Reported, Rlqs, RlqsError, Strategy};
use crate::telemetry::{RlqsEvent, RlqsTrace};

/// The responses of one stream.
pub type Responses = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

/// The status a stream ends with when sluice ends it.
pub(super) fn status(error: &RlqsError) -> Status {
    let message = error.to_string();
    match error {
        RlqsError::Invalid(_) => Status::invalid_argument(message),
        RlqsError::Exhausted(_) => Status::resource_exhausted(message),
        RlqsError::Silent(_) => Status::deadline_exceeded(message),
        RlqsError::ShuttingDown => Status::unavailable(message),
    }
}

/// Sets the wing's load gauges.
pub(super) fn publish(metrics: &Metrics, rlqs: &Rlqs) {
    let load = rlqs.load();
    metrics.record_rlqs_load(load.streams, load.unbound, load.buckets);
}

/// One stream's answers as they go out; dropped with the stream (however it ends).
pub(super) struct Seen {
    rlqs: Rlqs,
    metrics: Arc<Metrics>,
    trace: Option<RlqsTrace>,
    opened: bool,
    failed: bool,
}

impl Seen {
    /// Counts in `metrics` and traces with `trace` what `rlqs` sends a stream.
    pub(super) fn new(rlqs: Rlqs, metrics: Arc<Metrics>, trace: Option<RlqsTrace>) -> Self {
        Seen {
            rlqs,
            metrics,
            trace,
            opened: false,
            failed: false,
        }
    }

    /// The translation the wing runs on each thing it sends.
    pub(super) fn translate(
        mut self,
    ) -> impl FnMut(Result<Outgoing, RlqsError>) -> Option<Result<RateLimitQuotaResponse, Status>>
    + Send
    + 'static {
        move |item| self.see(item)
    }

    fn see(
        &mut self,
        item: Result<Outgoing, RlqsError>,
    ) -> Option<Result<RateLimitQuotaResponse, Status>> {
        let out = match item {
            Ok(out) => out,
            Err(error) => {
                self.failed = true;
                return Some(Err(status(&error)));
            }
        };
        if let Some(reported) = &out.reported {
            self.reported(reported, out.answers.len());
        }
        for answer in &out.answers {
            self.metrics.record_rlqs_action(action_label(answer));
        }
        (!out.answers.is_empty()).then(|| Ok(convert::response(&out.answers)))
    }

    fn reported(&mut self, reported: &Reported, answers: usize) {
        if let Some(trace) = self.trace.as_mut() {
            if !self.opened {
                trace.bind(&reported.domain);
                trace.record(RlqsEvent::Opened);
            }
            let buckets = reported.tallies.len();
            trace.record(RlqsEvent::Report { buckets, answers });
        }
        self.opened = true;
        let domain = &reported.domain;
        for tally in &reported.tallies {
            let key = tally.rule.as_deref();
            let count = |outcome, n| self.metrics.record_rlqs_reported(domain, key, outcome, n);
            count(ReportedOutcome::Allowed, tally.allowed);
            count(ReportedOutcome::Denied, tally.denied);
            count(ReportedOutcome::ShadowRefused, tally.shadow_refused);
        }
        publish(&self.metrics, &self.rlqs);
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        if let Some(trace) = self.trace.as_ref().filter(|_| self.opened) {
            trace.record(RlqsEvent::Closed { error: self.failed });
        }
        publish(&self.metrics, &self.rlqs);
    }
}

fn action_label(answer: &Assignment) -> &'static str {
    match answer {
        Assignment::Assign { strategy, .. } => match strategy {
            Strategy::AllowAll => "allow_all",
            Strategy::DenyAll => "deny_all",
            Strategy::TokenBucket { .. } => "token_bucket",
        },
        Assignment::Abandon { .. } => "abandon",
    }
}
