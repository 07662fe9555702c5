//! Planning one call: match every descriptor against one snapshot of the rules, apply
//! `replaces` across the call, and build the store charges (counter keys, limits, costs,
//! gates). `compose.rs` turns the store's outcomes for the plan into the answer.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;

use smallvec::{SmallVec, smallvec};

use super::LimiterOptions;
use super::request::{Descriptor, LimitOverride, Request};
use super::shards;
use crate::clock::Nanos;
use crate::metrics::SeriesSlot;
use crate::region::Regions;
use crate::rules::{
    Domain, FailureMode, LimitKind, LimitRule, Match, Node, RuleSet, Scope, override_stats_key,
};
use crate::store::{Charge, CounterKeyBuilder, Gate};

/// What one descriptor resolved to.
// A slot lives only for its call, inline in the plan; boxing the large variant would bring back
// the heap allocation per call the inline vectors avoid.
#[allow(clippy::large_enum_variant)]
pub(super) enum Resolved<'r> {
    /// No limit applies (no match, whitelist, replaced, unknown domain).
    Free,
    /// An `unlimited: true` rule.
    Unlimited,
    /// Counted limits, with the indices of their charges.
    Counted {
        /// Shadow, quota mode or ordinary, from the rule and global quota mode (global shadow mode
        /// is applied later).
        gate: Gate,
        /// Quota mode applies (the rule's `quota_mode` or global quota mode), even when the
        /// gate is `Advisory` because the rule is also in shadow mode.
        quota_mode: bool,
        /// The rule's `metadata` (`None` for a request-side override).
        metadata: Option<&'r serde_json::Value>,
        /// Each limit and the index of its charge.
        limits: SlotLimits<'r>,
        /// Hits charged.
        cost: u64,
        /// The rule's statistics key (`domain.key1.key2...`; `Borrowed`: the node's compiled
        /// full key, fixed by the rules).
        stats_key: Cow<'r, str>,
        /// What the rule is called where its limits have no `name`: the node's full key, as
        /// `RateLimit-Policy` names it (`override` for a request-side override).
        full_key: &'r str,
        /// The node's resolved series for a stats key the rules fix (`None` for an override or
        /// a key with runtime values); the figures are looked up when the call is recorded.
        series: Option<&'r SeriesSlot>,
        /// What the rule does when the store is unreachable (`None`: a request-side override,
        /// which has no rule to say).
        failure: Option<FailureMode>,
    },
}

/// A counted descriptor's limits, each with the index of its charge.
pub(super) type SlotLimits<'r> = SmallVec<[(RuleRef<'r>, usize); 2]>;

/// A limit that applies to a descriptor: a configured rule's, or one the request sent. Two
/// words (a `Cow` would hold a whole rule inline), so a plan's slots stay small to build and
/// move.
pub(super) enum RuleRef<'r> {
    /// A rule of the rule set in force.
    Rule(&'r LimitRule),
    /// A request-side override, built for its call (rare; boxed to keep the common case small).
    Override(Box<LimitRule>),
}

impl Deref for RuleRef<'_> {
    type Target = LimitRule;

    fn deref(&self) -> &LimitRule {
        match self {
            Self::Rule(rule) => rule,
            Self::Override(rule) => rule,
        }
    }
}

/// Per call, held inline for calls of up to two descriptors (or charges): the common case
/// plans without the heap.
type PerCall<T> = SmallVec<[T; 2]>;

/// A planned call: per-descriptor slots and the charges to send to the store.
pub(super) struct Plan<'r> {
    slots: PerCall<Resolved<'r>>,
    charges: PerCall<Charge>,
    /// The call's domain is not loaded (every descriptor resolved to nothing).
    unknown_domain: bool,
}

impl<'r> Plan<'r> {
    /// Plans `request` against `rules` at `now` (which places calendar limits' windows); a
    /// `scope: global` limit is cut to the region's portion of it when `regions` is set.
    pub(super) fn build(
        rules: &'r RuleSet,
        request: &Request,
        options: &LimiterOptions,
        regions: Option<&Regions>,
        now: Nanos,
    ) -> Self {
        let request_cost = if request.hits_addend == 0 {
            1
        } else {
            u64::from(request.hits_addend)
        };
        let domain = rules.domain(&request.domain);
        let matched = match_all(domain, request);
        let mut planner = Planner {
            domain: &request.domain,
            replaced: replaced(&matched),
            options,
            regions,
            now,
            charges: PerCall::new(),
        };
        let slots: PerCall<Resolved<'r>> = request
            .descriptors
            .iter()
            .zip(matched)
            .enumerate()
            .map(|(at, (descriptor, m))| {
                let cost = descriptor.hits_addend.unwrap_or(request_cost);
                planner.slot(at, descriptor, cost, m)
            })
            .collect();
        let mut charges = planner.charges;
        if slots
            .iter()
            .any(|slot| passes_quota_mode(slot, options.global_quota_mode))
        {
            // One quota-mode descriptor that always passes means quota mode never blocks this
            // call, so the store must commit the admitted quota-mode charges even if all of them
            // are denied.
            for charge in &mut charges {
                if matches!(charge.gate, Gate::QuotaMode(_)) {
                    charge.gate = Gate::Advisory;
                }
            }
        }
        Self {
            slots,
            charges,
            unknown_domain: domain.is_none(),
        }
    }

