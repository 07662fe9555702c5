//! Envoy's quota API (RLQS) without the wire: which share of a limit each Envoy stream holds.
//!
//! `assign` is the vocabulary shared with the gRPC service (`service::quota`): buckets, usage
//! reports, strategies and the answers pushed to a stream.

pub mod assign;
pub mod exchange;

pub use assign::{Answer, BucketId, Push, Strategy, StreamId, Usage};
pub use exchange::{Claim, ExchangeFuture, Granted, QuotaExchange};
