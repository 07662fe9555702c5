//! The walk of one descriptor through a domain's rule tree, level by level, kept whole for
//! `sluice explain` and `/ui`: which node each entry reached and how, where the walk stopped
//! and why, and where envoyproxy/ratelimit would walk or count differently.
//!
//! It follows [`Domain::lookup`] exactly (same precedence, no backtracking, depth must match);
//! the limiter adds `replaces` across the call and the counters' state.

use crate::algorithm::Algorithm;
use crate::rules::{Domain, Level, LimitKind, MatchKind, Node, RuleSet};

/// One entry of the descriptor and what it reached.
#[derive(Debug, Clone)]
pub struct Step<'r> {
    /// The entry's key.
    pub key: String,
    /// The entry's value.
    pub value: String,
    /// The node reached and how, or `None` when nothing at this level matches.
    pub node: Option<(&'r Node, MatchKind)>,
    /// When nothing matched: the values configured for this key at this level (exact values
    /// and `*` patterns); empty when the key itself is not configured here.
    pub configured_values: Vec<String>,
    /// When nothing matched: the keys configured at this level.
    pub configured_keys: Vec<String>,
}

/// Where the walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// The domain is not loaded: no limit.
    UnknownDomain,
    /// The descriptor has no entries: no limit.
    NoEntries,
    /// Nothing at level `level` (0-based) matches the entry: no limit.
    NoMatch {
        /// The level.
        level: usize,
    },
    /// The node at `level` has no children but the descriptor goes on: no limit (a limit
    /// higher up never applies to a longer descriptor).
    DeeperThanRules {
        /// The last level the rules have.
        level: usize,
    },
    /// The node at the descriptor's depth has no limit of its own (a whitelist entry, or an
    /// intermediate node): no limit.
    NoLimit,
    /// The node at the descriptor's depth is `unlimited: true`.
    Unlimited,
    /// The node at the descriptor's depth has limits: they apply (unless replaced).
    Limited,
}

impl Reached {
    /// Why, in one sentence.
    pub fn describe(&self, steps: &[Step<'_>]) -> String {
        match *self {
            Reached::UnknownDomain => "the domain is not loaded: no limit".to_owned(),
            Reached::NoEntries => "the descriptor has no entries: no limit".to_owned(),
            Reached::NoMatch { level } => {
                let step = &steps[level];
                if step.configured_values.is_empty() {
                    format!(
                        "level {}: no rule has the key '{}' here: no limit",
                        level + 1,
                        step.key
                    )
                } else {
                    format!(
                        "level {}: no rule of key '{}' matches the value '{}': no limit",
                        level + 1,
                        step.key,
                        step.value
                    )
                }
            }
            Reached::DeeperThanRules { level } => format!(
                "the descriptor is deeper than the rules (they end at level {}): no limit; \
                 a limit higher up never applies to a longer descriptor",
                level + 1
            ),
            Reached::NoLimit => {
                "the node reached has no limit of its own (a whitelist entry or an \
                 intermediate node): no limit"
                    .to_owned()
            }
            Reached::Unlimited => {
                "the node reached is unlimited: always OK, never counted".to_owned()
            }
            Reached::Limited => "the node reached has a limit: it applies".to_owned(),
        }
    }
}

/// The whole walk of one descriptor.
#[derive(Debug, Clone)]
pub struct Walk<'r> {
    /// One step per entry walked (fewer than the entries when the walk stopped early).
    pub steps: Vec<Step<'r>>,
    /// Where it ended.
    pub reached: Reached,
    /// Where envoyproxy/ratelimit would match or count differently, one sentence each.
    pub compat_differences: Vec<String>,
}

impl<'r> Walk<'r> {
    /// The node whose limits apply, when the walk ended on a limited or unlimited node.
    pub fn node(&self) -> Option<&'r Node> {
        match self.reached {
            Reached::Limited | Reached::Unlimited => {
                self.steps.last().and_then(|s| s.node).map(|(n, _)| n)
            }
            _ => None,
        }
    }
}

