//! The generated RLS route (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
//! answering with the limiter's [`Decision`](crate::limiter::Decision), which
//! [`super::wire::DecisionCodec`] encodes; `build.rs` generates it with `tonic_build::manual`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(
    env!("OUT_DIR"),
    "/envoy.service.ratelimit.v3.RateLimitService.rs"
));
