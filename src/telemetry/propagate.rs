//! Reading the caller's trace context from gRPC metadata: W3C `traceparent`/`tracestate`, what
//! Envoy sends with its OpenTelemetry tracer (B3 headers, from Envoy's Zipkin tracer, are not
//! read: their propagator's crate is deprecated).

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{KeyRef, MetadataMap};

/// The parent context the metadata carries (an empty context when it carries none, or a
/// malformed one: a bad header never fails a call).
pub(super) fn extract(metadata: &MetadataMap) -> Context {
    TraceContextPropagator::new().extract(&Metadata(metadata))
}

struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    fn trace_id(headers: &[(&'static str, &str)]) -> String {
        let mut metadata = MetadataMap::new();
        for (key, value) in headers {
            metadata.insert(*key, value.parse().unwrap());
        }
        let context = extract(&metadata);
        context.span().span_context().trace_id().to_string()
    }

    /// `traceparent` is read, with `tracestate` beside it.
    #[test]
    fn reads_w3c_trace_context() {
        let w3c = "4bf92f3577b34da6a3ce929d0e0e4736";
        let traceparent = format!("00-{w3c}-00f067aa0ba902b7-01");
        assert_eq!(trace_id(&[("traceparent", &traceparent)]), w3c);
        let with_state = [
            ("traceparent", traceparent.as_str()),
            ("tracestate", "envoy=1"),
        ];
        assert_eq!(trace_id(&with_state), w3c);
    }

    /// Missing or malformed headers give no parent, never an error.
    #[test]
    fn malformed_headers_give_no_parent() {
        let none = "00000000000000000000000000000000";
        assert_eq!(trace_id(&[]), none);
        assert_eq!(trace_id(&[("traceparent", "00-zz-yy-01")]), none);
    }
}
