//! The JSON of `/counters`: a descriptor's limits with each counter's state (`GET`), or what a
//! reset cleared (`DELETE`). The shapes are documented in docs/admin.md.

use serde_json::{Value, json};

use crate::clock::{MILLI, Nanos};
use crate::limiter::{Counters, LimitCounters, Reset, ShardCounter};
use crate::rules::{LimitKind, format_window};

/// A descriptor's counters, limit by limit and shard by shard.
pub fn counters(c: &Counters<'_>) -> Value {
    let mut answer = head(c);
    answer["limits"] = c
        .limits
        .iter()
        .map(|l| {
            let mut limit = limit(l, c.node.shards);
            limit["counters"] = l.counters.iter().map(|s| counter(s, c.now)).collect();
            limit
        })
        .collect();
    answer
}

/// What a reset cleared.
pub fn reset(r: &Reset<'_>) -> Value {
    let c = &r.counters;
    let mut answer = head(c);
    answer["reset"] = c
        .limits
        .iter()
        .filter(|l| !l.counters.is_empty())
        .map(|l| {
            let mut limit = limit(l, c.node.shards);
            limit["shards_reset"] = json!(l.counters.len());
            limit
        })
        .collect();
    answer["counters_cleared"] = json!(r.cleared.counters);
    answer["leased_hits_returned"] = json!(r.cleared.leased_hits);
    answer
}

/// The descriptor and the rule node it reaches.
fn head(c: &Counters<'_>) -> Value {
    json!({
        "domain": c.domain,
        "descriptor": c.entries.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "rule": c.node.full_key,
        "location": c.node.location.to_string(),
        "at": timestamp(c.now),
    })
}

/// One limit as the rules say it.
fn limit(l: &LimitCounters<'_>, shards: u32) -> Value {
    let rule = l.rule;
    let (algorithm, window, requests, burst) = match (&rule.kind, &l.limit) {
        (_, Some(now)) if rule.calendar.is_some() => {
            (Some(now.algorithm.name()), None, now.requests, now.burst)
        }
        (_, Some(now)) => (
            Some(now.algorithm.name()),
            Some(format_window(now.window)),
            now.requests,
            now.burst,
        ),
        (LimitKind::Counted(configured), None) => (
            Some(configured.algorithm.name()),
            Some(format_window(configured.window)),
            configured.requests,
            configured.burst,
        ),
        (LimitKind::Unlimited, None) => (None, None, 0, 0),
    };
    let calendar = rule.calendar.as_deref();
    json!({
        "name": rule.name.as_deref(),
        "index": rule.index,
        "text": rule.describe(),
        "algorithm": algorithm,
        "requests": requests,
        "window": window,
        "burst": burst,
        "calendar": calendar.map(|c| c.period.name()),
        "timezone": calendar.map(|c| &*c.zone_name),
        "shards": shards.max(1),
        "lease": rule.lease,
        "record_over_limit": l.limit.is_some_and(|now| now.recording.records()),
        "unlimited": matches!(rule.kind, LimitKind::Unlimited),
        "replaced_by": l.replaced_by,
    })
}

/// One counter's state: what is used (the hits it holds, past the capacity on a limit that
/// records every charge) and left, and when it next admits or is full again.
fn counter(s: &ShardCounter, now: Nanos) -> Value {
    let capacity = s.limit.capacity();
    let Some(state) = s.state else {
        return json!({ "shard": s.shard, "capacity": capacity });
    };
    let at = |after: Nanos| (timestamp(now.saturating_add(after)), after.div_ceil(MILLI));
    let (next_at, next_in) = match state.admits {
        false => {
            let (at, ms) = at(state.reset_after);
            (Some(at), Some(ms))
        }
        true => (None, None),
    };
    let (full_at, full_in) = match state.admits {
        true => {
            let (at, ms) = at(state.reset_after);
            (Some(at), Some(ms))
        }
        false => (None, None),
    };
    json!({
        "shard": s.shard,
        "capacity": capacity,
        "used": s.used.unwrap_or(capacity.saturating_sub(state.remaining)),
        "remaining": state.remaining,
        "admits": state.admits,
        "next_admitted_at": next_at,
        "next_admitted_in_ms": next_in,
        "full_again_at": full_at,
        "full_again_in_ms": full_in,
        "leased_here": s.leased,
    })
}

/// An instant as RFC 3339 (UTC).
fn timestamp(at: Nanos) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(at))
        .map(|t| t.to_string())
        .unwrap_or_default()
}
