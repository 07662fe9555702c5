//! The gRPC `envoy.service.rate_limit_quota.v3.RateLimitQuotaService` (RLQS): the wire of the
//! RLQS wing and nothing more. Each stream's messages are translated (`convert`) and handed to
//! [`Rlqs::serve`]; what comes back is translated into responses, counted and traced
//! (`answers`), on the wing's thread.

mod answers;
mod convert;

use std::sync::Arc;

use futures_util::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::Metrics;
use crate::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::rlqs::{Incoming, Reports, Rlqs};
use crate::telemetry::CallTracer;

pub use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;

/// The RLQS service over the [`Rlqs`] wing.
#[derive(Clone)]
pub struct RlqsService {
    rlqs: Rlqs,
    metrics: Arc<Metrics>,
    /// `None` when tracing is off.
    tracer: Option<CallTracer>,
}

impl RlqsService {
    /// Serves `rlqs`, counting in `metrics`, tracing each stream's events with `tracer` if any.
    pub fn new(rlqs: Rlqs, metrics: Arc<Metrics>, tracer: Option<CallTracer>) -> Self {
        Self {
            rlqs,
            metrics,
            tracer,
        }
    }

    /// The generated server for this service.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = answers::Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<answers::Responses>, Status> {
        let peer = request.remote_addr().map(|addr| addr.ip());
        let trace = (self.tracer.as_ref()).map(|t| t.stream(request.metadata()));
        let reports: Reports = Box::pin(request.into_inner().map(|message| match message {
            Ok(message) => convert::report(message),
            Err(status) => {
                tracing::debug!(%status, "RLQS stream ended by an error");
                Incoming::Broken
            }
        }));
        let seen = answers::Seen::new(self.rlqs.clone(), self.metrics.clone(), trace);
        let responses = self.rlqs.serve(peer, reports, seen.translate());
        answers::publish(&self.metrics, &self.rlqs);
        Ok(Response::new(responses))
    }
}

#[cfg(test)]
mod tests;
