//! The search against a brute-force oracle: every complete path of every entry order, the
//! least by precedence. Checks both that backtracking misses no path and that the documented
//! precedence is the one applied.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::{paths, rules, tree_yaml};
use crate::rules::{Level, MatchKind, Node};

/// A step's rank at its level: kind (exact, wildcard, key-only), entry key, wildcard position.
type Rank = (u8, String, usize);

/// Every node of `level` the entry `(key, value)` matches, with its rank, by brute force.
fn matches<'a>(level: &'a Level, key: &str, value: &str) -> Vec<(Rank, &'a Node)> {
    let mut out = Vec::new();
    for ((k, v), node) in &level.exact {
        if k == key && v == value {
            out.push(((0, key.to_owned(), 0), node));
        }
    }
    for (i, (pattern, node)) in level.wildcards.iter().enumerate() {
        if node.key == key && pattern.matches(value) {
            out.push(((1, key.to_owned(), i), node));
        }
    }
    if let Some(node) = level.key_only.get(key) {
        out.push(((2, key.to_owned(), 0), node));
    }
    out
}

/// Every complete path from `level` using exactly the entries `left`, any order, any node.
fn complete<'a>(level: &'a Level, left: &[(String, String)]) -> Vec<(Vec<Rank>, &'a Node)> {
    let mut out = Vec::new();
    for (i, (key, value)) in left.iter().enumerate() {
        let mut rest = left.to_vec();
        rest.remove(i);
        for (rank, node) in matches(level, key, value) {
            if rest.is_empty() {
                out.push((vec![rank], node));
                continue;
            }
            for (mut ranks, last) in complete(&node.children, &rest) {
                ranks.insert(0, rank.clone());
                out.push((ranks, last));
            }
        }
    }
    out
}

fn kind_rank(kind: MatchKind) -> u8 {
    match kind {
        MatchKind::Exact => 0,
        MatchKind::Wildcard => 1,
        MatchKind::KeyOnly => 2,
    }
}

/// Values a generated bucket may hold: the trees' exact values, one their `v*` matches, other.
fn value() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("v0"), Just("v1"), Just("vx"), Just("w")]
}

/// A bucket near a configured path: its keys, each value the path's (or one matching its
/// pattern) or a random one, and maybe one more entry.
fn near_path(
    path: &[(usize, Option<&'static str>)],
    values: &[(bool, &'static str)],
    extra: Option<(usize, &'static str)>,
) -> BTreeMap<String, String> {
    let mut bucket: BTreeMap<String, String> = path
        .iter()
        .zip(values)
        .map(|((key, configured), (keep, random))| {
            let value = match configured {
                Some(v) if *keep => v.replace('*', "x"),
                _ => (*random).to_owned(),
            };
            (format!("k{key}"), value)
        })
        .collect();
    if let Some((key, value)) = extra {
        bucket.insert(format!("k{key}"), value.to_owned());
    }
    bucket
}

proptest! {
    /// For any tree and any bucket near one of its paths, `lookup_bucket` finds a path exactly
    /// when one exists, and it is the least complete path by precedence, level by level.
    #[test]
    fn the_search_finds_the_least_complete_path(
        paths in paths(),
        pick in any::<prop::sample::Index>(),
        values in prop::collection::vec((any::<bool>(), value()), 4),
        extra in prop::option::weighted(0.2, (0usize..6, value())),
    ) {
        let set = rules(&tree_yaml(&paths));
        let domain = set.domain("q").unwrap();
        let path: &Vec<_> = pick.get(&paths);
        let bucket = near_path(path, &values, extra);
        let entries: Vec<(String, String)> = bucket.clone().into_iter().collect();
        let best = complete(&domain.root, &entries).into_iter().min_by(|a, b| a.0.cmp(&b.0));
        let found = domain.lookup_bucket(&bucket);
        prop_assert_eq!(found.is_some(), best.is_some(), "{:?} in {:?}", bucket, paths);
        if let (Some(found), Some((ranks, last))) = (found, best) {
            prop_assert!(
                std::ptr::eq(found.node(), last),
                "{} vs {}", found.node().full_key, last.full_key
            );
            let kinds: Vec<u8> = found.steps().iter().map(|s| kind_rank(s.kind)).collect();
            let expected: Vec<u8> = ranks.iter().map(|r| r.0).collect();
            prop_assert_eq!(kinds, expected);
        }
    }
}
