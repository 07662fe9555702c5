//! A descriptor's counters, for the admin listener: read shard by shard (check-only, cost-0
//! advisory charges, as `explain` reads them) or reset (every limit of the node the descriptor
//! reaches, every shard). The descriptor is matched as a call's is (`rules::walk`, the same
//! counter keys as `plan.rs`); nothing is recorded in the metrics.

use super::Limiter;
use super::explain::{CounterState, borrow, replaced_by, replacers, sub_counters};
use super::plan::counter_key;
use super::request::Descriptor;
use crate::algorithm::{Limit, UNBOUNDED};
use crate::clock::Nanos;
use crate::rules::{LimitRule, Node, Reached, RuleSet, walk};
use crate::store::{Charge, Cleared, Gate, StoreError};

/// Why a descriptor's counters could not be read or reset.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CountersError {
    /// No rules have arrived yet (xDS before its first accepted response).
    #[error("no rate limit configuration loaded")]
    NoRules,
    /// No rule limits the descriptor: the sentence says why (the domain is not loaded, no node
    /// matches, the node has no limit, …).
    #[error("{0}")]
    NotLimited(String),
    /// The counter store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The counters of one descriptor.
#[derive(Debug, Clone)]
pub struct Counters<'r> {
    /// The domain.
    pub domain: String,
    /// The descriptor's entries.
    pub entries: Vec<(String, String)>,
    /// The rule node it reaches.
    pub node: &'r Node,
    /// The instant they were read (or reset) at.
    pub now: Nanos,
    /// The node's limits, in order.
    pub limits: Vec<LimitCounters<'r>>,
}

/// One limit of the node and its counters.
#[derive(Debug, Clone)]
pub struct LimitCounters<'r> {
    /// The limit as the rules say it.
    pub rule: &'r LimitRule,
    /// The limit as counted now (a calendar limit's: the window `now` falls in); `None` for an
    /// `unlimited` one, which has no counter.
    pub limit: Option<Limit>,
    /// The names of limits of the same descriptor that replace it in a call (it is then not
    /// charged; its counters are still shown and reset).
    pub replaced_by: Vec<String>,
    /// Its counters: one, or one per shard (`shards:`).
    pub counters: Vec<ShardCounter>,
}

/// One counter (a whole limit's, or one shard's).
#[derive(Debug, Clone, Copy)]
pub struct ShardCounter {
    /// The shard, when the limit is split.
    pub shard: Option<u32>,
    /// Its share of the limit.
    pub limit: Limit,
    /// Its state now, judged for a one-hit call (`None` once reset).
    pub state: Option<CounterState>,
    /// The hits it holds now, past its limit too (a limit that records every charge); `None`
    /// once reset, or past what a counter can hold.
    pub used: Option<u64>,
    /// Hits this replica holds leased on it (a shared store's `lease:` rules).
    pub leased: Option<u64>,
}

/// What a reset cleared.
#[derive(Debug, Clone)]
pub struct Reset<'r> {
    /// The counters that were reset (no states).
    pub counters: Counters<'r>,
    /// What the store removed.
    pub cleared: Cleared,
}

impl Limiter {
    /// The counters `entries` reaches in `domain` (take `rules` with [`Limiter::rules`]), read
    /// without charging anything, with the hits this replica holds leased on each.
    pub async fn counters<'r>(
        &self,
        rules: &'r RuleSet,
        domain: &str,
        entries: &[(String, String)],
    ) -> Result<Counters<'r>, CountersError> {
        let now = self.clock.now();
        let (mut counters, mut charges) = plan(rules, domain, entries, now)?;
        // Each counter read twice: as a one-hit call finds it, and under its limit unbounded,
        // whose remaining is that bound less the hits the counter holds.
        let n = charges.len();
        charges.extend_from_within(..);
        for read in &mut charges[n..] {
            read.limit = read.limit.unbounded();
        }
        let outcomes = match charges.as_slice() {
            [] => Vec::new(),
            charges => self.store.apply(charges, now).await?,
        };
        let (checked, held) = outcomes.split_at(n);
        let mut read = charges.iter().zip(checked).zip(held);
        for counter in counters.limits.iter_mut().flat_map(|l| &mut l.counters) {
            if let Some(((charge, outcome), held)) = read.next() {
                counter.state = Some(CounterState::checked(
                    outcome.verdict,
                    counter.limit.capacity(),
                ));
                counter.used = held
                    .verdict
                    .admitted
                    .then(|| UNBOUNDED - held.verdict.remaining.min(UNBOUNDED));
                counter.leased = self.store.leased(charge, now);
            }
        }
        Ok(counters)
    }

    /// Resets every counter `entries` reaches in `domain`: every limit of the node (replaced
    /// ones too), every shard; leases taken back; persisted before this returns.
    pub async fn reset_counters<'r>(
        &self,
        rules: &'r RuleSet,
        domain: &str,
        entries: &[(String, String)],
    ) -> Result<Reset<'r>, CountersError> {
        let now = self.clock.now();
        let (counters, charges) = plan(rules, domain, entries, now)?;
        let cleared = match charges.as_slice() {
            [] => Cleared::default(),
            charges => self.store.reset(charges, now).await?,
        };
        Ok(Reset { counters, cleared })
    }
}

/// The counters of the node `entries` reaches, and one check-only charge per counter (in the
/// order of the limits, then the shards).
fn plan<'r>(
    rules: &'r RuleSet,
    domain: &str,
    entries: &[(String, String)],
    now: Nanos,
) -> Result<(Counters<'r>, Vec<Charge>), CountersError> {
    if rules.awaiting {
        return Err(CountersError::NoRules);
    }
    let borrowed = borrow(entries);
    let walked = walk(rules, domain, &borrowed);
    let descriptor = entries
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let node = match (walked.reached, walked.node()) {
        (Reached::Limited, Some(node)) => node,
        (Reached::UnknownDomain, _) => {
            return Err(CountersError::NotLimited(format!(
                "no rule limits domain '{domain}': it is not loaded"
            )));
        }
        (reached, _) => {
            return Err(CountersError::NotLimited(format!(
                "no rule limits descriptor '{descriptor}' in domain '{domain}': {}",
                reached.describe(&walked.steps)
            )));
        }
    };
    let found = rules.domain(domain).and_then(|d| d.lookup(&borrowed));
    let call = Descriptor {
        entries: entries.to_vec(),
        ..Descriptor::default()
    };
    let key = counter_key(domain, &call, found.as_ref());
    let replacers = replacers(std::slice::from_ref(&walked));
    let mut charges = Vec::new();
    let limits = node
        .limits
        .iter()
        .map(|rule| {
            let limit = rule.counted_at(now);
            let counters = limit.map_or_else(Vec::new, |limit| {
                sub_counters(&limit, node.shards.max(1))
                    .into_iter()
                    .map(|(part, shard)| {
                        charges.push(Charge {
                            key: key.finish_limit(rule.index, &limit, shard),
                            limit: part,
                            cost: 0,
                            gate: Gate::Advisory,
                            lease: 0,
                            descriptor: 0,
                        });
                        ShardCounter {
                            shard,
                            limit: part,
                            state: None,
                            used: None,
                            leased: None,
                        }
                    })
                    .collect()
            });
            LimitCounters {
                rule,
                limit,
                replaced_by: replaced_by(rule, &replacers),
                counters,
            }
        })
        .collect();
    let counters = Counters {
        domain: domain.to_owned(),
        entries: entries.to_vec(),
        node,
        now,
        limits,
    };
    Ok((counters, charges))
}
