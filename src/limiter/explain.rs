//! Explaining a call without charging it: each descriptor's walk through the rules
//! (`rules::walk`), `replaces` across the call, and a check-only peek at every counter that
//! would be charged (cost 0: the store judges a one-hit call and changes nothing). Nothing is
//! recorded in the metrics. `sluice explain` runs it on a fresh store, `/ui` on the live one.

use std::borrow::Cow;

use super::Limiter;
use super::plan::{counter_key, gate_of, quota_mode_group};
use super::request::Descriptor;
use super::shards;
use crate::algorithm::{Limit, Verdict};
use crate::clock::Nanos;
use crate::region::Regions;
use crate::rules::{LimitRule, Reached, RuleSet, Scope, Walk, split_entries, walk};
use crate::store::{Charge, Gate, Store};

/// The explanation of one call.
#[derive(Debug, Clone)]
pub struct Explanation<'r> {
    /// The domain asked for.
    pub domain: String,
    /// One per descriptor, in order.
    pub descriptors: Vec<Explained<'r>>,
    /// Whether a one-hit call would be refused now (any ordinary limit without room).
    pub would_refuse: bool,
    /// The store's error when the counters could not be read (each rule's `failure_mode`
    /// would answer).
    pub store_error: Option<String>,
}

/// One descriptor's explanation.
#[derive(Debug, Clone)]
pub struct Explained<'r> {
    /// The descriptor's entries.
    pub entries: Vec<(String, String)>,
    /// Its walk through the rules.
    pub walk: Walk<'r>,
    /// The limits of the node reached, each with its counter's state.
    pub limits: Vec<LimitState<'r>>,
    /// Where envoyproxy/ratelimit would answer differently (the walk's, and the call's).
    pub compat_differences: Vec<String>,
}

/// One limit of the node reached.
#[derive(Debug, Clone)]
pub struct LimitState<'r> {
    /// The limit.
    pub rule: &'r LimitRule,
    /// The names of the call's limits that replace it (it is then not counted).
    pub replaced_by: Vec<String>,
    /// Sub-counters (`shards`) it is split into (1 when not split).
    pub shards: u32,
    /// Its counter now, when it is counted and the store answered.
    pub counter: Option<CounterState>,
    /// This region's portion (0..=1) of its counter, for a `scope: global` limit on a server
    /// that is one of several regions (the counter is judged against that part of the limit).
    pub region_portion: Option<f64>,
}

/// A counter's state, judged for a one-hit call at `now` (nothing charged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterState {
    /// Whether a one-hit call would be admitted.
    pub admits: bool,
    /// Hits that would still fit now.
    pub remaining: u64,
    /// When admitting: the time until the counter is back to its full allowance; when not:
    /// the time after which a one-hit call would be admitted.
    pub reset_after: Nanos,
    /// The limit's capacity (requests, or the token bucket's burst).
    pub capacity: u64,
}

impl CounterState {
    /// A counter's state from the verdict on a check-only (cost 0) charge of it.
    pub(super) fn checked(verdict: Verdict, capacity: u64) -> Self {
        Self {
            admits: verdict.admitted,
            remaining: if verdict.admitted {
                verdict.remaining
            } else {
                0
            },
            reset_after: verdict.reset_after,
            capacity,
        }
    }
}

impl Limiter {
    /// Explains a call of `descriptors` in `domain` against the current rules and store,
    /// charging nothing. The rules snapshot is `rules` (take it with [`Limiter::rules`]).
    pub async fn explain<'r>(
        &self,
        rules: &'r RuleSet,
        domain: &str,
        descriptors: &[Vec<(String, String)>],
    ) -> Explanation<'r> {
        let now = self.clock.now();
        let shadow = self.options.global_shadow_mode;
        let at = Peek {
            now,
            regions: self.regions.as_deref(),
        };
        explain_with(self.store.as_ref(), rules, domain, descriptors, at, shadow).await
    }
}

/// When, and with which region's portions, counters are peeked at.
#[derive(Clone, Copy)]
pub struct Peek<'a> {
    /// The time.
    pub now: Nanos,
    /// This region's portions of global limits (`None`: not one of several regions).
    pub regions: Option<&'a Regions>,
}

