//! The JSON the page reads: the rule trees, the live figures, an explanation, a bucket walk. Shapes are the
//! page's own (`app.js` reads them); nothing here is an API promise.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::clock::MILLI;
use crate::insight::{DecisionRates, HITTER_WINDOW_SECONDS, HITTER_WINDOWS, LimitedKey};
use crate::limiter::{Explained, Explanation, LimitState};
use crate::rules::bucket::{BucketAction, BucketWalk, TrialOutcome};
use crate::rules::{Level, LimitKind, LimitRule, MatchKind, Node, RuleSet};

/// Every domain, sorted, with its tree; `version` is the source's (xDS), `null` for files.
pub(super) fn rules(set: &RuleSet) -> Value {
    let mut domains: Vec<_> = set.domains.values().collect();
    domains.sort_by(|a, b| a.name.cmp(&b.name));
    json!({
        "summary": set.summary(),
        "version": set.version,
        "domains": domains
            .iter()
            .map(|d| json!({ "name": d.name, "nodes": level(&d.root) }))
            .collect::<Vec<_>>(),
    })
}

/// A level's nodes in matching order: exact values (sorted), wildcards (file order), key-only.
fn level(level: &Level) -> Vec<Value> {
    let mut exact: Vec<&Node> = level.exact.values().collect();
    exact.sort_by(|a, b| (&a.key, &a.value).cmp(&(&b.key, &b.value)));
    let mut key_only: Vec<&Node> = level.key_only.values().collect();
    key_only.sort_by(|a, b| a.key.cmp(&b.key));
    exact
        .into_iter()
        .map(|n| node(n, MatchKind::Exact))
        .chain(
            level
                .wildcards
                .iter()
                .map(|(_, n)| node(n, MatchKind::Wildcard)),
        )
        .chain(key_only.into_iter().map(|n| node(n, MatchKind::KeyOnly)))
        .collect()
}

fn node(node: &Node, kind: MatchKind) -> Value {
    json!({
        "key": node.key,
        "value": node.value,
        "match": match_name(kind),
        "full_key": node.full_key,
        "limits": node.limits.iter().map(limit).collect::<Vec<_>>(),
        "flags": flags(node),
        "location": node.location.to_string(),
        "children": level(&node.children),
    })
}

/// The node's switches that change how it counts, as short words.
fn flags(node: &Node) -> Vec<String> {
    let mut flags = Vec::new();
    for (on, name) in [
        (node.shadow_mode, "shadow_mode"),
        (node.quota_mode, "quota_mode"),
        (node.share_threshold, "share_threshold"),
        (node.detailed_metric, "detailed_metric"),
        (node.value_to_metric, "value_to_metric"),
    ] {
        if on {
            flags.push(name.to_owned());
        }
    }
    flags.push(format!("failure_mode: {}", node.failure_mode.name()));
    if node.shards > 1 {
        flags.push(format!("shards: {}", node.shards));
    }
    flags
}

fn limit(rule: &LimitRule) -> Value {
    let (algorithm, window) = match &rule.kind {
        // A calendar limit's windows vary in length: it has a calendar instead.
        LimitKind::Counted(l) if rule.calendar.is_some() => (Some(l.algorithm.name()), None),
        LimitKind::Counted(l) => (
            Some(l.algorithm.name()),
            Some(crate::rules::format_window(l.window)),
        ),
        LimitKind::Unlimited => (None, None),
    };
    let calendar = rule.calendar.as_deref();
    json!({
        "name": rule.name.as_deref(),
        "text": rule.describe(),
        "algorithm": algorithm,
        "window": window,
        "requests_per_unit": rule.requests_per_unit,
        "unit": rule.unit.map(|u| u.name()),
        "replaces": rule.replaces,
        "lease": rule.lease,
        "scope": rule.scope.name(),
        "calendar": calendar.map(|c| c.period.name()),
        "timezone": calendar.map(|c| &*c.zone_name),
    })
}

fn match_name(kind: MatchKind) -> &'static str {
    match kind {
        MatchKind::Exact => "exact",
        MatchKind::Wildcard => "wildcard",
        MatchKind::KeyOnly => "key-only",
    }
}

/// Rates and the keys limited most.
pub(super) fn live(rates: &DecisionRates, top: &[LimitedKey]) -> Value {
    let per_second = |r: &crate::insight::PerSecond| {
        json!({
            "ok": r.ok,
            "over_limit": r.over_limit,
            "degraded": r.degraded,
            "errors": r.errors,
        })
    };
    let [ok, over_limit, degraded, errors] = rates.totals;
    json!({
        "last_10s": per_second(&rates.last_10s),
        "last_60s": per_second(&rates.last_60s),
        "history": rates.history.iter().map(per_second).collect::<Vec<_>>(),
        "totals": { "ok": ok, "over_limit": over_limit, "degraded": degraded, "errors": errors },
        "top_window_seconds": HITTER_WINDOW_SECONDS * HITTER_WINDOWS as u64,
        "top": top
            .iter()
            .map(|k| json!({
                "domain": k.domain,
                "descriptor": k.descriptor,
                "shortened": k.shortened,
                "count": k.count,
                "error": k.error,
            }))
            .collect::<Vec<_>>(),
    })
}

