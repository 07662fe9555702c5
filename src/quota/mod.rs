//! Envoy's quota API (RLQS) without the wire: which share of a limit each Envoy stream holds.
//!
//! `assign` is the vocabulary shared with the gRPC service (`service::quota`): buckets, usage
//! reports, strategies and the answers pushed to a stream. [`QuotaBook`] keeps the shares:
//! max–min fair by demand ([`allocation`](self) water-fills), counted on one fill interval per
//! limit (`share`), changed only when they move materially, and delivered shrinks first so they
//! never sum above the limit. [`envoy_model`] is a model of Envoy 1.40's quota client, and
//! [`fleet`] runs many of them against a book on a manual clock (the bound's property test and
//! `sluice simulate --rlqs`). `replicas` is how replicas sharing a store split a limit: each claims
//! its portion of each bucket in the store's `PortionStore`.

pub mod assign;
pub mod envoy_model;
pub mod fleet;

mod allocation;
mod book;
mod bucket;
mod demand;
mod ledger;
mod limits;
mod portion;
mod replicas;
mod report;
mod shadow;
mod share;
mod upkeep;
mod view;

pub use crate::store::{Claim, ClaimError, ClaimFuture, ClaimTerms, Claimed, PortionStore};
pub use assign::{Assignment, BucketId, Push, Strategy, StreamId, Usage};
pub use book::QuotaBook;
pub use limits::{
    ASSIGNMENT_TTL_SECONDS, FORGET_AFTER, HEADROOM, HELD_FOR, MAX_BUCKETS_PER_STREAM,
    REPORT_INTERVAL, SILENT_AFTER, WARM_UP,
};
pub use portion::{Portion, WholeLimit};
pub use replicas::{Portions, claim_once, wanted};
pub use view::{BucketView, HolderView, QuotaError, Reported, Tally};

#[cfg(test)]
mod book_tests;
#[cfg(test)]
mod bound_tests;
#[cfg(test)]
mod fairness_tests;
