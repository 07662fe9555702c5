//! Matching bucket ids: precedence per level, the tree deciding the order, backtracking, caps,
//! parsing, and a property over generated trees.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::rules::{Domain, LoadOptions, MatchKind, RuleSet, load_sources};

pub(super) fn rules(yaml: &str) -> RuleSet {
    load_sources(&[("r.yaml".into(), yaml.into())], &LoadOptions::default()).unwrap()
}

pub(super) fn bucket(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn domain(set: &RuleSet) -> &Domain {
    set.domain("q").unwrap()
}

/// The full key reached and how each level matched.
fn reached(set: &RuleSet, entries: &[(&str, &str)]) -> Option<(String, Vec<MatchKind>)> {
    let found = domain(set).lookup_bucket(&bucket(entries))?;
    let kinds = found.steps().iter().map(|s| s.kind).collect();
    Some((found.node().full_key.clone(), kinds))
}

const PRECEDENCE: &str = "domain: q
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: tenant
    value: a*
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: tenant
    value: a
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// One entry: exact beats wildcard beats key-only, as for a descriptor entry.
#[test]
fn exact_then_wildcard_then_key_only() {
    use MatchKind::*;
    let set = rules(PRECEDENCE);
    let at = |v| reached(&set, &[("tenant", v)]).unwrap();
    assert_eq!(at("a"), ("q.tenant_a".to_owned(), vec![Exact]));
    assert_eq!(at("ab"), ("q.tenant_a*".to_owned(), vec![Wildcard]));
    assert_eq!(at("b"), ("q.tenant".to_owned(), vec![KeyOnly]));
}

/// The tree decides the order: `tenant > path` is found from a map that sorts `path` first.
#[test]
fn the_tree_orders_the_entries() {
    let set = rules(
        "domain: q
descriptors:
  - key: tenant
    descriptors:
      - key: path
        value: /x
        rate_limit: { unit: second, requests_per_unit: 3 }
",
    );
    let found = domain(&set)
        .lookup_bucket(&bucket(&[("path", "/x"), ("tenant", "t1")]))
        .unwrap();
    let steps: Vec<_> = found
        .steps()
        .iter()
        .map(|s| (s.key, s.value.as_str(), s.kind))
        .collect();
    assert_eq!(
        steps,
        [
            ("tenant", "t1", MatchKind::KeyOnly),
            ("path", "/x", MatchKind::Exact)
        ]
    );
    assert_eq!(found.node().full_key, "q.tenant.path_/x");
}

const BACKTRACK: &str = "domain: q
descriptors:
  - key: tenant
    value: a
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tenant
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: env
    value: prod
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: zone
    descriptors:
      - key: env
        rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: name
    value: a*
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: name
    value: ab*
    descriptors:
      - key: x
        rate_limit: { unit: minute, requests_per_unit: 6 }
";

/// A match that leads nowhere does not hide one that works: a key-only sibling of the same
/// entry, another entry's node, or a later wildcard.
#[test]
fn dead_ends_are_backtracked_out_of() {
    use MatchKind::*;
    let set = rules(BACKTRACK);
    let key = |entries: &[(&str, &str)]| reached(&set, entries).map(|(k, _)| k);
    assert_eq!(
        reached(&set, &[("tenant", "a"), ("path", "/x")]),
        Some(("q.tenant.path".to_owned(), vec![KeyOnly, KeyOnly]))
    );
    assert_eq!(
        key(&[("tenant", "a"), ("user", "u")]).as_deref(),
        Some("q.tenant_a.user"),
        "the exact node wins when its path works"
    );
    assert_eq!(
        reached(&set, &[("env", "prod"), ("zone", "z")]),
        Some(("q.zone.env".to_owned(), vec![KeyOnly, KeyOnly])),
        "env=prod (exact, tried first) has no zone below"
    );
    assert_eq!(
        reached(&set, &[("name", "abc"), ("x", "1")]),
        Some(("q.name_ab*.x".to_owned(), vec![Wildcard, KeyOnly]))
    );
    assert_eq!(key(&[("name", "abc")]).as_deref(), Some("q.name_a*"));
}

/// Every entry must be used: one left over, or a level the rules do not have, is no match.
#[test]
fn entries_left_unused_match_nothing() {
    let set = rules(BACKTRACK);
    assert!(reached(&set, &[("tenant", "a"), ("colour", "red")]).is_none());
    assert!(reached(&set, &[("name", "a1"), ("x", "1")]).is_none());
    assert!(
        reached(&set, &[("tenant", "a"), ("user", "u"), ("path", "/x")]).is_none(),
        "each entry once: no path has three levels"
    );
    assert!(reached(&set, &[("colour", "red")]).is_none());
    assert!(reached(&set, &[]).is_none(), "an empty bucket");
    let set = rules(PRECEDENCE);
    assert_eq!(
        bucket_action(&set, "q", &bucket(&[("tenant", "a"), ("x", "y")])),
        BucketAction::NoRule
    );
    assert_eq!(
        bucket_action(&set, "nowhere", &bucket(&[("tenant", "a")])),
        BucketAction::NoRule
    );
}

/// A path ending on a node without limits is a match with no rule: a whitelisted value is not
/// limited by its key-only sibling, as for a descriptor.
#[test]
fn a_whitelist_entry_is_not_backtracked_out_of() {
    let set = rules(
        "domain: q
descriptors:
  - key: tenant
    value: internal
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
",
    );
    let found = domain(&set)
        .lookup_bucket(&bucket(&[("tenant", "internal")]))
        .unwrap();
    assert_eq!(found.node().full_key, "q.tenant_internal");
    assert_eq!(found.action(), BucketAction::NoRule);
}

/// Over a cap: no match, and a reason to refuse the bucket with.
#[test]
fn caps_bound_the_work() {
    let set = rules(PRECEDENCE);
    let many: BTreeMap<String, String> = (0..=MAX_BUCKET_ENTRIES)
        .map(|i| (format!("k{i:02}"), "v".to_owned()))
        .collect();
    assert_eq!(
        check_bucket(&many),
        Err(BucketError::TooManyEntries { count: 17 })
    );
    assert!(domain(&set).lookup_bucket(&many).is_none());
    let long = bucket(&[("a", "x"), ("tenant", &"a".repeat(MAX_BUCKET_TEXT + 1))]);
    let err = check_bucket(&long).unwrap_err();
    assert_eq!(
        err,
        BucketError::TextTooLong {
            entry: 2,
            len: 1025
        }
    );
    assert!(err.to_string().contains("at most 1024"), "{err}");
    assert!(domain(&set).lookup_bucket(&long).is_none());
    let at_cap = bucket(&[("tenant", &"a".repeat(MAX_BUCKET_TEXT))]);
    assert_eq!(check_bucket(&at_cap), Ok(()));
    assert!(domain(&set).lookup_bucket(&at_cap).is_some());
}

/// One node on a generated path: a key, and an exact value, a `*` pattern or none.
fn path_node() -> impl Strategy<Value = (usize, Option<&'static str>)> {
    (
        0usize..5,
        prop_oneof![
            Just(Some("v0")),
            Just(Some("v1")),
            Just(Some("v*")),
            Just(None)
        ],
    )
}

/// Paths of 1 to 4 nodes with distinct keys.
pub(super) fn paths() -> impl Strategy<Value = Vec<Vec<(usize, Option<&'static str>)>>> {
    let path = prop::collection::vec(path_node(), 1..=4).prop_map(|mut p| {
        let mut seen = std::collections::HashSet::new();
        p.retain(|(k, _)| seen.insert(*k));
        p
    });
    prop::collection::vec(path, 1..6)
}

/// A rule file holding every path, every node limited, shared prefixes merged.
pub(super) fn tree_yaml(paths: &[Vec<(usize, Option<&'static str>)>]) -> String {
    type Tree = BTreeMap<(usize, Option<&'static str>), Sub>;
    #[derive(Default)]
    struct Sub(Tree);
    fn write(tree: &Tree, indent: usize, out: &mut String) {
        for ((key, value), sub) in tree {
            let pad = " ".repeat(indent);
            out.push_str(&format!("{pad}- key: k{key}\n"));
            if let Some(v) = value {
                out.push_str(&format!("{pad}  value: \"{v}\"\n"));
            }
            out.push_str(&format!(
                "{pad}  rate_limit: {{ unit: minute, requests_per_unit: {} }}\n",
                indent + key
            ));
            if !sub.0.is_empty() {
                out.push_str(&format!("{pad}  descriptors:\n"));
                write(&sub.0, indent + 4, out);
            }
        }
    }
    let mut root = Tree::new();
    for path in paths {
        let mut at = &mut root;
        for node in path {
            at = &mut at.entry(*node).or_default().0;
        }
    }
    let mut out = "domain: q\ndescriptors:\n".to_owned();
    write(&root, 2, &mut out);
    out
}

proptest! {
    /// A bucket that follows a configured path (in any insertion order) always finds a path
    /// that uses each entry once, each step matching its entry; the result is the same for
    /// every insertion order.
    #[test]
    fn a_configured_path_is_always_found(
        paths in paths(),
        pick in any::<prop::sample::Index>(),
        order in any::<u64>(),
    ) {
        let set = rules(&tree_yaml(&paths));
        let path = pick.get(&paths);
        let entries: Vec<(String, String)> = path
            .iter()
            .map(|(k, v)| (format!("k{k}"), v.map_or("any".into(), |v| v.replace('*', "x"))))
            .collect();
        let mut shuffled = entries.clone();
        shuffled.rotate_left((order % entries.len() as u64) as usize);
        shuffled.reverse();
        let forward: BTreeMap<_, _> = entries.iter().cloned().collect();
        let backward: BTreeMap<_, _> = shuffled.into_iter().collect();
        let found = domain(&set).lookup_bucket(&forward);
        prop_assert!(found.is_some(), "{:?} in {:?}", path, paths);
        let found = found.unwrap();
        prop_assert_eq!(found.steps().len(), entries.len());
        let keys: std::collections::BTreeSet<_> = found.steps().iter().map(|s| s.key).collect();
        prop_assert_eq!(keys.len(), entries.len(), "each entry used once");
        for step in found.steps() {
            prop_assert_eq!(forward.get(step.key), Some(&step.value));
            prop_assert_eq!(step.node.key.as_str(), step.key);
            let value = step.node.value.as_deref();
            let matches = match step.kind {
                MatchKind::Exact => value == Some(step.value.as_str()),
                MatchKind::Wildcard => value.is_some_and(|p| crate::rules::Pattern::new(p).matches(&step.value)),
                MatchKind::KeyOnly => value.is_none(),
            };
            prop_assert!(matches, "{:?}", step);
        }
        let again = domain(&set).lookup_bucket(&backward).unwrap();
        prop_assert_eq!(&again.node().full_key, &found.node().full_key);
        prop_assert_eq!(again.action(), found.action());
    }
}

/// A bucket written `k=v,k=v`: any order, `=` allowed in a value, each key once, within caps.
#[test]
fn buckets_parse_from_text() {
    assert_eq!(
        parse_bucket("tenant=a, path=/x?q=1"),
        Ok(bucket(&[("path", "/x?q=1"), ("tenant", "a")]))
    );
    assert_eq!(parse_bucket("k="), Ok(bucket(&[("k", "")])));
    let err = |text: &str| parse_bucket(text).unwrap_err();
    assert!(err("a=1,a=2").contains("the key 'a' is given twice"));
    assert!(err("novalue").contains("is not key=value"));
    assert!(err(" =v").contains("empty key"));
    let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
    assert!(err(&many.join(",")).contains("at most 16"));
}
