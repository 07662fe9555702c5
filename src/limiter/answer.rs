//! Turning the store's outcomes for a planned call into its answer: one status per
//! descriptor, the overall code (all-or-nothing, shadow modes) and the rate-limit headers.

use std::borrow::Cow;
use std::sync::Arc;

use super::decision::{Code, Decision, DescriptorStatus, ReportedLimit};
use super::headers;
use super::plan::{Plan, Slot};
use crate::algorithm::Verdict;
use crate::metrics::{HitOutcome, Metrics, RuleCounters};
use crate::rules::{LimitKind, LimitRule};
use crate::store::{Gate, Outcome, gate};

/// The answer to `plan` given the store's `outcomes` (one per charge), recording each
/// descriptor's hits against its rule's statistics.
pub(super) fn decide(
    plan: &Plan<'_>,
    outcomes: &[Outcome],
    global_shadow_mode: bool,
    metrics: &Metrics,
) -> Decision {
    let slots = plan.slots();
    let mut statuses = Vec::with_capacity(slots.len());
    // (the rule's gate, whether the descriptor's limits all admitted the call)
    let mut gates: Vec<(Gate, bool)> = Vec::new();
    // The limit chosen to describe each counted descriptor, with its verdict.
    let mut chosen: Vec<Option<(&LimitRule, Verdict)>> = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            Slot::Free => {
                statuses.push(DescriptorStatus::unlimited_by_absence());
                chosen.push(None);
            }
            Slot::Unlimited => {
                statuses.push(DescriptorStatus::unlimited());
                chosen.push(None);
            }
            Slot::Counted {
                gate,
                limits,
                cost,
                stats,
                ..
            } => {
                let (rule, outcome) = binding_limit(limits, outcomes);
                gates.push((*gate, outcome.verdict.admitted));
                statuses.push(counted_status(rule, outcome, *gate, *cost, stats, metrics));
                chosen.push(Some((rule, outcome.verdict)));
            }
        }
    }
    // Under global shadow mode the statuses keep OVER_LIMIT and only the overall code flips.
    let over = gate::blocked(gates);
    let code = if over && !global_shadow_mode {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let headers = describe(&chosen, &statuses, over, code == Code::OverLimit);
    Decision {
        code,
        statuses,
        headers,
        store: super::StoreUse::Skipped,
    }
}

/// The status of a counted descriptor described by `rule` and its `outcome`; records the
/// descriptor's hits in `stats`.
fn counted_status(
    rule: &LimitRule,
    outcome: Outcome,
    gate: Gate,
    cost: u64,
    stats: &RuleCounters,
    metrics: &Metrics,
) -> DescriptorStatus {
    let verdict = outcome.verdict;
    let capacity = match rule.kind {
        LimitKind::Counted(limit) => limit.capacity(),
        LimitKind::Unlimited => 0,
    };
    let hits = HitOutcome {
        hits: cost,
        capacity,
        available: outcome.available,
        admitted: verdict.admitted,
        shadowed: !verdict.admitted && gate == Gate::Advisory,
    };
    metrics.record_hits(stats, &hits);
    let code = if verdict.admitted || gate == Gate::Advisory {
        Code::Ok
    } else {
        Code::OverLimit
    };
    DescriptorStatus {
        code,
        limit: Some(reported(rule)),
        remaining: if verdict.admitted {
            clamp_u32(verdict.remaining)
        } else {
            0
        },
        reset_after: Some(verdict.reset_after),
    }
}

/// The limit that describes a descriptor: a denied one with the longest wait (all must pass),
/// else the one closest to exhaustion.
fn binding_limit<'a>(
    limits: &'a [(Cow<'_, LimitRule>, usize)],
    outcomes: &[Outcome],
) -> (&'a LimitRule, Outcome) {
    let mut best: Option<(&LimitRule, Outcome)> = None;
    for (rule, at) in limits {
        let o = outcomes[*at];
        let v = o.verdict;
        let better = match best {
            None => true,
            Some((_, b)) => match (v.admitted, b.verdict.admitted) {
                (false, true) => true,
                (true, false) => false,
                (false, false) => v.reset_after > b.verdict.reset_after,
                (true, true) => {
                    (v.remaining, std::cmp::Reverse(v.reset_after))
                        < (
                            b.verdict.remaining,
                            std::cmp::Reverse(b.verdict.reset_after),
                        )
                }
            },
        };
        if better {
            best = Some((rule.as_ref(), o));
        }
    }
    best.expect("a counted slot has at least one limit")
}

/// The headers for the status that best describes the call: when refused, the refusing
/// descriptor with the longest wait; otherwise the limited descriptor closest to exhaustion.
fn describe(
    chosen: &[Option<(&LimitRule, Verdict)>],
    statuses: &[DescriptorStatus],
    over: bool,
    refused: bool,
) -> Vec<(&'static str, String)> {
    let mut best: Option<(usize, &LimitRule, Verdict)> = None;
    for (i, c) in chosen.iter().enumerate() {
        let Some((rule, v)) = c else { continue };
        if over && statuses[i].code != Code::OverLimit {
            continue;
        }
        let better = best.is_none_or(|(bi, _, b)| {
            if over {
                v.reset_after > b.reset_after
            } else {
                (statuses[i].remaining, std::cmp::Reverse(v.reset_after))
                    < (statuses[bi].remaining, std::cmp::Reverse(b.reset_after))
            }
        });
        if better {
            best = Some((i, rule, *v));
        }
    }
    best.map_or_else(Vec::new, |(i, rule, v)| {
        headers::build(&rule.policy, statuses[i].remaining, v.reset_after, refused)
    })
}

fn reported(rule: &LimitRule) -> ReportedLimit {
    ReportedLimit {
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit,
        name: rule.name.as_deref().map(Arc::from),
    }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