/// Walks `entries` through `domain` of `rules`.
pub fn walk<'r>(rules: &'r RuleSet, domain: &str, entries: &[(&str, &str)]) -> Walk<'r> {
    let Some(domain) = rules.domain(domain) else {
        return finish(Vec::new(), Reached::UnknownDomain, None);
    };
    if entries.is_empty() {
        return finish(Vec::new(), Reached::NoEntries, Some(domain));
    }
    let mut steps = Vec::with_capacity(entries.len());
    let mut level = &domain.root;
    for (i, (key, value)) in entries.iter().enumerate() {
        let found = level.find_with_kind(key, value);
        let (configured_values, configured_keys) = match found {
            Some(_) => (Vec::new(), Vec::new()),
            None => (configured_values(level, key), configured_keys(level)),
        };
        steps.push(Step {
            key: (*key).to_owned(),
            value: (*value).to_owned(),
            node: found,
            configured_values,
            configured_keys,
        });
        let Some((node, _)) = found else {
            return finish(steps, Reached::NoMatch { level: i }, Some(domain));
        };
        if i + 1 == entries.len() {
            let reached = match node.limits.as_slice() {
                [] => Reached::NoLimit,
                limits if limits.iter().any(|l| l.kind == LimitKind::Unlimited) => {
                    Reached::Unlimited
                }
                _ => Reached::Limited,
            };
            return finish(steps, reached, Some(domain));
        }
        if node.children.is_empty() {
            return finish(steps, Reached::DeeperThanRules { level: i }, Some(domain));
        }
        level = &node.children;
    }
    unreachable!("the loop returns at the last entry")
}

fn finish<'r>(steps: Vec<Step<'r>>, reached: Reached, domain: Option<&'r Domain>) -> Walk<'r> {
    let mut walk = Walk {
        steps,
        reached,
        compat_differences: Vec::new(),
    };
    if let Some(domain) = domain {
        walk.compat_differences = compat_differences(domain, &walk);
    }
    walk
}

fn configured_values(level: &Level, key: &str) -> Vec<String> {
    let mut values: Vec<String> = level
        .exact
        .keys()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect();
    values.sort();
    values.extend(
        level
            .wildcards
            .iter()
            .filter(|(_, n)| n.key == key)
            .map(|(p, _)| p.as_str().to_owned()),
    );
    values
}

