//! Matching a request descriptor against a domain: `*` patterns, envoyproxy/ratelimit's per-level
//! lookup, and the stats keys envoyproxy/ratelimit derives from a match.

use std::borrow::{Borrow, Cow};
use std::hash::{Hash, Hasher};

use smallvec::SmallVec;

use crate::rules::{Domain, Level, LimitRule, Node};

/// A configured value containing `*`: each `*` matches zero or more characters, anywhere, any
/// number of times, the literal parts in order. Compiled once; matching allocates nothing.
///
/// Only the request's *value* is matched against the pattern, the key must be equal.
/// envoyproxy/ratelimit matches the composite string `key_value` instead, so its `wild` + `foo*`
/// also matches a request key `wild_foo`; that quirk is deliberately not reproduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    /// The literal parts between the `*`s (always at least two when `source` has a `*`).
    parts: Vec<String>,
}

impl Pattern {
    /// Compiles `pattern` (a value without `*` matches only itself).
    pub fn new(pattern: &str) -> Self {
        Self {
            source: pattern.to_string(),
            parts: pattern.split('*').map(str::to_string).collect(),
        }
    }

    /// The pattern as configured, `*`s included.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `value` matches. Leftmost placement of each middle part is enough: with only
    /// `*` wildcards, an earlier placement never rules out a match a later one would allow.
    pub fn matches(&self, value: &str) -> bool {
        let [first, middle @ .., last] = self.parts.as_slice() else {
            return value == self.source;
        };
        if value.len() < first.len() + last.len()
            || !value.starts_with(first.as_str())
            || !value.ends_with(last.as_str())
        {
            return false;
        }
        // Both ends are char boundaries: `value` starts with `first` and ends with `last`.
        let mut rest = &value[first.len()..value.len() - last.len()];
        for part in middle.iter().filter(|p| !p.is_empty()) {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// The result of a lookup: the node matched at each level, the last one at the request's depth.
///
/// A match does not imply a limit: `node().limits.is_empty()` means the request reached a node
/// without limits of its own (envoyproxy/ratelimit's whitelist, or an intermediate node), i.e. no
/// limit.
#[derive(Debug, Clone)]
pub struct Match<'a> {
    /// Inline up to four levels (deeper descriptors spill to the heap).
    nodes: SmallVec<[&'a Node; 4]>,
    last: &'a Node,
}

impl<'a> Match<'a> {
    /// The matched node at each level, root first.
    pub fn nodes(&self) -> &[&'a Node] {
        &self.nodes
    }

    /// The node at the request's depth: its limits (if any) are the ones that apply.
    pub fn node(&self) -> &'a Node {
        self.last
    }

    /// The limits that apply (empty: none).
    pub fn limits(&self) -> &'a [LimitRule] {
        &self.last.limits
    }

    /// envoyproxy/ratelimit's stats key for this match (§1.8), e.g. `domain.key1_value1.subkey1`.
    /// Per level: `key_<pattern>` for a `share_threshold` node; else the runtime `key_value` when
    /// the last node has `detailed_metric` or this node has `value_to_metric` (just `key` for an
    /// empty value); else `key_value` (configured value), `key` (key-only) or `key_<pattern>`.
    /// `entries` are the request entries the match was made from. Metric-name sanitising is the
    /// metrics layer's job.
    ///
    /// Without `detailed_metric` or `value_to_metric` on the path the key holds only
    /// configured values: the node's `full_key`, compiled once (nothing built per call).
    pub fn stats_key(&self, domain: &str, entries: &[(&str, &str)]) -> Cow<'a, str> {
        let detailed = self.last.detailed_metric;
        if !detailed && !self.nodes.iter().any(|n| n.value_to_metric) {
            return Cow::Borrowed(&self.last.full_key);
        }
        let mut key = String::with_capacity(domain.len() + entries.len() * 16);
        key.push_str(domain);
        for (node, (_, runtime)) in self.nodes.iter().zip(entries) {
            key.push('.');
            key.push_str(&node.key);
            let wildcard = node.value.as_deref().is_some_and(|v| v.contains('*'));
            let value = if node.share_threshold && wildcard {
                node.value.as_deref()
            } else if detailed || node.value_to_metric {
                Some(*runtime).filter(|v| !v.is_empty())
            } else {
                node.value.as_deref()
            };
            if let Some(value) = value {
                key.push('_');
                key.push_str(value);
            }
        }
        Cow::Owned(key)
    }
}

