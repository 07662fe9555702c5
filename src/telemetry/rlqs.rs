//! The spans of an RLQS stream: one per event (opened, each report, closed), each a
//! child of the trace context the stream was opened with, sampled like a call.

use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};
use opentelemetry::{Context, KeyValue};

use super::CallTracer;

/// The service name in `rpc.service`.
const RLQS_SERVICE: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";
/// The stream's domain.
const DOMAIN: &str = "ratelimit.domain";

/// What one stream's events are traced with.
pub struct RlqsTrace {
    tracer: CallTracer,
    parent: Context,
    domain: String,
}

/// One event of a stream.
#[derive(Debug, Clone, Copy)]
pub enum RlqsEvent {
    /// The first report bound the stream to its domain.
    Opened,
    /// A report: its buckets, and the answers it got back.
    Report {
        /// Buckets in the report.
        buckets: usize,
        /// Bucket actions answered.
        answers: usize,
    },
    /// The stream ended, `error` when a status ended it.
    Closed {
        /// Whether the stream ended with an error status.
        error: bool,
    },
}

impl CallTracer {
    /// The trace of a stream opened with `metadata` (its `traceparent` or B3 headers, if any, are the parent).
    pub fn stream(&self, metadata: &tonic::metadata::MetadataMap) -> RlqsTrace {
        RlqsTrace {
            tracer: self.clone(),
            parent: self.inner.propagators.extract(metadata),
            domain: String::new(),
        }
    }
}

impl RlqsTrace {
    /// The domain the stream was bound to, on every later span.
    pub fn bind(&mut self, domain: &str) {
        self.domain = domain.to_string();
    }

    /// Exports one span for `event` (if the sampler keeps it).
    pub fn record(&self, event: RlqsEvent) {
        let (name, mut attributes) = match event {
            RlqsEvent::Opened => ("rlqs.open", vec![]),
            RlqsEvent::Report { buckets, answers } => (
                "rlqs.report",
                vec![
                    KeyValue::new("rlqs.buckets", buckets as i64),
                    KeyValue::new("rlqs.answers", answers as i64),
                ],
            ),
            RlqsEvent::Closed { error } => ("rlqs.close", vec![KeyValue::new("error", error)]),
        };
        let tracer = &self.tracer.inner.tracer;
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .start_with_context(tracer, &self.parent);
        if !span.is_recording() {
            return;
        }
        attributes.push(KeyValue::new("rpc.system", "grpc"));
        attributes.push(KeyValue::new("rpc.service", RLQS_SERVICE));
        attributes.push(KeyValue::new(DOMAIN, self.domain.clone()));
        span.set_attributes(attributes);
        span.end();
    }
}
