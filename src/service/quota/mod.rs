//! The gRPC `envoy.service.rate_limit_quota.v3.RateLimitQuotaService` (RLQS): each stream is
//! bound to a domain by its first report and served by its own task over the quota book.
//!
//! `stream` runs one stream, `push` hands a stream the answers other streams' reports cause,
//! `convert` maps the messages.

mod convert;
mod push;
mod stream;

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::Metrics;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::proto::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::quota::QuotaBook;
use crate::rules::RuleSet;
use crate::telemetry::CallTracer;

pub use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;

/// Quota streams one server holds at once; past it a new stream is `RESOURCE_EXHAUSTED`.
pub const MAX_STREAMS: usize = 10_000;

/// Responses queued for a stream that has not read them yet; a stream that falls this far
/// behind is ended (its shares given back), so a client that never reads holds nothing.
pub const MAX_PENDING_ANSWERS: usize = 64;

/// What every stream shares.
struct ServiceState {
    book: Arc<QuotaBook>,
    rules: Arc<ArcSwap<RuleSet>>,
    metrics: Arc<Metrics>,
    permits: Arc<Semaphore>,
    /// `None` when tracing is off.
    tracer: Option<CallTracer>,
}

/// The RLQS service over a [`QuotaBook`] and the rules in force.
#[derive(Clone)]
pub struct QuotaService {
    shared: Arc<ServiceState>,
}

impl QuotaService {
    /// Serves `book`, resolving buckets against `rules`, counting in `metrics`, tracing each
    /// stream's events with `tracer` if any.
    pub fn new(
        book: Arc<QuotaBook>,
        rules: Arc<ArcSwap<RuleSet>>,
        metrics: Arc<Metrics>,
        tracer: Option<CallTracer>,
    ) -> Self {
        Self {
            shared: Arc::new(ServiceState {
                book,
                rules,
                metrics,
                permits: Arc::new(Semaphore::new(MAX_STREAMS)),
                tracer,
            }),
        }
    }

    /// The book it serves.
    pub fn book(&self) -> Arc<QuotaBook> {
        self.shared.book.clone()
    }

    /// The generated server for this service.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
    }
}

type Answers = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

#[tonic::async_trait]
impl RateLimitQuotaService for QuotaService {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, Status> {
        let permit = self
            .shared
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "this server holds its maximum of {MAX_STREAMS} quota streams"
                ))
            })?;
        let (answers, queued) = mpsc::channel(MAX_PENDING_ANSWERS);
        let trace = (self.shared.tracer.as_ref()).map(|t| t.stream(request.metadata()));
        let reports = request.into_inner();
        let shared = self.shared.clone();
        tokio::spawn(stream::serve(shared, reports, answers, permit, trace));
        Ok(Response::new(ReceiverStream::new(queued)))
    }
}

#[cfg(test)]
mod tests;
