//! The gRPC `envoy.service.ratelimit.v3.RateLimitService`: proto ↔ domain mapping only; the
//! RLQS service is `rlqs`.

pub mod rlqs;
mod server;
pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use crate::clock::{MILLI, Nanos};
use crate::insight::Insight;
use crate::limiter::{self, Code, Decision, InvalidRequest, LimitError, Limiter};
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::proto::rate_limit_response::{self, DescriptorStatus, rate_limit};
use crate::proto::{RateLimitRequest, RateLimitResponse};
use crate::rules::Unit;
use crate::telemetry::{CallSpan, CallTracer};

/// The RLS route's service trait (generated over [`Decision`], which [`wire::write`] encodes).
pub use server::rate_limit_service_server::RateLimitService;
/// The generated RLS route's server over [`RlsService`].
pub use server::rate_limit_service_server::RateLimitServiceServer;

/// The RLS v3 service backed by a [`Limiter`].
#[derive(Clone)]
pub struct RlsService {
    limiter: Arc<Limiter>,
    insight: Arc<Insight>,
    /// `None` when tracing is off: then a call spends nothing on it beyond this test.
    tracer: Option<CallTracer>,
}

impl RlsService {
    /// Wraps `limiter`; every decision is counted in `insight`, and traced by `tracer` if any.
    pub fn new(limiter: Arc<Limiter>, insight: Arc<Insight>, tracer: Option<CallTracer>) -> Self {
        Self {
            limiter,
            insight,
            tracer,
        }
    }

    /// Maps, checks and maps back; malformed calls are INVALID_ARGUMENT.
    async fn check(
        &self,
        request: RateLimitRequest,
        mut span: Option<CallSpan>,
    ) -> Result<Decision, Status> {
        let request = match to_domain(request) {
            Ok(request) => request,
            Err(e) => {
                self.limiter.record_malformed();
                self.insight.observe_invalid();
                let message = e.to_string();
                if let Some(span) = &mut span {
                    span.record_invalid(&message);
                }
                return Err(Status::invalid_argument(message));
            }
        };
        let result = self.limiter.check(&request).await;
        self.insight.observe(&request, &result);
        if let Some(span) = &mut span {
            span.record(&request, &self.limiter.rules(), &result);
        }
        match result {
            Ok(decision) => Ok(decision),
            Err(LimitError::Invalid(e)) => Err(Status::invalid_argument(e.to_string())),
            // UNAVAILABLE, never UNKNOWN: Envoy's failure_mode_deny must decide a store outage,
            // transient or not (a bad script reply is the store failing as much as a timeout).
            Err(LimitError::Store(e)) => Err(Status::unavailable(e.to_string())),
            // Before the first rules from xDS: Envoy's failure_mode_deny decides, as it would
            // for envoyproxy/ratelimit, which refuses connections until then.
            Err(e @ LimitError::NoRules) => Err(Status::unavailable(e.to_string())),
        }
    }

    /// The tonic server for this service.
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<Decision>, Status> {
        let started = Instant::now();
        let span = self
            .tracer
            .as_ref()
            .and_then(|tracer| tracer.start(request.metadata()));
        let decision = self.check(request.into_inner(), span).await;
        // The gRPC method's own figures (envoyproxy/ratelimit's `total_requests` and
        // `response_time` by `grpc_method`): the transport's, around mapping and checking, so
        // recorded here; every other figure of the call is the limiter's (`limiter/record.rs`).
        self.limiter
            .metrics()
            .record_call(started.elapsed().as_secs_f64());
        decision.map(Response::new)
    }
}

/// Converts a protobuf request into the limiter's request (moving the strings, not copying).
pub fn to_domain(request: RateLimitRequest) -> Result<limiter::Request, InvalidRequest> {
    let descriptors = request
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(index, d)| {
            let limit_override = d
                .limit
                .map(|o| {
                    let unit =
                        override_unit(o.unit).ok_or_else(|| InvalidRequest::BadOverride {
                            index,
                            reason: format!("unit {} is not one of SECOND..YEAR", o.unit),
                        })?;
                    Ok(limiter::LimitOverride {
                        requests_per_unit: o.requests_per_unit,
                        unit,
                    })
                })
                .transpose()?;
            Ok(limiter::Descriptor {
                entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                limit_override,
                hits_addend: d.hits_addend.map(|w| w.value),
            })
        })
        .collect::<Result<_, InvalidRequest>>()?;
    Ok(limiter::Request {
        domain: request.domain,
        descriptors,
        hits_addend: request.hits_addend,
    })
}