/// envoyproxy/ratelimit's stats key for a request-side limit override (config matching bypassed):
/// every runtime value included, `domain.k1_v1.k2_v2` (`.k` alone for an empty value).
pub(crate) fn override_stats_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let mut key = String::with_capacity(domain.len() + entries.len() * 16);
    key.push_str(domain);
    if entries.is_empty() {
        key.push('.');
    }
    for (k, v) in entries {
        key.push('.');
        key.push_str(k);
        if !v.is_empty() {
            key.push('_');
            key.push_str(v);
        }
    }
    key
}

impl Domain {
    /// Matches a request descriptor's entries, envoyproxy/ratelimit's §1.4: from the root, at each
    /// level the exact `(key, value)` node, else the first wildcard node of that key whose pattern
    /// matches (file order), else the key-only node; nothing at some level, a request deeper than
    /// the rules, or no entries → `None`. No backtracking to a less specific sibling. Returns the
    /// path whenever the walk reaches the last entry, even to a node without limits (see
    /// [`Match`]); a limit at a shallower depth never applies to a longer request.
    pub fn lookup<'a>(&'a self, entries: &[(&str, &str)]) -> Option<Match<'a>> {
        let mut level = &self.root;
        let mut nodes = SmallVec::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            let node = level.find(key, value)?;
            nodes.push(node);
            if i + 1 == entries.len() {
                return Some(Match { nodes, last: node });
            }
            level = &node.children;
        }
        None
    }
}

/// How an entry matched the node of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// The node's value equals the entry's.
    Exact,
    /// The node's `*` pattern matches the entry's value (the first such in file order).
    Wildcard,
    /// The node has no value: any value matches.
    KeyOnly,
}

impl Level {
    /// The node of this level an entry matches, by envoyproxy/ratelimit's precedence.
    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        self.find_with_kind(key, value).map(|(node, _)| node)
    }

    /// The node of this level an entry matches and how: the exact node, else the first
    /// wildcard of that key whose pattern matches (file order), else the key-only node.
    pub fn find_with_kind(&self, key: &str, value: &str) -> Option<(&Node, MatchKind)> {
        if let Some(node) = find_exact(self, key, value) {
            return Some((node, MatchKind::Exact));
        }
        if let Some((_, node)) = self
            .wildcards
            .iter()
            .find(|(pattern, node)| node.key == key && pattern.matches(value))
        {
            return Some((node, MatchKind::Wildcard));
        }
        self.key_only
            .get(key)
            .map(|node| (node, MatchKind::KeyOnly))
    }

    /// Whether the level has no nodes.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcards.is_empty() && self.key_only.is_empty()
    }
}

/// The exact node for `(key, value)`, looked up without allocating an owned `(String, String)`.
pub(super) fn find_exact<'l>(level: &'l Level, key: &str, value: &str) -> Option<&'l Node> {
    if level.exact.is_empty() {
        return None;
    }
    level.exact.get(&(key, value) as &dyn PairKey)
}

/// A `(key, value)` pair, owned or borrowed: lets the `(String, String)`-keyed map be queried
/// with `(&str, &str)`. Hash and equality must agree with the tuple's: both hash the two
/// strings in order.
trait PairKey {
    fn pair(&self) -> (&str, &str);
}

impl PairKey for (String, String) {
    fn pair(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl PairKey for (&str, &str) {
    fn pair(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn PairKey + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn PairKey + 'a) {
        self
    }
}

impl Hash for dyn PairKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (key, value) = self.pair();
        key.hash(state);
        value.hash(state);
    }
}

impl PartialEq for dyn PairKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.pair() == other.pair()
    }
}

impl Eq for dyn PairKey + '_ {}

#[cfg(test)]
mod tests;
