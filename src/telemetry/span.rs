//! One call's span: what was asked (domain, descriptor keys — never values), which rules
//! matched, what was answered, and how the store fared.

use opentelemetry::trace::{Span as _, Status};
use opentelemetry::{KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::Span;

use crate::limiter::{Code, Decision, LimitError, Request, StoreUse};
use crate::rules::RuleSet;

/// Attribute names (OpenTelemetry's `rpc.*` conventions, then sluice's `ratelimit.*`).
const RPC_SYSTEM: &str = "rpc.system";
const RPC_SERVICE: &str = "rpc.service";
const RPC_METHOD: &str = "rpc.method";
const RPC_STATUS: &str = "rpc.grpc.status_code";
const DOMAIN: &str = "ratelimit.domain";
const DESCRIPTOR_KEYS: &str = "ratelimit.descriptor_keys";
const RULES: &str = "ratelimit.rules";
const DECISION: &str = "ratelimit.decision";
const STATUSES: &str = "ratelimit.statuses";
const STORE_MS: &str = "ratelimit.store.duration_ms";
const DEGRADED: &str = "ratelimit.degraded";

/// The service name in `rpc.service`.
const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// What `ratelimit.rules` says for a descriptor no configured rule limits.
const NO_RULE: &str = "";
/// What `ratelimit.rules` says for a descriptor that carried its own `limit`.
const OVERRIDE_RULE: &str = "(request override)";

/// The span of one sampled call; ended when dropped (so an early return still exports it).
/// Boxed: every call's future holds an `Option<CallSpan>`, and an unboxed span would make that
/// future hundreds of bytes larger (moved on every call, traced or not).
pub struct CallSpan {
    span: Box<Span>,
}

impl CallSpan {
    /// Keeps `span` only if it records (the sampler kept the call).
    pub(super) fn recording(span: Span) -> Option<Self> {
        use opentelemetry::trace::Span as _;
        span.is_recording().then(|| Self {
            span: Box::new(span),
        })
    }

    /// Records the call `request`, matched against `rules`, and its `result`.
    pub fn record(
        &mut self,
        request: &Request,
        rules: &RuleSet,
        result: &Result<Decision, LimitError>,
    ) {
        let span = &mut self.span;
        span.set_attributes([
            KeyValue::new(RPC_SYSTEM, "grpc"),
            KeyValue::new(RPC_SERVICE, RLS_SERVICE),
            KeyValue::new(RPC_METHOD, super::CALL_SPAN),
            KeyValue::new(DOMAIN, request.domain.clone()),
            KeyValue::new(
                DESCRIPTOR_KEYS,
                strings(request.descriptors.iter().map(keys)),
            ),
            KeyValue::new(RULES, strings(matched_rules(request, rules))),
        ]);
        match result {
            Ok(decision) => self.record_decision(decision),
            Err(error) => self.record_error(error),
        }
    }

    /// Records a call refused before it reached the limiter (malformed).
    pub fn record_invalid(&mut self, message: &str) {
        self.span.set_attribute(KeyValue::new(
            RPC_STATUS,
            tonic::Code::InvalidArgument as i64,
        ));
        self.span.set_status(Status::error(message.to_owned()));
    }

    fn record_decision(&mut self, decision: &Decision) {
        let span = &mut self.span;
        span.set_attribute(KeyValue::new(DECISION, code_name(decision.code)));
        span.set_attribute(KeyValue::new(
            STATUSES,
            strings(decision.statuses.iter().map(|s| code_name(s.code))),
        ));
        span.set_attribute(KeyValue::new(RPC_STATUS, tonic::Code::Ok as i64));
        let (elapsed, degraded) = match decision.store {
            StoreUse::Skipped => (None, false),
            StoreUse::Answered(d) => (Some(d), false),
            StoreUse::Failed(d) => (Some(d), true),
        };
        if let Some(elapsed) = elapsed {
            span.set_attribute(KeyValue::new(STORE_MS, elapsed.as_secs_f64() * 1e3));
        }
        span.set_attribute(KeyValue::new(DEGRADED, degraded));
    }

    fn record_error(&mut self, error: &LimitError) {
        let (code, degraded) = match error {
            LimitError::Invalid(_) => (tonic::Code::InvalidArgument, false),
            LimitError::Store(_) => (tonic::Code::Unavailable, true),
            // Answered UNAVAILABLE (service.rs) before the first rules; no store was involved.
            LimitError::NoRules => (tonic::Code::Unavailable, false),
        };
        let span = &mut self.span;
        span.set_attribute(KeyValue::new(RPC_STATUS, code as i64));
        span.set_attribute(KeyValue::new(DEGRADED, degraded));
        span.set_status(Status::error(error.to_string()));
    }
}

impl Drop for CallSpan {
    fn drop(&mut self) {
        self.span.end();
    }
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// A descriptor's keys, outermost first, joined by `.` (as the rule tree reads).
fn keys(descriptor: &crate::limiter::Descriptor) -> String {
    let keys: Vec<&str> = descriptor.entries.iter().map(|(k, _)| k.as_str()).collect();
    keys.join(".")
}

/// For each descriptor, the full key of the rule node whose limits apply (before `replaces`),
/// `""` when none does.
fn matched_rules(request: &Request, rules: &RuleSet) -> Vec<String> {
    let domain = rules.domain(&request.domain);
    request
        .descriptors
        .iter()
        .map(|d| {
            if d.limit_override.is_some() {
                return OVERRIDE_RULE.to_owned();
            }
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            domain
                .and_then(|domain| domain.lookup(&entries))
                .filter(|found| !found.limits().is_empty())
                .map_or_else(|| NO_RULE.to_owned(), |found| found.node().full_key.clone())
        })
        .collect()
}

fn strings<S: Into<StringValue>>(items: impl IntoIterator<Item = S>) -> Value {
    Value::Array(
        items
            .into_iter()
            .map(Into::into)
            .collect::<Vec<StringValue>>()
            .into(),
    )
}
