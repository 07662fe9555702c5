//! RLQS buckets matched against the same rule tree as RLS descriptors: what a
//! bucket id reaches and what the RLQS server should do with it.
//!
//! `lookup` finds a bucket's path (the tree decides the entries' order, with backtracking);
//! `action` reads the bucket action off the node reached; `walk` keeps the whole search for
//! `sluice explain --bucket` and `/ui`; `parse` reads a bucket id written `k=v,k=v`.

mod action;
mod lookup;
mod parse;
mod walk;

use std::collections::BTreeMap;

use crate::rules::RuleSet;

pub use action::{BucketAction, SharedRate, tightest};
pub use lookup::{
    BucketError, BucketMatch, BucketStep, MAX_BUCKET_ENTRIES, MAX_BUCKET_TEXT, TrialOutcome,
    check_bucket,
};
pub use parse::parse_bucket;
pub use walk::{BucketMiss, BucketWalk, Trial, walk_bucket};

/// What the RLQS server does with `bucket` of `domain`: the action of the rule its path
/// reaches, [`BucketAction::NoRule`] for an unknown domain or a bucket that matches nothing
/// (including one refused by [`check_bucket`]: callers should refuse those first).
pub fn bucket_action(
    rules: &RuleSet,
    domain: &str,
    bucket: &BTreeMap<String, String>,
) -> BucketAction {
    rules
        .domain(domain)
        .and_then(|d| d.lookup_bucket(bucket))
        .map_or(BucketAction::NoRule, |found| found.action())
}

#[cfg(test)]
mod action_tests;
#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod tests;
