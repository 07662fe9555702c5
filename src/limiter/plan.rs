//! Planning one call: match every descriptor, apply `replaces`, build the store charges; then
//! turn the store's verdicts into statuses, the overall code and the headers.

use std::borrow::Cow;
use std::sync::Arc;

use super::LimiterOptions;
use super::decision::{Code, Decision, DescriptorStatus, ReportedLimit};
use super::headers;
use super::request::{Descriptor, LimitOverride, Request};
use super::shards;
use crate::algorithm::{Limit, Verdict};
use crate::clock::SECOND;
use crate::metrics::{HitOutcome, Metrics, RuleCounters};
use crate::rules::{FailureMode, LimitKind, LimitRule, Match, Node, RuleSet, override_stats_key};
use crate::store::{Charge, CounterKeyBuilder, Gate, Outcome, gate};

/// What one descriptor resolved to.
enum Slot<'r> {
    /// No limit applies (no match, whitelist, replaced, unknown domain).
    Free,
    /// An `unlimited: true` rule.
    Unlimited,
    /// Counted limits, with the indices of their charges.
    Counted {
        /// Shadow, quota or ordinary, from the rule (global shadow mode is applied later).
        gate: Gate,
        /// Each limit and the index of its charge.
        limits: Vec<(Cow<'r, LimitRule>, usize)>,
        /// Hits charged.
        cost: u64,
        /// The rule's statistics series.
        stats: Arc<RuleCounters>,
        /// What the rule does when the store is unreachable (`None`: a request-side override,
        /// which has no rule to say).
        failure: Option<FailureMode>,
    },
}

/// A planned call: per-descriptor slots and the charges to send to the store.
pub(super) struct Plan<'r> {
    slots: Vec<Slot<'r>>,
    charges: Vec<Charge>,
}

impl<'r> Plan<'r> {
    /// Plans `request` against `rules`.
    pub(super) fn build(
        rules: &'r RuleSet,
        request: &Request,
        options: &LimiterOptions,
        metrics: &Metrics,
    ) -> Self {
        let domain = rules.domain(&request.domain);
        let request_cost = if request.hits_addend == 0 {
            1
        } else {
            u64::from(request.hits_addend)
        };

        // First pass: what each descriptor matched (overrides bypass matching and replaces).
        let matched: Vec<Matched<'r>> = request
            .descriptors
            .iter()
            .map(|d| {
                let Some(domain) = domain else {
                    metrics.record_domain_not_found();
                    return Matched::Nothing;
                };
                let entries: Vec<(&str, &str)> = d
                    .entries
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                match d.limit_override {
                    Some(o) => Matched::Override(o, override_stats_key(&domain.name, &entries)),
                    None => domain.lookup(&entries).map_or(Matched::Nothing, |found| {
                        let stats_key = found.stats_key(&domain.name, &entries);
                        Matched::Rule(found, stats_key)
                    }),
                }
            })
            .collect();

        // `replaces` works across the descriptors of one call: a limit named by any matched
        // limit's `replaces` is dropped (not counted, reported as no limit).
        let replaced: Vec<&str> = matched
            .iter()
            .filter_map(|m| match m {
                Matched::Rule(found, _) => Some(found.node().limits.iter()),
                _ => None,
            })
            .flatten()
            .flat_map(|l| l.replaces.iter().map(String::as_str))
            .collect();

        let mut charges = Vec::new();
        let slots = request
            .descriptors
            .iter()
            .zip(matched)
            .map(|(descriptor, m)| {
                let cost = descriptor.hits_addend.unwrap_or(request_cost);
                let gate_of = |node: Option<&Node>| match node {
                    Some(n) if n.shadow_mode => Gate::Advisory,
                    Some(n) if n.quota_mode => Gate::Quota,
                    _ => Gate::Enforced,
                };
                match m {
                    Matched::Nothing => Slot::Free,
                    Matched::Override(o, stats_key) => {
                        let rule = override_rule(o, options);
                        let key = counter_key(&request.domain, descriptor, None);
                        let counted = Counted {
                            key: &key,
                            cost,
                            gate: gate_of(None),
                            shards: None,
                            failure: None,
                        };
                        let stats = || metrics.rule(&request.domain, &stats_key);
                        counted.plan(vec![Cow::Owned(rule)], stats, options, &mut charges)
                    }
                    Matched::Rule(found, stats_key) => {
                        let node = found.node();
                        let kept: Vec<Cow<'r, LimitRule>> = node
                            .limits
                            .iter()
                            .filter(|l| l.name.as_deref().is_none_or(|n| !replaced.contains(&n)))
                            .map(Cow::Borrowed)
                            .collect();
                        if kept.iter().any(|l| l.kind == LimitKind::Unlimited) {
                            Slot::Unlimited
                        } else {
                            let key = counter_key(&request.domain, descriptor, Some(&found));
                            let counted = Counted {
                                key: &key,
                                cost,
                                gate: gate_of(Some(node)),
                                shards: (node.shards > 1)
                                    .then(|| (node.shards, shards::route(&descriptor.entries))),
                                failure: Some(node.failure_mode),
                            };
                            let stats = || metrics.rule(&request.domain, &stats_key);
                            counted.plan(kept, stats, options, &mut charges)
                        }
                    }
                }
            })
            .collect();
        Self { slots, charges }
    }

    /// The charges to decide, in order.
    pub(super) fn charges(&self) -> &[Charge] {
        &self.charges
    }

