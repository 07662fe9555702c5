//! Finding the rule a bucket id reaches: its unordered entries walked through a domain's tree in
//! the order the tree decides, each entry used once, backtracking out of dead ends.
//!
//! A bucket id is a map, so unlike a descriptor it says nothing about which entry comes first;
//! the tree does. At each level every unused entry is tried as a descriptor entry would be, and
//! the first path (in precedence order) that uses every entry is the bucket's. The work is
//! bounded by the tree: a bucket has one entry per key and every node names one key, so each
//! node is visited at most once per lookup — the search never enumerates entry orders.

use std::collections::BTreeMap;
use std::fmt;

use smallvec::SmallVec;

use crate::rules::matcher::find_exact;
use crate::rules::{Domain, Level, MatchKind, Node};

use super::BucketAction;

/// Most entries a bucket id may have; a larger one matches nothing (see [`check_bucket`]).
pub const MAX_BUCKET_ENTRIES: usize = 16;
/// Most bytes in one key or value of a bucket id (as for a descriptor's entries).
pub const MAX_BUCKET_TEXT: usize = 1024;

/// Why a bucket id is refused before any matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketError {
    /// More than [`MAX_BUCKET_ENTRIES`] entries.
    TooManyEntries {
        /// The entries the bucket has.
        count: usize,
    },
    /// A key or value longer than [`MAX_BUCKET_TEXT`] bytes.
    TextTooLong {
        /// The entry's position in key order, from 1.
        entry: usize,
        /// Its longer part's length in bytes.
        len: usize,
    },
}

impl fmt::Display for BucketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BucketError::TooManyEntries { count } => write!(
                f,
                "the bucket id has {count} entries (at most {MAX_BUCKET_ENTRIES})"
            ),
            BucketError::TextTooLong { entry, len } => write!(
                f,
                "entry {entry} of the bucket id has a key or value of {len} bytes \
                 (at most {MAX_BUCKET_TEXT})"
            ),
        }
    }
}

impl std::error::Error for BucketError {}

/// Whether a bucket id is within the caps that bound matching. [`Domain::lookup_bucket`]
/// answers `None` for a bucket refused here; the RLQS service should refuse it with this
/// reason rather than treat it as unmatched.
pub fn check_bucket(bucket: &BTreeMap<String, String>) -> Result<(), BucketError> {
    if bucket.len() > MAX_BUCKET_ENTRIES {
        return Err(BucketError::TooManyEntries {
            count: bucket.len(),
        });
    }
    for (i, (key, value)) in bucket.iter().enumerate() {
        let len = key.len().max(value.len());
        if len > MAX_BUCKET_TEXT {
            return Err(BucketError::TextTooLong { entry: i + 1, len });
        }
    }
    Ok(())
}

/// One level of a bucket's path: the node reached and the entry that reached it.
#[derive(Debug, Clone)]
pub struct BucketStep<'a> {
    /// The node at this level.
    pub node: &'a Node,
    /// The entry's key (the node's key).
    pub key: &'a str,
    /// The entry's value.
    pub value: String,
    /// How the entry matched the node.
    pub kind: MatchKind,
}

/// The path a bucket id found through a domain: one step per entry, root first.
///
/// As for a descriptor, a match does not imply a limit: a path ending on a node without limits
/// (a whitelist entry, an intermediate node) is a match whose [`BucketMatch::action`] is
/// [`BucketAction::NoRule`].
#[derive(Debug, Clone)]
pub struct BucketMatch<'a> {
    steps: Vec<BucketStep<'a>>,
}

impl<'a> BucketMatch<'a> {
    /// The node and entry at each level, root first (never empty).
    pub fn steps(&self) -> &[BucketStep<'a>] {
        &self.steps
    }

    /// The last node: the rule the bucket reached.
    pub fn node(&self) -> &'a Node {
        self.steps.last().expect("a match has a step").node
    }

    /// What the RLQS server does with the bucket (see [`BucketAction::for_node`]).
    pub fn action(&self) -> BucketAction {
        BucketAction::for_node(self.node())
    }
}

impl Domain {
    /// The path a bucket id takes through this domain, or `None` when no path uses every entry
    /// (also for an empty bucket and one refused by [`check_bucket`]).
    ///
    /// At each level the candidates are the unused entries matched against that level's nodes
    /// as a descriptor entry would be, tried in this order: exact `key`+`value` matches, then
    /// wildcard matches, then key-only matches; within a kind by entry key (byte order), and
    /// several wildcards of one key in file order. A candidate whose subtree cannot use the
    /// remaining entries is backtracked out of; the first path that uses every entry wins,
    /// whether or not its last node has limits (so a whitelist entry still beats a key-only
    /// sibling, as it does for a descriptor).
    pub fn lookup_bucket<'a>(
        &'a self,
        bucket: &BTreeMap<String, String>,
    ) -> Option<BucketMatch<'a>> {
        search(self, bucket, &mut ())
    }
}

/// Records what a search tries, for `sluice explain` and `/ui`; `()` records nothing.
pub(super) trait Trace<'a> {
    /// `node` was tried for `(key, value)` at `depth` (0 = the top level); returns an id for
    /// [`Trace::outcome`].
    fn tried(&mut self, depth: usize, value: &str, node: &'a Node, kind: MatchKind) -> usize;
    /// What became of trial `id`.
    fn outcome(&mut self, id: usize, outcome: TrialOutcome);
}