    /// Whether the call's domain is not loaded.
    pub(super) fn unknown_domain(&self) -> bool {
        self.unknown_domain
    }

    /// What each descriptor resolved to, in request order.
    pub(super) fn slots(&self) -> &[Resolved<'r>] {
        &self.slots
    }

    /// The charges to apply, in order.
    pub(super) fn charges(&self) -> &[Charge] {
        &self.charges
    }

    /// For each charge: the index of its descriptor and its rule's `failure_mode` (`None` for
    /// a request-side override).
    pub(super) fn failure_modes(&self) -> Vec<(usize, Option<FailureMode>)> {
        let mut modes = vec![(0, None); self.charges.len()];
        for (descriptor, slot) in self.slots.iter().enumerate() {
            if let Resolved::Counted {
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
}

/// Whether `slot` is a quota-mode descriptor: its rule's `quota_mode`, or global quota mode (which
/// leaves out only `unlimited` descriptors).
pub(super) fn is_quota_mode(slot: &Resolved<'_>, global_quota_mode: bool) -> bool {
    match slot {
        Resolved::Free => global_quota_mode,
        Resolved::Unlimited => false,
        Resolved::Counted { quota_mode, .. } => *quota_mode,
    }
}

/// Whether `slot` is a quota-mode descriptor that can never be over its limit: a shadow-mode
/// rule in quota mode, or under global quota mode a descriptor no limit applies to
/// (envoyproxy/ratelimit counts every descriptor but `unlimited` ones in quota mode then).
fn passes_quota_mode(slot: &Resolved<'_>, global_quota_mode: bool) -> bool {
    match slot {
        Resolved::Free => global_quota_mode,
        Resolved::Unlimited => false,
        Resolved::Counted {
            gate, quota_mode, ..
        } => *quota_mode && *gate == Gate::Advisory,
    }
}

/// What one descriptor matched before `replaces` is applied.
enum Matched<'r> {
    Nothing,
    Override(LimitOverride, String),
    Rule(Match<'r>, Cow<'r, str>),
}

/// What each descriptor matched in `domain` (overrides bypass matching and `replaces`).
fn match_all<'r>(domain: Option<&'r Domain>, request: &Request) -> PerCall<Matched<'r>> {
    request
        .descriptors
        .iter()
        .map(|d| {
            let Some(domain) = domain else {
                return Matched::Nothing;
            };
            let entries: SmallVec<[(&str, &str); 4]> = d
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
        .collect()
}

/// The limit names dropped by `replaces`, which works across the descriptors of one call: a
/// limit named by any matched limit's `replaces` is not counted and reported as no limit.
fn replaced<'r>(matched: &[Matched<'r>]) -> PerCall<&'r str> {
    matched
        .iter()
        .filter_map(|m| match m {
            Matched::Rule(found, _) => Some(found.node().limits.iter()),
            _ => None,
        })
        .flatten()
        .flat_map(|l| l.replaces.iter().map(String::as_str))
        .collect()
}

/// What the descriptors of one call share while each is planned, and the charges so far.
struct Planner<'a, 'r> {
    domain: &'a str,
    replaced: PerCall<&'r str>,
    options: &'a LimiterOptions,
    regions: Option<&'a Regions>,
    now: Nanos,
    charges: PerCall<Charge>,
}