/// [`Limiter::explain`] against any store at `at` (`global_shadow_mode`: nothing refuses).
pub async fn explain_with<'r>(
    store: &dyn Store,
    rules: &'r RuleSet,
    domain: &str,
    descriptors: &[Vec<(String, String)>],
    at: Peek<'_>,
    global_shadow_mode: bool,
) -> Explanation<'r> {
    let now = at.now;
    let walks: Vec<Walk<'r>> = descriptors
        .iter()
        .map(|entries| {
            let borrowed: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            walk(rules, domain, &borrowed)
        })
        .collect();
    let replacers = replacers(&walks);
    let mut charges: Vec<(usize, usize, Charge)> = Vec::new();
    let mut explained: Vec<Explained<'r>> = descriptors
        .iter()
        .zip(walks)
        .enumerate()
        .map(|(d, (entries, walk))| {
            let limits = limit_states(
                rules,
                domain,
                entries,
                &walk,
                &replacers,
                at,
                |l, charge| charges.push((d, l, charge)),
            );
            let compat_differences = walk.compat_differences.clone();
            Explained {
                entries: entries.clone(),
                walk,
                limits,
                compat_differences,
            }
        })
        .collect();
    let store_error = read_counters(store, &charges, &mut explained, now).await;
    let would_refuse = !global_shadow_mode && would_refuse(&explained, store_error.is_some());
    note_refused_hits(&mut explained);
    Explanation {
        domain: domain.to_owned(),
        descriptors: explained,
        would_refuse,
        store_error,
    }
}

/// The limits of the node `walk` reached (none unless it is limited), each counted one handed
/// to `charge` as a check-only charge at `now` (cost 0, advisory: judged as a one-hit call,
/// nothing committed; a calendar limit's over the window `now` falls in) with its index among
/// the limits.
fn limit_states<'r>(
    rules: &'r RuleSet,
    domain: &str,
    entries: &[(String, String)],
    walk: &Walk<'r>,
    replacers: &[(Cow<'r, str>, Cow<'r, str>)],
    at: Peek<'_>,
    mut charge: impl FnMut(usize, Charge),
) -> Vec<LimitState<'r>> {
    let now = at.now;
    let mut limits = Vec::new();
    let (Reached::Limited, Some(node)) = (walk.reached, walk.node()) else {
        return limits;
    };
    let descriptor = Descriptor {
        entries: entries.to_vec(),
        ..Descriptor::default()
    };
    let found = rules
        .domain(domain)
        .and_then(|dm| dm.lookup(&borrow(entries)));
    let key = counter_key(domain, &descriptor, found.as_ref());
    for rule in &node.limits {
        let replaced_by = replaced_by(rule, replacers);
        let shards = node.shards.max(1);
        let mut region_portion = None;
        if replaced_by.is_empty()
            && let Some(limit) = rule.counted_at(now)
        {
            for (sub, part) in sub_counters(&limit, shards) {
                let key = key.finish_limit(rule.index, &limit, part);
                // A global limit is judged as the region's part of it, as a call is.
                let sub = match (rule.scope, at.regions) {
                    (Scope::Global, Some(regions)) => {
                        let portion = regions.counter_portion(key.as_bytes(), now);
                        region_portion.get_or_insert(portion);
                        crate::region::scaled(&sub, (portion * 1e6).floor() as u32)
                    }
                    _ => sub,
                };
                let check = Charge {
                    key,
                    limit: sub,
                    cost: 0,
                    gate: Gate::Advisory,
                    lease: 0,
                    descriptor: 0,
                };
                charge(limits.len(), check);
            }
        }
        limits.push(LimitState {
            rule,
            replaced_by,
            shards,
            counter: None,
            region_portion,
        });
    }
    limits
}

