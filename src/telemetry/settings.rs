//! What an operator chooses about tracing: where spans go, how many calls are sampled, and the
//! names the spans carry.

use std::time::Duration;

/// The service name spans carry unless told otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "sluice";

/// Tracing settings (tracing is on when these are present).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The OTLP/gRPC collector, e.g. `http://otel-collector:4317`.
    pub endpoint: String,
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
}

impl TraceSettings {
    /// Every call sampled, named `sluice`, exporting to `endpoint`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            sampling_ratio: 1.0,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            service_namespace: None,
            instance_id: None,
            export_timeout: Duration::from_secs(10),
        }
    }
}
