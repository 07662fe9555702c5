//! Turning the store's outcomes for a planned call into its answer: one status per
//! descriptor, the overall code (all-or-nothing, quota mode and shadow mode), the rate-limit
//! headers in the configured style, and the dynamic metadata (envoyproxy/ratelimit's, the
//! refusing rules' names) when asked for.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::LimiterOptions;
use super::decision::{Code, Decision, DescriptorStatus, ReportedLimit};
use super::plan::{Plan, Resolved, RuleRef, is_quota_mode, quota_mode_group};
use super::record::Figures;
use super::request::Request;
use super::response_options::{HeaderStyle, ResetPrecision};
use super::{HeaderText, compat_headers, headers, metadata};
use crate::algorithm::Verdict;
use crate::metrics::HitOutcome;
use crate::rules::{LimitKind, LimitRule};
use crate::store::{ChargeOutcome, Gate, gate};

/// The answer to `request`, planned as `plan`, given the store's `outcomes` (one per charge);
/// notes in `figures` what the call's figures need (each counted descriptor's hits, a call let
/// through by global shadow mode), which `record.rs` records.
pub(super) fn compose(
    request: &Request,
    plan: &Plan<'_>,
    outcomes: &[ChargeOutcome],
    options: &LimiterOptions,
    figures: &mut Figures,
) -> Decision {
    let slots = plan.slots();
    let global_quota_mode = options.global_quota_mode;
    let mut statuses = Vec::with_capacity(slots.len());
    // How each descriptor with a say gates the call, and whether it fits.
    let mut gates: SmallVec<[(Gate, bool); 2]> = SmallVec::new();
    // The limit chosen to describe each counted descriptor, with its verdict.
    let mut chosen: SmallVec<[Option<(&LimitRule, Verdict)>; 2]> = SmallVec::new();
    // The names of the rules that refused (`--refusal-metadata`), made at the first refusal.
    let mut refused_by: Option<String> = None;
    for (at, slot) in slots.iter().enumerate() {
        match slot {
            Resolved::Free => {
                statuses.push(DescriptorStatus::unlimited_by_absence());
                chosen.push(None);
                // envoyproxy/ratelimit's global quota mode counts it as a quota-mode descriptor
                // that fits.
                if global_quota_mode {
                    gates.push((quota_mode_group(at), true));
                }
            }
            Resolved::Unlimited => {
                statuses.push(DescriptorStatus::unlimited());
                chosen.push(None);
            }
            Resolved::Counted {
                gate,
                quota_mode,
                limits,
                cost,
                full_key,
                ..
            } => {
                let (rule, outcome) = binding_limit(limits, outcomes);
                if options.response.refusal_metadata && !outcome.verdict.admitted {
                    metadata::refused(&mut refused_by, rule.name.as_deref().unwrap_or(full_key));
                }
                let counted = CountedDescriptor {
                    rule,
                    outcome,
                    gate: *gate,
                    cost: *cost,
                };
                gates.push(counted.gating(quota_mode.then(|| quota_mode_group(at))));
                statuses.push(counted.status(options.response.reset_precision));
                figures.hits.push(counted.hits());
                chosen.push(Some((rule, outcome.verdict)));
            }
        }
    }
    // Under global shadow mode the statuses keep OVER_LIMIT and only the overall code flips.
    let over = gate::blocked(gates);
    let code = match (over, options.global_shadow_mode) {
        (true, false) => Code::OverLimit,
        (true, true) => {
            figures.global_shadowed = true;
            Code::Ok
        }
        (false, _) => Code::Ok,
    };
    let headers = match &options.response.headers {
        HeaderStyle::Draft10 => describe(&chosen, &statuses, over, code == Code::OverLimit),
        HeaderStyle::Compat(names) => compat_headers::build(names, &statuses, |i| {
            is_quota_mode(&slots[i], global_quota_mode)
        }),
        HeaderStyle::None => Vec::new(),
    };
    let mut dynamic_metadata = options
        .response
        .dynamic_metadata
        .then(|| metadata::build(request, slots, &statuses));
    if let Some(names) = refused_by {
        let fields = dynamic_metadata.get_or_insert_default();
        fields.insert(metadata::REFUSED_BY.into(), names.into());
    }
    Decision {
        code,
        statuses,
        headers,
        dynamic_metadata,
        store: super::StoreUse::Skipped,
    }
}

/// A counted descriptor: the limit that describes it and that limit's outcome.
struct CountedDescriptor<'a> {
    rule: &'a LimitRule,
    outcome: ChargeOutcome,
    gate: Gate,
    cost: u64,
}

impl CountedDescriptor<'_> {
    /// How the descriptor gates the call and whether it fits (the binding limit is a denied
    /// one if any is); in quota mode (`quota_mode`: its group) a shadow rule is a quota-mode
    /// descriptor that always fits.
    fn gating(&self, quota_mode: Option<Gate>) -> (Gate, bool) {
        let fits = self.outcome.verdict.admitted;
        match quota_mode {
            Some(group) => (group, fits || self.gate == Gate::Advisory),
            None => (self.gate, fits),
        }
    }

    /// How the descriptor's hits fell against its binding limit, for its rule's statistics.
    fn hits(&self) -> HitOutcome {
        let verdict = self.outcome.verdict;
        let capacity = match self.rule.kind {
            LimitKind::Counted(limit) => limit.capacity(),
            LimitKind::Unlimited => 0,
        };
        HitOutcome {
            hits: self.cost,
            capacity,
            available: self.outcome.available,
            admitted: verdict.admitted,
            shadowed: !verdict.admitted && self.gate == Gate::Advisory,
        }
    }

    /// The descriptor's status, its reset rounded to `precision`.
    fn status(&self, precision: ResetPrecision) -> DescriptorStatus {
        let (rule, outcome, gate) = (self.rule, self.outcome, self.gate);
        let verdict = outcome.verdict;
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
            reset_after: Some(precision.round(verdict.reset_after)),
        }
    }
}

/// The limit that describes a descriptor: a denied one with the longest wait (all must pass),
/// else the one closest to exhaustion.
fn binding_limit<'a>(
    limits: &'a [(RuleRef<'_>, usize)],
    outcomes: &[ChargeOutcome],
) -> (&'a LimitRule, ChargeOutcome) {
    let mut best: Option<(&LimitRule, ChargeOutcome)> = None;
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
            best = Some((&**rule, o));
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
) -> Vec<(Cow<'static, str>, HeaderText)> {
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
        name: rule.name.clone(),
    }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
