//! Reading the caller's trace context from gRPC metadata, in the formats the operator chose:
//! W3C `traceparent`/`tracestate` (Envoy's OpenTelemetry tracer) and B3 (Envoy's Zipkin tracer,
//! as Istio configures it: the single `b3` header or the `x-b3-*` headers).

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt as _, TraceFlags};
use opentelemetry_propagator_b3::{B3Encoding, Propagator as B3Propagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{KeyRef, MetadataMap};

use super::settings::Propagator;

/// B3's "debug" state as the B3 propagator marks it: sampled, whatever the ratio.
const B3_DEBUG: u8 = 0x04;
/// B3's "deferred" state (no sampling decision sent): decided here, by the ratio.
const B3_DEFERRED: u8 = 0x02;

/// The chosen formats, each built once.
pub(super) struct Propagators {
    formats: Vec<(Propagator, Box<dyn TextMapPropagator + Send + Sync>)>,
    /// The sampling ratio, for a B3 parent that sent no decision.
    ratio: f64,
}

impl Propagators {
    /// The formats of `chosen`, in its order (a format named twice is tried once); `ratio`
    /// decides a parent that left sampling to sluice.
    pub(super) fn new(chosen: &[Propagator], ratio: f64) -> Self {
        let mut seen = Vec::new();
        let mut formats: Vec<(Propagator, Box<dyn TextMapPropagator + Send + Sync>)> = Vec::new();
        for format in chosen {
            if seen.contains(format) {
                continue;
            }
            seen.push(*format);
            let propagator: Box<dyn TextMapPropagator + Send + Sync> = match format {
                Propagator::W3c => Box::new(TraceContextPropagator::new()),
                // Both encodings, so a single `b3` header's `d` (debug) state is read too.
                Propagator::B3 => Box::new(B3Propagator::with_encoding(
                    B3Encoding::SingleAndMultiHeader,
                )),
            };
            formats.push((*format, propagator));
        }
        Self { formats, ratio }
    }

    /// The parent context the metadata carries in the first format that finds a valid one (an
    /// empty context when none does, or the headers are malformed: a bad header never fails a
    /// call). The first wins, so a call carrying both `traceparent` and `b3` continues the
    /// format listed first.
    pub(super) fn extract(&self, metadata: &MetadataMap) -> Context {
        let carrier = Metadata(metadata);
        for (format, propagator) in &self.formats {
            let context = propagator.extract(&carrier);
            let span = context.span();
            let parent = span.span_context();
            if parent.is_valid() {
                let decided = match format {
                    Propagator::B3 => self.b3_decision(parent.trace_flags(), parent),
                    Propagator::W3c => None,
                };
                return match decided {
                    Some(flags) => Context::new().with_remote_span_context(SpanContext::new(
                        parent.trace_id(),
                        parent.span_id(),
                        flags,
                        true,
                        parent.trace_state().clone(),
                    )),
                    None => context.clone(),
                };
            }
        }
        Context::new()
    }

    /// B3's two states W3C lacks, as sampled or not (`None`: the flags stand): debug is sampled; deferred is decided by the ratio on the trace id, as a call without a parent
    /// is.
    fn b3_decision(&self, flags: TraceFlags, parent: &SpanContext) -> Option<TraceFlags> {
        let bits = flags.to_u8();
        if bits & B3_DEBUG != 0 {
            return Some(TraceFlags::SAMPLED);
        }
        if bits & B3_DEFERRED == 0 {
            return None;
        }
        let low = u128::from_be_bytes(parent.trace_id().to_bytes()) as u64;
        let sampled = self.ratio >= 1.0 || (low as f64) < self.ratio * (u64::MAX as f64);
        Some(if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        })
    }
}

struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        // gRPC metadata keys are lowercase; the B3 propagator asks for `X-B3-TraceId`.
        let key = key.to_ascii_lowercase();
        let value = self.0.get(key.as_str()).and_then(|v| v.to_str().ok())?;
        // B3's legacy `x-b3-sampled: true`, which the propagator reads only without the single
        // header's encoding.
        Some(match (key.as_str(), value) {
            ("x-b3-sampled", "true") => "1",
            _ => value,
        })
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
    use opentelemetry::trace::TraceFlags;

    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    fn parent(chosen: &[Propagator], headers: &[(&'static str, &str)]) -> (String, String, bool) {
        parent_at(chosen, 1.0, headers)
    }

    fn parent_at(
        chosen: &[Propagator],
        ratio: f64,
        headers: &[(&'static str, &str)],
    ) -> (String, String, bool) {
        let mut metadata = MetadataMap::new();
        for (key, value) in headers {
            metadata.insert(*key, value.parse().unwrap());
        }
        let context = Propagators::new(chosen, ratio).extract(&metadata);
        let span = context.span();
        let span = span.span_context();
        (
            span.trace_id().to_string(),
            span.span_id().to_string(),
            span.trace_flags() == TraceFlags::SAMPLED,
        )
    }

    fn both() -> Vec<Propagator> {
        Propagator::DEFAULT.to_vec()
    }

    /// `traceparent` is read, with `tracestate` beside it.
    #[test]
    fn reads_w3c_trace_context() {
        let traceparent = format!("00-{TRACE}-{SPAN}-01");
        let found = parent(&both(), &[("traceparent", &traceparent)]);
        assert_eq!(found, (TRACE.into(), SPAN.into(), true));
        let with_state = [
            ("traceparent", traceparent.as_str()),
            ("tracestate", "envoy=1"),
        ];
        assert_eq!(parent(&both(), &with_state).0, TRACE);
    }

    /// The single `b3` header: trace, span, sampling state (and the optional parent span).
    #[test]
    fn reads_single_b3_header() {
        let sampled = format!("{TRACE}-{SPAN}-1");
        assert_eq!(
            parent(&both(), &[("b3", &sampled)]),
            (TRACE.into(), SPAN.into(), true)
        );
        let unsampled = format!("{TRACE}-{SPAN}-0-05e3ac9a4f6e3b90");
        assert_eq!(
            parent(&both(), &[("b3", &unsampled)]),
            (TRACE.into(), SPAN.into(), false)
        );
    }

    /// Envoy's Zipkin tracer sends the `x-b3-*` headers; a 64-bit trace id is widened, and
    /// `x-b3-flags: 1` (debug) means sampled.
    #[test]
    fn reads_multi_b3_headers() {
        let headers = [
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", SPAN),
            ("x-b3-sampled", "1"),
        ];
        assert_eq!(parent(&both(), &headers), (TRACE.into(), SPAN.into(), true));
        let short = [
            ("x-b3-traceid", "a3ce929d0e0e4736"),
            ("x-b3-spanid", SPAN),
            ("x-b3-sampled", "1"),
        ];
        assert_eq!(
            parent(&both(), &short).0,
            "0000000000000000a3ce929d0e0e4736"
        );
        let debug = [
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", SPAN),
            ("x-b3-flags", "1"),
        ];
        assert!(parent(&both(), &debug).2);
        let legacy = [
            ("x-b3-traceid", TRACE),
            ("x-b3-spanid", SPAN),
            ("x-b3-sampled", "true"),
        ];
        assert!(parent(&both(), &legacy).2);
    }

    /// A single header's `d` is sampled; a B3 parent without a decision is decided by the
    /// ratio (every call at 1, none at 0), as a call without a parent is.
    #[test]
    fn b3_debug_and_deferred_states() {
        let debug = format!("{TRACE}-{SPAN}-d");
        assert!(parent_at(&both(), 0.0, &[("b3", &debug)]).2);
        let deferred = format!("{TRACE}-{SPAN}");
        assert_eq!(
            parent_at(&both(), 1.0, &[("b3", &deferred)]),
            (TRACE.into(), SPAN.into(), true)
        );
        assert!(!parent_at(&both(), 0.0, &[("b3", &deferred)]).2);
        let multi = [("x-b3-traceid", TRACE), ("x-b3-spanid", SPAN)];
        assert!(parent_at(&both(), 1.0, &multi).2);
        assert!(!parent_at(&both(), 0.0, &multi).2);
    }

    /// The first format listed wins when a call carries both; a format not chosen is not read.
    #[test]
    fn order_and_choice_decide() {
        let other = "11111111111111111111111111111111";
        let traceparent = format!("00-{TRACE}-{SPAN}-01");
        let b3 = format!("{other}-{SPAN}-1");
        let headers = [("traceparent", traceparent.as_str()), ("b3", b3.as_str())];
        assert_eq!(parent(&both(), &headers).0, TRACE);
        assert_eq!(
            parent(&[Propagator::B3, Propagator::W3c], &headers).0,
            other
        );
        let only_b3 = [("b3", b3.as_str())];
        assert_eq!(
            parent(&[Propagator::W3c], &only_b3).0,
            "00000000000000000000000000000000"
        );
    }

    /// Malformed or absent headers give an empty context, never an error.
    #[test]
    fn bad_headers_give_no_parent() {
        let none = "00000000000000000000000000000000";
        assert_eq!(parent(&both(), &[]).0, none);
        assert_eq!(parent(&both(), &[("traceparent", "00-zz-yy-01")]).0, none);
        assert_eq!(parent(&both(), &[("b3", "garbage")]).0, none);
        assert_eq!(parent(&both(), &[("x-b3-traceid", "xyz")]).0, none);
    }
}
