//! Which limits a reload makes count afresh: a counter's key names the limit's window,
//! algorithm and, for a calendar limit, the local period it is in (`store::CounterKey`), so a
//! limit whose `unit`/`window`, `algorithm`, `calendar` or `timezone` changed counts under
//! new keys: every key starts with its whole allowance, and the old counters, still held until
//! their windows pass, come back if the change is reverted meanwhile. The reload says so.

use std::collections::BTreeMap;

use crate::rules::{Level, LimitKind, RuleSet};

/// Most limits one reload's line names (the rest are counted).
const MAX_NAMED: usize = 20;

impl RuleSet {
    /// The limits of `previous` that this rule set keeps on the same node and position but
    /// counts under other keys, as `node#index (old → new)`, and how many there are in all.
    pub fn counted_afresh(&self, previous: &RuleSet) -> (Vec<String>, usize) {
        let (old, new) = (identities(previous), identities(self));
        let changed: Vec<String> = new
            .iter()
            .filter_map(|(at, now)| {
                let before = old.get(at).filter(|before| *before != now)?;
                Some(format!("{}#{} ({before} → {now})", at.1, at.2))
            })
            .collect();
        let total = changed.len();
        (changed.into_iter().take(MAX_NAMED).collect(), total)
    }
}

/// What names each counted limit's counters, by (domain, node, position).
fn identities(rules: &RuleSet) -> BTreeMap<(String, String, u8), String> {
    let mut out = BTreeMap::new();
    for domain in rules.domains.values() {
        collect(&domain.name, &domain.root, &mut out);
    }
    out
}

fn collect(domain: &str, level: &Level, out: &mut BTreeMap<(String, String, u8), String>) {
    for node in super::view::nodes(level) {
        for rule in &node.limits {
            if let LimitKind::Counted(limit) = &rule.kind {
                let period = match &rule.calendar {
                    Some(calendar) => format!("calendar {calendar}"),
                    None => crate::rules::duration::format(limit.window),
                };
                let identity = format!("{} {period}", limit.algorithm.name());
                out.insert(
                    (domain.to_owned(), node.full_key.clone(), rule.index),
                    identity,
                );
            }
        }
        collect(domain, &node.children, out);
    }
}
