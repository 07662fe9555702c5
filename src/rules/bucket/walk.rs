//! The search of one bucket id kept whole for `sluice explain --bucket` and `/ui`: every
//! candidate tried in order, what became of it, the path found and the bucket action.
//!
//! It runs the very search [`Domain::lookup_bucket`](crate::rules::Domain::lookup_bucket) runs,
//! with a recorder instead of the no-op trace.

use std::collections::BTreeMap;

use crate::rules::explain::configured_keys;
use crate::rules::{MatchKind, Node, RuleSet};

use super::BucketAction;
use super::lookup::{BucketError, BucketMatch, Trace, TrialOutcome, check_bucket, search};

/// One candidate the search tried: an unused entry matched against a node.
#[derive(Debug, Clone)]
pub struct Trial<'r> {
    /// The level, 0 for the top level.
    pub depth: usize,
    /// The entry's key (the node's).
    pub key: String,
    /// The entry's value.
    pub value: String,
    /// The node tried.
    pub node: &'r Node,
    /// How the entry matched it.
    pub kind: MatchKind,
    /// What became of it.
    pub outcome: TrialOutcome,
}

/// Why a bucket found no path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketMiss {
    /// The domain is not loaded.
    UnknownDomain,
    /// The bucket id has no entries.
    Empty,
    /// Over a cap: the RLQS service refuses such a bucket.
    Rejected(BucketError),
    /// No path through the rules uses every entry.
    NoPath,
}

/// The whole search of one bucket id.
#[derive(Debug, Clone)]
pub struct BucketWalk<'r> {
    /// Every candidate tried, in the order tried.
    pub trials: Vec<Trial<'r>>,
    /// The path found, or why none was.
    pub found: Result<BucketMatch<'r>, BucketMiss>,
    /// When nothing matched at the top level: the keys configured there (sorted).
    pub top_keys: Vec<String>,
}

impl BucketWalk<'_> {
    /// What the RLQS server does with the bucket ([`BucketAction::NoRule`] without a path).
    pub fn action(&self) -> BucketAction {
        self.found
            .as_ref()
            .map_or(BucketAction::NoRule, BucketMatch::action)
    }

    /// Why the bucket gets its action, in one sentence.
    pub fn describe(&self) -> String {
        let found = match &self.found {
            Err(BucketMiss::UnknownDomain) => return "the domain is not loaded: no rule".into(),
            Err(BucketMiss::Empty) => return "the bucket id has no entries: no rule".into(),
            Err(BucketMiss::Rejected(e)) => {
                return format!("{e}: the RLQS service refuses such a bucket");
            }
            Err(BucketMiss::NoPath) if self.trials.is_empty() => {
                return format!(
                    "no entry matches a top-level node (keys there: {}): no rule",
                    self.top_keys.join(", ")
                );
            }
            Err(BucketMiss::NoPath) => {
                return "no path through the rules uses every entry once: no rule".into();
            }
            Ok(found) => found,
        };
        match found.action() {
            BucketAction::NoRule => "the path ends on a node without limits of its own (a \
                                    whitelist entry or an intermediate node): no rule"
                .into(),
            BucketAction::Unlimited { .. } => "the node reached is unlimited".into(),
            BucketAction::Deny { .. } => "the node reached has a zero limit".into(),
            BucketAction::Limited { .. } => {
                "the node reached has a limit: it is shared among the Envoys reporting the \
                 bucket"
                    .into()
            }
        }
    }
}

/// Records every trial.
struct Recorder<'r>(Vec<Trial<'r>>);

impl<'r> Trace<'r> for Recorder<'r> {
    fn tried(&mut self, depth: usize, value: &str, node: &'r Node, kind: MatchKind) -> usize {
        self.0.push(Trial {
            depth,
            key: node.key.clone(),
            value: value.to_owned(),
            node,
            kind,
            // Replaced as soon as the candidate's subtree is done.
            outcome: TrialOutcome::DeadEndsBelow,
        });
        self.0.len() - 1
    }

    fn outcome(&mut self, id: usize, outcome: TrialOutcome) {
        self.0[id].outcome = outcome;
    }
}

/// Searches `bucket` through `domain` of `rules`, recording every step.
pub fn walk_bucket<'r>(
    rules: &'r RuleSet,
    domain: &str,
    bucket: &BTreeMap<String, String>,
) -> BucketWalk<'r> {
    let miss = |found| BucketWalk {
        trials: Vec::new(),
        found: Err(found),
        top_keys: Vec::new(),
    };
    let Some(domain) = rules.domain(domain) else {
        return miss(BucketMiss::UnknownDomain);
    };
    if bucket.is_empty() {
        return miss(BucketMiss::Empty);
    }
    if let Err(e) = check_bucket(bucket) {
        return miss(BucketMiss::Rejected(e));
    }
    let mut recorder = Recorder(Vec::new());
    let found = search(domain, bucket, &mut recorder).ok_or(BucketMiss::NoPath);
    let top_keys = if recorder.0.is_empty() {
        configured_keys(&domain.root)
    } else {
        Vec::new()
    };
    BucketWalk {
        trials: recorder.0,
        found,
        top_keys,
    }
}