/// Reads every counter of `charges` (check-only) into `explained`; the store's error, if any.
async fn read_counters(
    store: &dyn Store,
    charges: &[(usize, usize, Charge)],
    explained: &mut [Explained<'_>],
    now: Nanos,
) -> Option<String> {
    if charges.is_empty() {
        return None;
    }
    let only: Vec<Charge> = charges.iter().map(|(_, _, c)| c.clone()).collect();
    match store.apply(&only, now).await {
        Ok(outcomes) => {
            for ((d, l, charge), outcome) in charges.iter().zip(outcomes) {
                let state = &mut explained[*d].limits[*l].counter;
                *state = Some(combine(*state, outcome.verdict, charge.limit.capacity()));
            }
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

/// Whether the call would be refused, as the limiter gates a call: shadow rules never refuse,
/// quota-mode rules only all together; without the store, a counted `failure_mode: deny` rule
/// refuses.
fn would_refuse(explained: &[Explained<'_>], store_failed: bool) -> bool {
    if store_failed {
        return explained.iter().any(|e| {
            e.walk.node().is_some_and(|n| {
                !n.shadow_mode && n.failure_mode == crate::rules::FailureMode::Deny
            }) && e.limits.iter().any(|l| l.replaced_by.is_empty())
        });
    }
    crate::store::gate::blocked(explained.iter().enumerate().filter_map(|(d, e)| {
        let counted: Vec<&CounterState> =
            e.limits.iter().filter_map(|l| l.counter.as_ref()).collect();
        (!counted.is_empty()).then(|| (gate(d, e.walk.node()), counted.iter().all(|c| c.admits)))
    }))
}

/// Where envoyproxy/ratelimit differs for a descriptor that is refused: it would still charge the
/// hits.
fn note_refused_hits(explained: &mut [Explained<'_>]) {
    for e in explained {
        if e.limits
            .iter()
            .any(|l| l.counter.is_some_and(|c| !c.admits))
        {
            e.compat_differences.push(
                "upstream would still add a refused call's hits to its counters (a client that \
                 retries stays locked out); sluice charges nothing for a refused call"
                    .to_owned(),
            );
        }
    }
}

/// How the denial of descriptor `d` gates the call, by its node's own modes (global quota mode
/// is not applied here); a quota-mode descriptor is its own quota-mode group.
fn gate(d: usize, node: Option<&crate::rules::Node>) -> Gate {
    node.map_or(Gate::Enforced, |n| {
        gate_of(n, n.quota_mode.then(|| quota_mode_group(d)))
    })
}

pub(super) fn borrow(entries: &[(String, String)]) -> Vec<(&str, &str)> {
    entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The sub-counters of a limit split into `shards`: each part's limit and its shard index
/// (`None`: counted whole, as when the limit is too small to split).
pub(super) fn sub_counters(limit: &Limit, shards: u32) -> Vec<(Limit, Option<u32>)> {
    let mut parts: Vec<(Limit, Option<u32>)> = Vec::new();
    for route in 0..u64::from(shards.max(1)) {
        match shards::split(limit, shards, route) {
            None => return vec![(*limit, None)],
            // `split` caps the shard count at the limit's smallest figure: routes repeat.
            Some((part, i)) if !parts.iter().any(|(_, j)| *j == Some(i)) => {
                parts.push((part, Some(i)))
            }
            Some(_) => {}
        }
    }
    parts
}

/// A limit's state from its sub-counters: a call is routed to one of them, so it may be
/// admitted when any admits; room adds up.
fn combine(known: Option<CounterState>, verdict: Verdict, capacity: u64) -> CounterState {
    let this = CounterState::checked(verdict, capacity);
    let Some(known) = known else {
        return this;
    };
    let admits = known.admits || this.admits;
    let reset_after = match (known.admits, this.admits) {
        (true, true) => known.reset_after.max(this.reset_after),
        (true, false) => known.reset_after,
        (false, true) => this.reset_after,
        (false, false) => known.reset_after.min(this.reset_after),
    };
    CounterState {
        admits,
        remaining: known.remaining + this.remaining,
        reset_after,
        capacity: known.capacity + capacity,
    }
}

/// For each limit name named in a `replaces` of a limit the call reached, who names it.
pub(super) fn replacers<'r>(walks: &[Walk<'r>]) -> Vec<(Cow<'r, str>, Cow<'r, str>)> {
    let mut found = Vec::new();
    for walk in walks {
        let Some(node) = walk.node() else { continue };
        for limit in &node.limits {
            let by = limit
                .name
                .as_deref()
                .map_or_else(|| Cow::Owned(node.full_key.clone()), Cow::Borrowed);
            for name in &limit.replaces {
                found.push((Cow::Borrowed(name.as_str()), by.clone()));
            }
        }
    }
    found
}

pub(super) fn replaced_by(
    rule: &LimitRule,
    replacers: &[(Cow<'_, str>, Cow<'_, str>)],
) -> Vec<String> {
    let Some(name) = rule.name.as_deref() else {
        return Vec::new();
    };
    replacers
        .iter()
        .filter(|(replaced, _)| replaced == name)
        .map(|(_, by)| by.to_string())
        .collect()
}

/// Parses a descriptor written `key=value[,key=value]` (outermost first; a value may hold `=`
/// but not `,`), within the sizes a call must respect.
pub fn parse_descriptor(text: &str) -> Result<Vec<(String, String)>, String> {
    let entries: Vec<(String, String)> = split_entries(text)
        .map(|entry| {
            let (key, value) = entry?;
            if key.len() > super::MAX_TEXT || value.len() > super::MAX_TEXT {
                return Err(format!("a key or value is over {} bytes", super::MAX_TEXT));
            }
            Ok((key.to_owned(), value.to_owned()))
        })
        .collect::<Result<_, _>>()?;
    if entries.len() > super::MAX_ENTRIES {
        return Err(format!(
            "{} entries in one descriptor (at most {})",
            entries.len(),
            super::MAX_ENTRIES
        ));
    }
    Ok(entries)
}
