//! Tracing flags of `sluice serve` (off unless `--otlp-endpoint` is given).

use clap::{Args, ValueEnum};
use sluice::telemetry::{DEFAULT_SERVICE_NAME, OtlpProtocol, TraceSettings};

/// OpenTelemetry tracing of calls.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Export a span per call over OTLP to this collector (e.g. http://otel-collector:4317; with
    /// `--otlp-protocol http` the traces URL, /v1/traces added to a URL without a path); unset:
    /// no tracing, at no cost per call.
    #[arg(long, env = "SLUICE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP over gRPC or over HTTP (protobuf, plain http:// only).
    #[arg(long, env = "SLUICE_OTLP_PROTOCOL", value_enum, default_value_t = ProtocolArg::Grpc)]
    pub otlp_protocol: ProtocolArg,
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
}

/// `--otlp-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
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
                ProtocolArg::Grpc => OtlpProtocol::Grpc,
                ProtocolArg::Http => OtlpProtocol::Http,
            },
            sampling_ratio: self.trace_sampling_ratio,
            service_name: self.service_name.clone(),
            service_namespace: self.service_namespace.clone(),
            instance_id: self.service_instance_id.clone(),
            ..TraceSettings::new(endpoint.clone())
        })
    }
}