impl<'r> Planner<'_, 'r> {
    /// The slot of `descriptor`, the call's `at`th, which matched `m` and costs `cost`; adds its
    /// charges (in quota mode, as its quota-mode group).
    fn slot(
        &mut self,
        at: usize,
        descriptor: &Descriptor,
        cost: u64,
        m: Matched<'r>,
    ) -> Resolved<'r> {
        let group = quota_mode_group(at);
        // At most MAX_DESCRIPTORS descriptors reach planning.
        let index = u32::try_from(at).unwrap_or(u32::MAX);
        // The node's series slot goes with a stats key the rules fix (`Borrowed`: its full key).
        let (rules, counted, stats_key, slot) = match m {
            Matched::Nothing => return Resolved::Free,
            Matched::Override(o, stats_key) => {
                let quota_mode = self.options.global_quota_mode;
                let counted = ChargeParams {
                    key: counter_key(self.domain, descriptor, None),
                    descriptor: index,
                    cost,
                    gate: if quota_mode { group } else { Gate::Enforced },
                    quota_mode,
                    metadata: None,
                    full_key: "override",
                    shards: None,
                    failure: None,
                    rule_key: "",
                };
                let rule = o.rule(
                    self.options.default_algorithm,
                    self.options.override_recording,
                );
                let rule = RuleRef::Override(Box::new(rule));
                (smallvec![rule], counted, Cow::Owned(stats_key), None)
            }
            Matched::Rule(found, stats_key) => {
                let node = found.node();
                let kept: PerCall<RuleRef<'r>> = node
                    .limits
                    .iter()
                    .filter(|l| {
                        l.name
                            .as_deref()
                            .is_none_or(|n| !self.replaced.contains(&n))
                    })
                    .map(RuleRef::Rule)
                    .collect();
                if kept.iter().any(|l| l.kind == LimitKind::Unlimited) {
                    return Resolved::Unlimited;
                }
                let quota_mode = node.quota_mode || self.options.global_quota_mode;
                let counted = ChargeParams {
                    key: counter_key(self.domain, descriptor, Some(&found)),
                    descriptor: index,
                    cost,
                    gate: gate_of(node, quota_mode.then_some(group)),
                    quota_mode,
                    metadata: node.metadata.as_ref(),
                    full_key: &node.full_key,
                    shards: (node.shards > 1)
                        .then(|| (node.shards, shards::route(&descriptor.entries))),
                    failure: Some(node.failure_mode),
                    rule_key: &node.full_key,
                };
                (kept, counted, stats_key, Some(&node.series))
            }
        };
        let stats = (stats_key, slot);
        let at = Place {
            domain: self.domain,
            regions: self.regions,
            now: self.now,
        };
        counted.plan(rules, stats, self.options, at, &mut self.charges)
    }
}

/// How a denial of a node's limits gates the call: `quota_mode` is its quota-mode group when
/// applies.
pub(super) fn gate_of(node: &Node, quota_mode: Option<Gate>) -> Gate {
    match quota_mode {
        _ if node.shadow_mode => Gate::Advisory,
        Some(group) => group,
        None => Gate::Enforced,
    }
}

/// The quota-mode gate of the descriptor at `at` in its call: each quota-mode descriptor is one
/// group, over when any of its limits is denied (`store::gate`).
pub(super) fn quota_mode_group(at: usize) -> Gate {
    // At most MAX_DESCRIPTORS descriptors reach planning.
    Gate::QuotaMode(u32::try_from(at).unwrap_or(u32::MAX))
}

/// The shared parameters of one counted descriptor's charges.
struct ChargeParams<'r> {
    key: CounterKeyBuilder,
    /// The descriptor's index in its call.
    descriptor: u32,
    cost: u64,
    gate: Gate,
    quota_mode: bool,
    metadata: Option<&'r serde_json::Value>,
    full_key: &'r str,
    /// A sharded rule: its shard count and this call's routing hash.
    shards: Option<(u32, u64)>,
    failure: Option<FailureMode>,
    /// The node's full key (empty for a request-side override), naming a global limit's
    /// counters to the region.
    rule_key: &'r str,
}

/// Where and when a descriptor's charges are planned.
struct Place<'a> {
    domain: &'a str,
    regions: Option<&'a Regions>,
    now: Nanos,
}

impl<'r> ChargeParams<'r> {
    /// One charge per counted limit at `now` (a calendar limit over the local period `now`
    /// falls in); `Free` when every limit was replaced.
    fn plan(
        self,
        rules: PerCall<RuleRef<'r>>,
        (stats_key, series): (Cow<'r, str>, Option<&'r SeriesSlot>),
        options: &LimiterOptions,
        at: Place<'_>,
        charges: &mut PerCall<Charge>,
    ) -> Resolved<'r> {
        if rules.is_empty() {
            return Resolved::Free;
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
                let limit = rule.counted_at(at.now)?;
                let sub = self
                    .shards
                    .and_then(|(n, route)| shards::split(&limit, n, route));
                let (key, limit) = match sub {
                    Some((part, i)) => (self.key.finish_limit(rule.index, &limit, Some(i)), part),
                    None => (self.key.finish_limit(rule.index, &limit, None), limit),
                };
                // A global limit is this region's portion of it (the key stays the whole
                // limit's, so a moved portion keeps counting on the same counter).
                let limit = match (rule.scope, at.regions) {
                    (Scope::Global, Some(regions)) => {
                        let name = || (Arc::from(at.domain), Arc::from(self.rule_key), rule.index);
                        regions.limit_for(key.as_bytes(), limit, self.cost, name, at.now)
                    }
                    _ => limit,
                };
                charges.push(Charge {
                    key,
                    limit,
                    cost: self.cost,
                    gate: charge_gate,
                    lease: rule.lease,
                    descriptor: self.descriptor,
                });
                Some((rule, charges.len() - 1))
            })
            .collect();
        Resolved::Counted {
            gate: self.gate,
            quota_mode: self.quota_mode,
            metadata: self.metadata,
            limits,
            cost: self.cost,
            stats_key,
            full_key: self.full_key,
            series,
            failure: self.failure,
        }
    }
}

/// The counter key of a descriptor: its runtime entries, with the shared pattern in place of
/// the value at every level whose node has `share_threshold`.
pub(super) fn counter_key(
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
