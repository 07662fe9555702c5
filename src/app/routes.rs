//! The gRPC routes of every connection: `ShouldRateLimit` goes straight to its generated service;
//! every other path (health, unknown services) through tonic's router.
//!
//! Why not the router for everything: it is axum, which matches the path against every route and
//! stores the URL parameters in the request on each call, ~3,000 instructions of a call that is
//! otherwise ~5,000 instructions of work. One string comparison picks the hot route instead.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures_util::future::Either;
use hyper::body::Incoming;
use tonic::body::Body;
use tonic::service::Routes;
use tower_service::Service;

use crate::service::{RateLimitServiceServer, RlsService};

/// The path of the RLS call, as Envoy sends it.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The RLS call's own service, and tonic's router for everything else.
#[derive(Clone)]
pub(super) struct GrpcRoutes {
    rls: RateLimitServiceServer<RlsService>,
    others: Routes,
}

impl GrpcRoutes {
    /// `rls` for `ShouldRateLimit`, `others` for every other path (it need not hold `rls`).
    pub(super) fn new(rls: RateLimitServiceServer<RlsService>, others: Routes) -> Self {
        Self { rls, others }
    }
}

impl Service<http::Request<Incoming>> for GrpcRoutes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<
        <RateLimitServiceServer<RlsService> as Service<http::Request<Incoming>>>::Future,
        <Routes as Service<http::Request<Incoming>>>::Future,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both are always ready: the generated service and the router hold no capacity.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        if request.uri().path() == SHOULD_RATE_LIMIT {
            Either::Left(self.rls.call(request))
        } else {
            Either::Right(self.others.call(request))
        }
    }
}