/// An explanation, descriptor by descriptor.
pub(super) fn explanation(e: &Explanation<'_>) -> Value {
    json!({
        "domain": e.domain,
        "would_refuse": e.would_refuse,
        "store_error": e.store_error,
        "descriptors": e.descriptors.iter().map(explained).collect::<Vec<_>>(),
    })
}

fn explained(e: &Explained<'_>) -> Value {
    let node = e.walk.node();
    json!({
        "entries": e.entries.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "steps": e.walk.steps.iter().enumerate().map(|(i, s)| json!({
            "level": i + 1,
            "key": s.key,
            "value": s.value,
            "node": s.node.map(|(n, _)| n.full_key.clone()),
            "match": s.node.map(|(_, k)| match_name(k)),
            "configured_values": s.configured_values,
            "configured_keys": s.configured_keys,
        })).collect::<Vec<_>>(),
        "why": e.walk.reached.describe(&e.walk.steps),
        "rule": node.map(|n| n.full_key.clone()),
        "location": node.map(|n| n.location.to_string()),
        "flags": node.map(flags).unwrap_or_default(),
        "limits": e.limits.iter().map(limit_state).collect::<Vec<_>>(),
        "upstream": e.compat_differences,
    })
}

fn limit_state(l: &LimitState<'_>) -> Value {
    json!({
        "limit": limit(l.rule),
        "replaced_by": l.replaced_by,
        "shards": l.shards,
        "region_portion": l.region_portion,
        "counter": l.counter.map(|c| json!({
            "admits": c.admits,
            "remaining": c.remaining,
            "capacity": c.capacity,
            "reset_after_ms": c.reset_after.div_ceil(MILLI),
        })),
    })
}

/// A bucket id's walk: every candidate tried, why it ends where it does, and the bucket action.
pub(super) fn bucket_walk(
    domain: &str,
    bucket: &BTreeMap<String, String>,
    walk: &BucketWalk<'_>,
) -> Value {
    let node = walk.found.as_ref().ok().map(|found| found.node());
    json!({
        "domain": domain,
        "entries": bucket.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "trials": walk.trials.iter().map(|t| json!({
            "level": t.depth + 1,
            "key": t.key,
            "value": t.value,
            "node": t.node.full_key,
            "match": match_name(t.kind),
            "outcome": outcome_name(t.outcome),
            "text": t.outcome.describe(),
        })).collect::<Vec<_>>(),
        "path": walk.found.as_ref().map(|found| found.steps().iter().map(|s| json!({
            "key": s.key,
            "value": s.value,
            "node": s.node.full_key,
            "match": match_name(s.kind),
        })).collect::<Vec<_>>()).unwrap_or_default(),
        "top_keys": walk.top_keys,
        "why": walk.describe(),
        "rule": node.map(|n| n.full_key.clone()),
        "location": node.map(|n| n.location.to_string()),
        "flags": node.map(flags).unwrap_or_default(),
        "limits": node.map(|n| n.limits.iter().map(limit).collect::<Vec<_>>()).unwrap_or_default(),
        "action": action_json(&walk.action()),
    })
}

fn outcome_name(outcome: TrialOutcome) -> &'static str {
    match outcome {
        TrialOutcome::Complete => "complete",
        TrialOutcome::Continued => "continued",
        TrialOutcome::NoChildren => "no-children",
        TrialOutcome::NothingBelow => "nothing-below",
        TrialOutcome::DeadEndsBelow => "dead-ends-below",
    }
}

/// The action's kind, what Envoy is told, and the rate to share when limited.
fn action_json(action: &BucketAction) -> Value {
    let (kind, rate) = match action {
        BucketAction::NoRule => ("no_rule", None),
        BucketAction::Unlimited { .. } => ("unlimited", None),
        BucketAction::Deny { .. } => ("deny", None),
        BucketAction::Limited { rate, .. } => ("limited", Some(rate)),
    };
    json!({
        "kind": kind,
        "text": action.describe(),
        "shadow": action.shadow(),
        "rule": action.rule().map(|r| r.to_string()),
        "rate": rate.map(|r| json!({
            "requests": r.requests,
            "window": crate::rules::format_window(r.window),
            "window_ms": r.window / MILLI,
            "burst": r.burst,
        })),
    })
}