impl<'a> Trace<'a> for () {
    fn tried(&mut self, _: usize, _: &str, _: &'a Node, _: MatchKind) -> usize {
        0
    }

    fn outcome(&mut self, _: usize, _: TrialOutcome) {}
}

/// Runs the search, telling `trace` every candidate tried.
pub(super) fn search<'a>(
    domain: &'a Domain,
    bucket: &BTreeMap<String, String>,
    trace: &mut dyn Trace<'a>,
) -> Option<BucketMatch<'a>> {
    if bucket.is_empty() || check_bucket(bucket).is_err() {
        return None;
    }
    let entries: SmallVec<[(&str, &str); MAX_BUCKET_ENTRIES]> = bucket
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut search = Search {
        entries: &entries,
        all: (1u32 << entries.len()) - 1,
        path: SmallVec::new(),
        trace,
    };
    match search.descend(&domain.root, 0) {
        Below::Found => Some(BucketMatch {
            steps: search
                .path
                .iter()
                .map(|c| BucketStep {
                    node: c.node,
                    key: &c.node.key,
                    value: entries[c.entry].1.to_owned(),
                    kind: c.kind,
                })
                .collect(),
        }),
        Below::NothingMatched | Below::DeadEnds => None,
    }
}

/// One entry matched against one node of a level.
#[derive(Debug, Clone, Copy)]
struct Candidate<'a> {
    /// The entry's index in key order.
    entry: usize,
    node: &'a Node,
    kind: MatchKind,
}

/// What the search found below a level.
enum Below {
    /// A path using every entry (now in `Search::path`).
    Found,
    /// No unused entry matches any node of the level.
    NothingMatched,
    /// Some did, but every path from them dead-ended.
    DeadEnds,
}

struct Search<'s, 'a> {
    entries: &'s [(&'s str, &'s str)],
    /// The mask with every entry's bit set.
    all: u32,
    path: SmallVec<[Candidate<'a>; 4]>,
    trace: &'s mut dyn Trace<'a>,
}

impl<'a> Search<'_, 'a> {
    /// Tries each candidate of `level` in precedence order, given the entries already `used`.
    fn descend(&mut self, level: &'a Level, used: u32) -> Below {
        let candidates = candidates(level, self.entries, used);
        if candidates.is_empty() {
            return Below::NothingMatched;
        }
        let depth = self.path.len();
        for candidate in candidates {
            let used = used | 1 << candidate.entry;
            let value = self.entries[candidate.entry].1;
            let id = self
                .trace
                .tried(depth, value, candidate.node, candidate.kind);
            self.path.push(candidate);
            let outcome = if used == self.all {
                TrialOutcome::Complete
            } else if candidate.node.children.is_empty() {
                TrialOutcome::NoChildren
            } else {
                match self.descend(&candidate.node.children, used) {
                    Below::Found => TrialOutcome::Continued,
                    Below::NothingMatched => TrialOutcome::NothingBelow,
                    Below::DeadEnds => TrialOutcome::DeadEndsBelow,
                }
            };
            self.trace.outcome(id, outcome);
            if matches!(outcome, TrialOutcome::Complete | TrialOutcome::Continued) {
                return Below::Found;
            }
            self.path.pop();
        }
        Below::DeadEnds
    }
}

/// The unused entries' matches at `level`, in precedence order: exact matches by entry key,
/// then wildcard matches by entry key (file order within a key), then key-only matches by key.
fn candidates<'a>(level: &'a Level, entries: &[(&str, &str)], used: u32) -> Vec<Candidate<'a>> {
    let unused = || {
        entries
            .iter()
            .enumerate()
            .filter(move |(i, _)| used & 1 << i == 0)
    };
    let mut out = Vec::new();
    for (entry, (key, value)) in unused() {
        if let Some(node) = find_exact(level, key, value) {
            out.push(Candidate {
                entry,
                node,
                kind: MatchKind::Exact,
            });
        }
    }
    for (entry, (key, value)) in unused() {
        let matching = level
            .wildcards
            .iter()
            .filter(|(pattern, node)| node.key == *key && pattern.matches(value));
        out.extend(matching.map(|(_, node)| Candidate {
            entry,
            node,
            kind: MatchKind::Wildcard,
        }));
    }
    for (entry, (key, _)) in unused() {
        if let Some(node) = level.key_only.get(*key) {
            out.push(Candidate {
                entry,
                node,
                kind: MatchKind::KeyOnly,
            });
        }
    }
    out
}

/// What became of one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialOutcome {
    /// It used the last entry: the path ends here.
    Complete,
    /// Entries were left and the path found goes on below it.
    Continued,
    /// Entries were left but the node has no children: backtracked.
    NoChildren,
    /// Entries were left but none matches a node of its children: backtracked.
    NothingBelow,
    /// Entries matched below, but every path from there dead-ended: backtracked.
    DeadEndsBelow,
}

impl TrialOutcome {
    /// What it means, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            TrialOutcome::Complete => "every entry used: the path ends here",
            TrialOutcome::Continued => "entries left: the path goes on below",
            TrialOutcome::NoChildren => {
                "dead end: entries left but no rules below this node; backtracking"
            }
            TrialOutcome::NothingBelow => {
                "dead end: no entry left matches a node below; backtracking"
            }
            TrialOutcome::DeadEndsBelow => "dead end: every path below dead-ended; backtracking",
        }
    }
}