/// Converts a decision into the protobuf response.
pub fn to_proto(decision: Decision) -> RateLimitResponse {
    let statuses = decision
        .statuses
        .into_iter()
        .map(|s| DescriptorStatus {
            code: code(s.code) as i32,
            current_limit: s.limit.map(|l| rate_limit_response::RateLimit {
                name: l.name.as_deref().unwrap_or_default().to_owned(),
                requests_per_unit: l.requests_per_unit,
                unit: response_unit(l.unit) as i32,
            }),
            limit_remaining: s.remaining,
            duration_until_reset: s.reset_after.map(duration_ms_up),
            quota: None,
        })
        .collect();
    let response_headers_to_add = decision
        .headers
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.into_owned(),
            value: value.to_string(),
            raw_value: Vec::new(),
        })
        .collect();
    RateLimitResponse {
        overall_code: code(decision.code) as i32,
        statuses,
        response_headers_to_add,
        dynamic_metadata: decision.dynamic_metadata.as_ref().map(to_struct),
        ..RateLimitResponse::default()
    }
}

/// JSON (the limiter's dynamic metadata) as a `google.protobuf.Struct`; every number becomes a
/// double, as in any Struct.
fn to_struct(fields: &serde_json::Map<String, serde_json::Value>) -> pbjson_types::Struct {
    fields
        .iter()
        .map(|(key, value)| (key.clone(), to_value(value)))
        .collect()
}

fn to_value(value: &serde_json::Value) -> pbjson_types::Value {
    use serde_json::Value as Json;
    match value {
        Json::Null => ().into(),
        Json::Bool(b) => (*b).into(),
        // Always Some without serde_json's arbitrary_precision feature.
        Json::Number(n) => n.as_f64().unwrap_or_default().into(),
        Json::String(s) => s.clone().into(),
        Json::Array(items) => items.iter().map(to_value).collect::<Vec<_>>().into(),
        Json::Object(fields) => to_struct(fields).into(),
    }
}

fn code(code: Code) -> rate_limit_response::Code {
    match code {
        Code::Ok => rate_limit_response::Code::Ok,
        Code::OverLimit => rate_limit_response::Code::OverLimit,
    }
}

fn override_unit(unit: i32) -> Option<Unit> {
    Some(match RateLimitUnit::try_from(unit).ok()? {
        RateLimitUnit::Unknown => return None,
        RateLimitUnit::Second => Unit::Second,
        RateLimitUnit::Minute => Unit::Minute,
        RateLimitUnit::Hour => Unit::Hour,
        RateLimitUnit::Day => Unit::Day,
        RateLimitUnit::Month => Unit::Month,
        RateLimitUnit::Year => Unit::Year,
    })
}

fn response_unit(unit: Option<Unit>) -> rate_limit::Unit {
    match unit {
        None => rate_limit::Unit::Unknown,
        Some(Unit::Second) => rate_limit::Unit::Second,
        Some(Unit::Minute) => rate_limit::Unit::Minute,
        Some(Unit::Hour) => rate_limit::Unit::Hour,
        Some(Unit::Day) => rate_limit::Unit::Day,
        Some(Unit::Week) => rate_limit::Unit::Week,
        Some(Unit::Month) => rate_limit::Unit::Month,
        Some(Unit::Year) => rate_limit::Unit::Year,
    }
}

/// Millisecond precision, rounded up (a client that waits this long is admitted), never zero.
fn duration_ms_up(nanos: Nanos) -> pbjson_types::Duration {
    let ms = nanos.div_ceil(MILLI).max(1);
    pbjson_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * MILLI) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations round up to whole milliseconds and are never zero.
    #[test]
    fn durations_round_up_to_milliseconds() {
        assert_eq!(
            duration_ms_up(0),
            pbjson_types::Duration {
                seconds: 0,
                nanos: 1_000_000
            }
        );
        assert_eq!(
            duration_ms_up(1_000_000_001),
            pbjson_types::Duration {
                seconds: 1,
                nanos: 1_000_000
            }
        );
        assert_eq!(
            duration_ms_up(58_000_000_000),
            pbjson_types::Duration {
                seconds: 58,
                nanos: 0
            }
        );
    }

    /// Unknown or zero override units are invalid input, never a crash.
    #[test]
    fn override_units() {
        assert_eq!(override_unit(0), None);
        assert_eq!(override_unit(7), None);
        assert_eq!(override_unit(-3), None);
        assert_eq!(override_unit(2), Some(Unit::Minute));
    }
}
