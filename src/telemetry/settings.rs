//! What an operator chooses about tracing: where spans go, how many calls are sampled, and the
//! names the spans carry.

use std::time::Duration;

/// The service name spans carry unless told otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "sluice";

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (the collector's port 4317).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318), envoyproxy/ratelimit's default.
    Http,
}

/// A trace-context format the parent of a call is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagator {
    /// W3C trace context: `traceparent` (and `tracestate`), what Envoy's OpenTelemetry tracer
    /// sends.
    W3c,
    /// B3, what Envoy's Zipkin tracer sends (Istio meshes on Zipkin): the single `b3` header or
    /// the `x-b3-traceid`/`x-b3-spanid`/`x-b3-sampled`/`x-b3-flags` headers, both read.
    B3,
}

impl Propagator {
    /// Every format, in the order a call's headers are tried by default (envoyproxy/ratelimit
    /// reads both too).
    pub const DEFAULT: [Propagator; 2] = [Propagator::W3c, Propagator::B3];
}

/// Tracing settings (tracing is on when these are present).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The collector: for gRPC e.g. `http://otel-collector:4317`; for HTTP the traces URL, e.g.
    /// `http://otel-collector:4318/v1/traces` (a URL without a path gets `/v1/traces`).
    pub endpoint: String,
    /// gRPC or HTTP.
    pub protocol: OtlpProtocol,
    /// Fraction of calls without a sampled parent that are traced, 0 to 1. A call whose parent
    /// (Envoy's span) says sampled or not keeps that decision.
    pub sampling_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// `service.namespace`, if any.
    pub service_namespace: Option<String>,
    /// `service.instance.id`, if any (e.g. the pod name).
    pub instance_id: Option<String>,
    /// Longest wait for the collector on one export.
    pub export_timeout: Duration,
    /// The formats a call's parent context is read from, tried in this order: the first that
    /// finds a valid parent wins.
    pub propagators: Vec<Propagator>,
}

impl TraceSettings {
    /// Every call sampled, named `sluice`, exporting to `endpoint` over OTLP/gRPC.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol: OtlpProtocol::Grpc,
            sampling_ratio: 1.0,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            service_namespace: None,
            instance_id: None,
            export_timeout: Duration::from_secs(10),
            propagators: Propagator::DEFAULT.to_vec(),
        }
    }
}