/// Every key the nodes of `level` name, sorted, once each.
pub(super) fn configured_keys(level: &Level) -> Vec<String> {
    let mut keys: Vec<String> = level
        .exact
        .keys()
        .map(|(k, _)| k.clone())
        .chain(level.wildcards.iter().map(|(_, n)| n.key.clone()))
        .chain(level.key_only.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Where envoyproxy/ratelimit would answer differently for this walk.
fn compat_differences(domain: &Domain, walk: &Walk<'_>) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(note) = composite_match_difference(domain, walk) {
        notes.push(note);
    }
    let Some(node) = walk.node() else {
        return notes;
    };
    if node.limits.len() > 1 {
        notes.push(
            "several limits on one node (`rate_limits`) are sluice's: upstream refuses the file"
                .to_owned(),
        );
    }
    for limit in &node.limits {
        let LimitKind::Counted(counted) = limit.kind else {
            continue;
        };
        if let Some(calendar) = &limit.calendar {
            notes.push(format!(
                "`calendar` is sluice's ({calendar}, from local midnight): upstream refuses the \
                 file"
            ));
            continue;
        }
        match limit.unit {
            None => notes.push(format!(
                "window {} is no upstream unit: upstream refuses the rule",
                super::duration::format(counted.window)
            )),
            Some(unit) if counted.algorithm != Algorithm::FixedWindow => notes.push(format!(
                "upstream counts a fixed window aligned to the {} (up to twice the limit across \
                 a window edge); sluice counts with {}",
                unit.name(),
                counted.algorithm
            )),
            Some(_) => {}
        }
    }
    if node.shards > 1 || node.failure_mode != super::FailureMode::Allow {
        notes
            .push("`shards` and `failure_mode` are sluice's: upstream refuses the file".to_owned());
    }
    notes
}

/// envoyproxy/ratelimit matches a wildcard against the composite `key_value` string, so a node
/// `wild` + `foo*` also takes the entry `wild_foo` = anything. Where that would pick another node
/// than sluice's walk, says so.
fn composite_match_difference(domain: &Domain, walk: &Walk<'_>) -> Option<String> {
    let mut level = &domain.root;
    for (i, step) in walk.steps.iter().enumerate() {
        let composite = format!("{}_{}", step.key, step.value);
        let compat_wildcard = level
            .wildcards
            .iter()
            .find(|(pattern, node)| {
                super::Pattern::new(&format!("{}_{}", node.key, pattern.as_str()))
                    .matches(&composite)
            })
            .map(|(_, node)| node);
        let exact = step.node.filter(|(_, how)| *how == MatchKind::Exact);
        let ours = step.node.map(|(n, _)| n);
        if exact.is_none()
            && let Some(theirs) = compat_wildcard
            && ours.is_none_or(|ours| !std::ptr::eq(ours, theirs))
        {
            return Some(format!(
                "level {}: upstream matches `key_value` as one string, so its wildcard node {} \
                 would take the entry {}={}; sluice matches the key exactly",
                i + 1,
                theirs.full_key,
                step.key,
                step.value
            ));
        }
        let (node, _) = step.node?;
        level = &node.children;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{LoadOptions, load_sources};

    fn rules(yaml: &str) -> RuleSet {
        load_sources(&[("r.yaml".into(), yaml.into())], &LoadOptions::default()).unwrap()
    }

    const TREE: &str = "domain: edge
descriptors:
  - key: client
    value: gold
    rate_limit: { unit: minute, requests_per_unit: 120, algorithm: fixed_window }
  - key: client
    value: beta-*
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: probe
    value: health
  - key: route
    descriptors:
      - key: verb
        value: GET
        rate_limit: { unit: second, requests_per_unit: 7 }
  - key: wild
    value: foo*
    rate_limit: { unit: hour, requests_per_unit: 1 }
";

    fn reached(set: &RuleSet, entries: &[(&str, &str)]) -> (Reached, Vec<Option<MatchKind>>) {
        let walk = walk(set, "edge", entries);
        let kinds = walk.steps.iter().map(|s| s.node.map(|(_, k)| k)).collect();
        (walk.reached, kinds)
    }

    /// Exact beats wildcard beats key-only, level by level, as the limiter matches.
    #[test]
    fn precedence_per_level() {
        let set = rules(TREE);
        use MatchKind::*;
        assert_eq!(
            reached(&set, &[("client", "gold")]),
            (Reached::Limited, vec![Some(Exact)])
        );
        assert_eq!(
            reached(&set, &[("client", "beta-7")]),
            (Reached::Limited, vec![Some(Wildcard)])
        );
        assert_eq!(
            reached(&set, &[("client", "other")]),
            (Reached::Limited, vec![Some(KeyOnly)])
        );
        let walk = walk(&set, "edge", &[("client", "beta-7")]);
        assert_eq!(walk.node().unwrap().full_key, "edge.client_beta-*");
    }

    /// Every reason a descriptor gets no limit is told apart.
    #[test]
    fn why_no_limit() {
        let set = rules(TREE);
        assert_eq!(
            walk(&set, "nope", &[("a", "b")]).reached,
            Reached::UnknownDomain
        );
        assert_eq!(walk(&set, "edge", &[]).reached, Reached::NoEntries);
        assert_eq!(reached(&set, &[("probe", "health")]).0, Reached::NoLimit);
        assert_eq!(
            reached(&set, &[("route", "/x")]).0,
            Reached::NoLimit,
            "intermediate node"
        );
        assert_eq!(
            reached(&set, &[("client", "gold"), ("user", "u")]).0,
            Reached::DeeperThanRules { level: 0 }
        );
        let unknown_key = walk(&set, "edge", &[("colour", "red")]);
        assert_eq!(unknown_key.reached, Reached::NoMatch { level: 0 });
        assert!(unknown_key.steps[0].configured_values.is_empty());
        assert!(
            unknown_key.steps[0]
                .configured_keys
                .contains(&"client".to_owned())
        );
        assert!(
            unknown_key
                .reached
                .describe(&unknown_key.steps)
                .contains("no rule has the key")
        );
        let no_value = walk(&set, "edge", &[("route", "/x"), ("verb", "PUT")]);
        assert_eq!(no_value.reached, Reached::NoMatch { level: 1 });
        assert_eq!(no_value.steps[1].configured_values, ["GET"]);
        assert!(
            no_value
                .reached
                .describe(&no_value.steps)
                .contains("matches the value 'PUT'")
        );
    }

    /// envoyproxy/ratelimit's differences: its fixed window, and its composite `key_value` wildcard
    /// match.
    #[test]
    fn compat_differences_are_named() {
        let set = rules(TREE);
        let sliding = walk(&set, "edge", &[("client", "other")]);
        assert!(
            sliding
                .compat_differences
                .iter()
                .any(|n| n.contains("fixed window")),
            "{:?}",
            sliding.compat_differences
        );
        let fixed = walk(&set, "edge", &[("client", "gold")]);
        assert!(
            fixed.compat_differences.is_empty(),
            "{:?}",
            fixed.compat_differences
        );
        let quirk = walk(&set, "edge", &[("wild_foo", "x")]);
        assert_eq!(quirk.reached, Reached::NoMatch { level: 0 });
        assert!(
            quirk
                .compat_differences
                .iter()
                .any(|n| n.contains("edge.wild_foo*")),
            "{:?}",
            quirk.compat_differences
        );
    }
}
