//! Envoy quota buckets (RLQS) matched against the same rule tree as RLS descriptors: what a
//! bucket id reaches and what the quota server should do with it.

mod action;

pub use action::{QuotaAction, QuotaRate};
