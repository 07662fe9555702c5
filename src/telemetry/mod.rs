//! OpenTelemetry tracing of rate-limit calls: one server span per call, continuing the trace
//! context Envoy sends (W3C `traceparent`, or B3 from its Zipkin tracer), exported over OTLP (gRPC or HTTP).
//!
//! Off by default, and then free: the transport holds an `Option<CallTracer>` and does nothing
//! more than test it. `settings.rs` is what an operator chooses, `export.rs` builds the
//! exporter for the protocol, `propagate.rs` reads the parent context from gRPC metadata,
//! `span.rs` records one call's attributes.

mod export;
mod propagate;
mod rlqs;
mod settings;
mod span;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanKind, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

pub use self::rlqs::{RlqsEvent, RlqsTrace};
pub use self::settings::{DEFAULT_SERVICE_NAME, OtlpProtocol, Propagator, TraceSettings};
pub use self::span::CallSpan;

/// The name of the span of one `ShouldRateLimit` call (also the gRPC method).
pub(crate) const CALL_SPAN: &str = "ShouldRateLimit";

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {reason}")]
pub struct TraceError {
    endpoint: String,
    reason: String,
}

/// Starts the span of each call and exports the finished ones. Cloning shares the exporter.
#[derive(Clone)]
pub struct CallTracer {
    inner: Arc<TracerInner>,
}

struct TracerInner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagators: propagate::Propagators,
}

impl std::fmt::Debug for CallTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallTracer").finish_non_exhaustive()
    }
}

impl CallTracer {
    /// Builds the OTLP exporter (connecting lazily: a collector that is down loses spans, never
    /// calls) and the parent-based ratio sampler. Must run inside a Tokio runtime.
    pub fn new(settings: &TraceSettings) -> Result<Self, TraceError> {
        let exporter = export::span_exporter(settings).map_err(|reason| TraceError {
            endpoint: settings.endpoint.clone(),
            reason,
        })?;
        // A call Envoy sampled (or not) keeps that choice; a call without a parent is sampled
        // at the ratio.
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sampling_ratio,
        )));
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler)
            .with_resource(resource(settings))
            .build();
        let tracer = provider.tracer(env!("CARGO_PKG_NAME"));
        Ok(Self {
            inner: Arc::new(TracerInner {
                provider,
                tracer,
                propagators: propagate::Propagators::new(
                    &settings.propagators,
                    settings.sampling_ratio,
                ),
            }),
        })
    }

    /// Starts the span of a call whose gRPC (or HTTP) headers are `metadata`, as a child of the
    /// trace context they carry. `None` when the sampler drops the call: nothing more is spent.
    pub fn start(&self, metadata: &tonic::metadata::MetadataMap) -> Option<CallSpan> {
        let parent = self.inner.propagators.extract(metadata);
        let span = self
            .inner
            .tracer
            .span_builder(CALL_SPAN)
            .with_kind(SpanKind::Server)
            .start_with_context(&self.inner.tracer, &parent);
        CallSpan::recording(span)
    }

    /// Exports the spans still buffered and stops the exporter (at shutdown; blocks up to
    /// `timeout`).
    pub fn shutdown(&self, timeout: Duration) {
        if let Err(e) = self.inner.provider.shutdown_with_timeout(timeout) {
            tracing::warn!(error = %e, "trace exporter did not shut down cleanly");
        }
    }
}

/// The resource every span carries: service name, namespace and instance.
fn resource(settings: &TraceSettings) -> Resource {
    let mut attributes = Vec::new();
    if let Some(namespace) = &settings.service_namespace {
        attributes.push(KeyValue::new("service.namespace", namespace.clone()));
    }
    if let Some(instance) = &settings.instance_id {
        attributes.push(KeyValue::new("service.instance.id", instance.clone()));
    }
    Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attributes(attributes)
        .build()
}