    /// For each charge: the index of its descriptor and its rule's `failure_mode` (`None` for
    /// a request-side override).
    pub(super) fn failure_modes(&self) -> Vec<(usize, Option<FailureMode>)> {
        let mut modes = vec![(0, None); self.charges.len()];
        for (descriptor, slot) in self.slots.iter().enumerate() {
            if let Slot::Counted {
                limits, failure, ..
            } = slot
            {
                for (_, at) in limits {
                    modes[*at] = (descriptor, *failure);
                }
            }
        }
        modes
    }

    /// Turns the store's outcomes (one per charge) into the decision, recording each
    /// descriptor's hits against its rule's statistics.
    pub(super) fn decide(
        &self,
        outcomes: &[Outcome],
        global_shadow_mode: bool,
        metrics: &Metrics,
    ) -> Decision {
        let mut statuses = Vec::with_capacity(self.slots.len());
        // (the rule's gate, whether the descriptor's limits all admitted the call)
        let mut gates: Vec<(Gate, bool)> = Vec::new();
        // The limit chosen to describe each counted descriptor, with its verdict.
        let mut chosen: Vec<Option<(&LimitRule, Verdict)>> = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
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
                    let verdict = outcome.verdict;
                    gates.push((*gate, verdict.admitted));
                    let capacity = match rule.kind {
                        LimitKind::Counted(limit) => limit.capacity(),
                        LimitKind::Unlimited => 0,
                    };
                    let hits = HitOutcome {
                        hits: *cost,
                        capacity,
                        available: outcome.available,
                        admitted: verdict.admitted,
                        shadowed: !verdict.admitted && *gate == Gate::Advisory,
                    };
                    metrics.record_hits(stats, &hits);
                    let code = if verdict.admitted || *gate == Gate::Advisory {
                        Code::Ok
                    } else {
                        Code::OverLimit
                    };
                    statuses.push(DescriptorStatus {
                        code,
                        limit: Some(reported(rule)),
                        remaining: if verdict.admitted {
                            clamp_u32(verdict.remaining)
                        } else {
                            0
                        },
                        reset_after: Some(verdict.reset_after),
                    });
                    chosen.push(Some((rule, verdict)));
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
        }
    }
}

/// What one descriptor matched before `replaces` is applied.
enum Matched<'r> {
    Nothing,
    Override(LimitOverride, String),
    Rule(Match<'r>, String),
}

/// The shared parameters of one counted descriptor's charges.
struct Counted<'k> {
    key: &'k CounterKeyBuilder,
    cost: u64,
    gate: Gate,
    /// A sharded rule: its shard count and this call's routing hash.
    shards: Option<(u32, u64)>,
    failure: Option<FailureMode>,
}

impl Counted<'_> {
    /// One charge per counted limit; `Free` when every limit was replaced.
    fn plan<'r>(
        self,
        rules: Vec<Cow<'r, LimitRule>>,
        stats: impl FnOnce() -> Arc<RuleCounters>,
        options: &LimiterOptions,
        charges: &mut Vec<Charge>,
    ) -> Slot<'r> {
        if rules.is_empty() {
            return Slot::Free;
        }
        // Under global shadow mode nothing blocks the call, so every admitted counter is charged.
        let charge_gate = if options.global_shadow_mode {
            Gate::Advisory
        } else {
            self.gate
        };
        let limits = rules
            .into_iter()
            .filter_map(|rule| {
                let LimitKind::Counted(limit) = rule.kind else {
                    return None;
                };
                let sub = self
                    .shards
                    .and_then(|(n, route)| shards::split(&limit, n, route));
                let (key, limit) = match sub {
                    Some((part, i)) => (
                        self.key
                            .finish_shard(rule.index, limit.algorithm, limit.window, i),
                        part,
                    ),
                    None => (
                        self.key.finish(rule.index, limit.algorithm, limit.window),
                        limit,
                    ),
                };
                charges.push(Charge {
                    key,
                    limit,
                    cost: self.cost,
                    gate: charge_gate,
                });
                Some((rule, charges.len() - 1))
            })
            .collect();
        Slot::Counted {
            gate: self.gate,
            limits,
            cost: self.cost,
            stats: stats(),
            failure: self.failure,
        }
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

/// A limit sent by the client: counted with the default algorithm, sharing the counter of a
/// configured rule with the same window (as upstream's overrides share cache keys).
fn override_rule(o: LimitOverride, options: &LimiterOptions) -> LimitRule {
    let window = o.unit.seconds() * SECOND;
    let requests = u64::from(o.requests_per_unit);
    LimitRule {
        kind: LimitKind::Counted(Limit {
            algorithm: options.default_algorithm,
            requests,
            window,
            burst: requests,
        }),
        requests_per_unit: o.requests_per_unit,
        unit: Some(o.unit),
        name: None,
        replaces: Vec::new(),
        index: 0,
        policy: format!(
            "\"override\";q={};w={}",
            o.requests_per_unit,
            o.unit.seconds()
        ),
    }
}

/// The counter key of a descriptor: its runtime entries, with the shared pattern in place of
/// the value at every level whose node has `share_threshold`.
fn counter_key(
    domain: &str,
    descriptor: &Descriptor,
    found: Option<&Match<'_>>,
) -> CounterKeyBuilder {
    let mut key = CounterKeyBuilder::new(domain);
    let nodes = found.map_or(&[][..], |m| m.nodes());
    for (i, (k, v)) in descriptor.entries.iter().enumerate() {
        match nodes.get(i) {
            Some(node) if node.share_threshold => {
                key.shared_entry(k, node.value.as_deref().unwrap_or_default())
            }
            _ => key.entry(k, v),
        };
    }
    key
}
