//! envoyproxy/ratelimit's own test expectations (reference/envoy-ratelimit.md §6) replayed
//! black-box against the sluice binary started as `ratelimit` with envoyproxy/ratelimit's
//! variables: rules in envoyproxy/ratelimit's layout, calls over gRPC and `/json`, a real Redis
//! (and Envoy for §6.7). Every case either matches envoyproxy/ratelimit's expectation or differs as
//! the README's "Differences from envoyproxy/ratelimit" says; each test prints its counts and fails
//! on any other difference.

mod end_to_end;
mod fixtures;
mod harness;
mod integration;
mod matching;
mod redis_cache;
mod service;
