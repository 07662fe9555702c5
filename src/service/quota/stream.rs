//! One RLQS stream: bound to its domain by the first report, each report answered from the
//! quota book, its shares given back when it ends however it ends.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tonic::{Status, Streaming};

use super::ServiceState;
use super::convert;
use super::push::Outbox;
use crate::metrics::ReportedOutcome;
use crate::proto::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::quota::{BucketId, Push, StreamId, Tally, Usage};
use crate::rules::bucket::quota_action;
use crate::telemetry::{StreamEvent, StreamTrace};

/// Serves one stream until the client ends it, breaks a rule of the protocol, or stops reading.
pub(super) async fn serve(
    shared: Arc<ServiceState>,
    mut reports: Streaming<RateLimitQuotaUsageReports>,
    answers: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    _permit: OwnedSemaphorePermit,
    trace: Option<StreamTrace>,
) {
    let outbox = Arc::new(Outbox::new(answers, shared.metrics.clone()));
    let first = match reports.message().await {
        Ok(Some(first)) => first,
        // Ended before a word, or undecodable: nothing is held yet.
        Ok(None) => return,
        Err(status) => return outbox.fail(status),
    };
    if first.domain.is_empty() {
        return outbox.fail(Status::invalid_argument(
            "the first report of a quota stream must name its domain",
        ));
    }
    let domain = first.domain.clone();
    let mut stream = Bound::open(&shared, &domain, outbox.clone(), trace);
    let mut next = Some(first);
    while let Some(message) = next.take() {
        if let Err(status) = stream.report(message) {
            stream.failed = true;
            return outbox.fail(status);
        }
        if outbox.is_closed() {
            return;
        }
        next = match reports.message().await {
            Ok(message) => message,
            Err(status) => {
                tracing::debug!(domain = %domain, %status, "quota stream ended by an error");
                stream.failed = true;
                None
            }
        };
    }
}

/// A stream the book knows; dropping it (the stream ending in any way) gives its shares back.
struct Bound<'s> {
    shared: &'s ServiceState,
    domain: String,
    id: StreamId,
    outbox: Arc<Outbox>,
    trace: Option<StreamTrace>,
    /// Whether an error status ends the stream.
    failed: bool,
}

impl<'s> Bound<'s> {
    fn open(
        shared: &'s ServiceState,
        domain: &str,
        outbox: Arc<Outbox>,
        mut trace: Option<StreamTrace>,
    ) -> Self {
        let id = shared.book.open(domain, outbox.clone());
        tracing::debug!(domain, stream = id.0, "quota stream opened");
        shared
            .metrics
            .record_rlqs_load(shared.book.streams(), shared.book.buckets());
        if let Some(trace) = trace.as_mut() {
            trace.bind(domain);
            trace.record(StreamEvent::Opened);
        }
        Self {
            shared,
            domain: domain.to_string(),
            id,
            outbox,
            trace,
            failed: false,
        }
    }

    /// Answers one report: validated whole before the book sees any of it.
    fn report(&self, message: RateLimitQuotaUsageReports) -> Result<(), Status> {
        if !message.domain.is_empty() && message.domain != self.domain {
            return Err(Status::invalid_argument(format!(
                "this quota stream is bound to domain {:?}; open a new stream for {:?}",
                self.domain, message.domain
            )));
        }
        let usages = message
            .bucket_quota_usages
            .into_iter()
            .map(convert::usage)
            .collect::<Result<Vec<Usage>, Status>>()?;
        let rules = self.shared.rules.load();
        let resolve = |bucket: &BucketId| quota_action(&rules, &self.domain, bucket);
        let reported = self
            .shared
            .book
            .report(self.id, &usages, &resolve)
            .map_err(|e| Status::resource_exhausted(e.to_string()))?;
        self.count(&reported.tallies);
        if let Some(trace) = &self.trace {
            let answers = reported.answers.len();
            trace.record(StreamEvent::Report {
                buckets: usages.len(),
                answers,
            });
        }
        let metrics = &self.shared.metrics;
        metrics.record_rlqs_load(self.shared.book.streams(), self.shared.book.buckets());
        if !self.outbox.push(reported.answers) {
            return Err(Status::resource_exhausted(
                "the quota stream is not reading its answers",
            ));
        }
        Ok(())
    }

    fn count(&self, tallies: &[Tally]) {
        let metrics = &self.shared.metrics;
        for tally in tallies {
            let key = tally.rule.as_deref();
            let domain = &self.domain;
            metrics.record_rlqs_reported(domain, key, ReportedOutcome::Allowed, tally.allowed);
            metrics.record_rlqs_reported(domain, key, ReportedOutcome::Denied, tally.denied);
            let refused = tally.shadow_refused;
            metrics.record_rlqs_reported(domain, key, ReportedOutcome::ShadowRefused, refused);
        }
    }
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        self.shared.book.close(self.id);
        if let Some(trace) = &self.trace {
            trace.record(StreamEvent::Closed { error: self.failed });
        }
        let book = &self.shared.book;
        self.shared
            .metrics
            .record_rlqs_load(book.streams(), book.buckets());
        tracing::debug!(domain = %self.domain, stream = self.id.0, "quota stream closed");
    }
}
