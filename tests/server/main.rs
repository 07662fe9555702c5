//! The server in process or as one real binary: gRPC, HTTP endpoints and metrics, hot reload,
//! response options (in process and through Envoy), connections, hostile input, tracing, the
//! operator page and TLS. One test binary so the library is linked once for all of them.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod calendar;
mod connections;
mod envoy_response;
mod grpc;
mod hostile_input;
mod observability;
mod reload;
mod response_options;
mod rlqs;
mod rlqs_envoy;
mod rlqs_faults;
mod tls;
mod token_budget;
mod tracing;
mod ui;
mod ui_bucket;
