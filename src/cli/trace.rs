//! Tracing flags of `sluice serve` (off unless `--otlp-endpoint` is given).

use clap::{Args, ValueEnum};
use sluice::telemetry::{DEFAULT_SERVICE_NAME, OtlpProtocol, Propagator, TraceSettings};

/// OpenTelemetry tracing of calls.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Export a span per call over OTLP to this collector (e.g. http://otel-collector:4317; with
    /// `--otlp-protocol http` the traces URL, /v1/traces added to a URL without a path); unset:
    /// no tracing, at no cost per call.
    #[arg(long, env = "SLUICE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP over gRPC or over HTTP (protobuf, plain http:// only).
    #[arg(long, env = "SLUICE_OTLP_PROTOCOL", value_enum, default_value_t = OtlpProtocolArg::Grpc)]
    pub otlp_protocol: OtlpProtocolArg,
    /// Fraction of calls traced when Envoy sent no sampling decision (0 to 1); a call whose
    /// parent span was sampled, or not, keeps that decision.
    #[arg(long, env = "SLUICE_TRACE_SAMPLING_RATIO", default_value_t = 1.0, value_parser = super::parse_ratio)]
    pub trace_sampling_ratio: f64,
    /// `service.name` of the spans.
    #[arg(long, env = "SLUICE_SERVICE_NAME", default_value = DEFAULT_SERVICE_NAME)]
    pub service_name: String,
    /// `service.namespace` of the spans.
    #[arg(long, env = "SLUICE_SERVICE_NAMESPACE")]
    pub service_namespace: Option<String>,
    /// `service.instance.id` of the spans (e.g. the pod name).
    #[arg(long, env = "SLUICE_SERVICE_INSTANCE_ID")]
    pub service_instance_id: Option<String>,
    /// The formats a call's parent trace context is read from, tried in this order (the first
    /// that finds one wins): `w3c` (`traceparent`, Envoy's OpenTelemetry tracer), `b3` (the
    /// `b3` header or `x-b3-*` headers, Envoy's Zipkin tracer).
    #[arg(
        long,
        env = "SLUICE_OTLP_PROPAGATORS",
        value_enum,
        value_delimiter = ',',
        default_value = "w3c,b3"
    )]
    pub otlp_propagators: Vec<PropagatorArg>,
}

/// One of `--otlp-propagators`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PropagatorArg {
    /// W3C trace context (`traceparent`, `tracestate`).
    W3c,
    /// B3, single header or multiple headers.
    B3,
}

impl PropagatorArg {
    fn propagator(self) -> Propagator {
        match self {
            PropagatorArg::W3c => Propagator::W3c,
            PropagatorArg::B3 => Propagator::B3,
        }
    }
}

/// `--otlp-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtlpProtocolArg {
    /// OTLP/gRPC (collector port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (collector port 4318).
    Http,
}

impl TraceArgs {
    /// The tracing settings, or `None` when tracing is off.
    pub fn settings(&self) -> Option<TraceSettings> {
        let endpoint = self.otlp_endpoint.as_ref()?;
        Some(TraceSettings {
            protocol: match self.otlp_protocol {
                OtlpProtocolArg::Grpc => OtlpProtocol::Grpc,
                OtlpProtocolArg::Http => OtlpProtocol::Http,
            },
            sampling_ratio: self.trace_sampling_ratio,
            service_name: self.service_name.clone(),
            service_namespace: self.service_namespace.clone(),
            instance_id: self.service_instance_id.clone(),
            propagators: self
                .otlp_propagators
                .iter()
                .map(|p| p.propagator())
                .collect(),
            ..TraceSettings::new(endpoint.clone())
        })
    }
}
