//! A model of Envoy 1.40's quota client (the `rate_limit_quota` filter) for one domain, as
//! observed (see `shared/reference/rlqs.md`): a token bucket per assignment that refills
//! continuously at `tokens_per_fill` per whole second of `fill_interval`, keeps its fill ratio
//! when the strategy changes, starts full after a blanket rule, no assignment or an expiry, and
//! keeps its tokens (only the TTL restarts) when sent a strategy it takes for the same one.
//! Reports every bucket on a 5 s grid from its first bucket, with an immediate report for a new
//! bucket; after losing its stream it reconnects at the next grid tick.

use std::collections::BTreeMap;

use crate::clock::{Nanos, SECOND};

use crate::rlqs::assign::{Assignment, BucketId, Strategy, Usage};
use crate::rlqs::limits::REPORT_INTERVAL;

/// What one bucket of the modelled Envoy enforces right now.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Enforced {
    Allow,
    Deny,
    Tokens {
        max: f64,
        per_second: f64,
        tokens: f64,
        at: Nanos,
    },
}

/// One assignment in force.
#[derive(Debug, Clone, Copy)]
struct Assigned {
    strategy: Strategy,
    enforced: Enforced,
    expires: Nanos,
    /// Which server process sent it (see [`EnvoyModel::apply`]).
    generation: u64,
}

#[derive(Debug, Clone)]
struct ModelBucket {
    assigned: Option<Assigned>,
    allowed: u64,
    denied: u64,
    /// When the counts started (the bucket's creation or its last report).
    since: Nanos,
}

/// One Envoy's quota filter: its buckets, their assignments and its report schedule.
#[derive(Debug, Clone)]
pub struct EnvoyModel {
    /// `no_assignment_behavior`, also used after an assignment expires.
    fallback: Strategy,
    buckets: BTreeMap<BucketId, ModelBucket>,
    /// The next report (or reconnection) on its grid; `None` before the first bucket.
    next_tick: Option<Nanos>,
    /// How often it reports: Envoy 1.40's 5 s, or what a later Envoy is configured with.
    every: Nanos,
    /// Buckets made since the last report, waiting for their immediate report.
    fresh: Vec<BucketId>,
}

impl EnvoyModel {
    /// An Envoy with no buckets, applying `fallback` (`ALLOW_ALL` or `DENY_ALL`) where it has no
    /// assignment.
    pub fn new(fallback: Strategy) -> Self {
        EnvoyModel {
            fallback,
            buckets: BTreeMap::new(),
            next_tick: None,
            every: REPORT_INTERVAL,
            fresh: Vec::new(),
        }
    }

    /// The same Envoy reporting every `every` instead.
    pub fn reporting_every(mut self, every: Nanos) -> Self {
        self.every = every;
        self
    }

    /// `count` requests falling in `bucket` at `now`; returns how many were admitted. The first
    /// request of a new bucket makes it (and queues its immediate report, see
    /// [`EnvoyModel::immediate`]).
    pub fn request(&mut self, bucket: &BucketId, count: u64, now: Nanos) -> u64 {
        if count == 0 {
            return 0;
        }
        if !self.buckets.contains_key(bucket) {
            self.buckets.insert(
                bucket.clone(),
                ModelBucket {
                    assigned: None,
                    allowed: 0,
                    denied: 0,
                    since: now,
                },
            );
            self.fresh.push(bucket.clone());
            self.next_tick.get_or_insert(now + self.every);
        }
        let fallback = self.fallback;
        let Some(b) = self.buckets.get_mut(bucket) else {
            return 0;
        };
        if b.assigned.is_some_and(|a| now >= a.expires) {
            b.assigned = None;
        }
        let admitted = match b.assigned.as_mut().map(|a| &mut a.enforced) {
            None if fallback == Strategy::AllowAll => count,
            None => 0,
            Some(Enforced::Allow) => count,
            Some(Enforced::Deny) => 0,
            Some(Enforced::Tokens {
                max,
                per_second,
                tokens,
                at,
            }) => {
                refill(tokens, at, *max, *per_second, now);
                let admitted = (count as f64).min(tokens.floor()).max(0.0);
                *tokens -= admitted;
                admitted as u64
            }
        };
        b.allowed += admitted;
        b.denied += count - admitted;
        admitted
    }

    /// The immediate reports of buckets made since the last call (elapsed 0, their counts so
    /// far), to send on a stream that is up. A bucket made while the stream is down loses it.
    pub fn immediate(&mut self, now: Nanos) -> Vec<Usage> {
        let fresh = std::mem::take(&mut self.fresh);
        fresh
            .iter()
            .filter_map(|id| self.take_usage(id, now, true))
            .collect()
    }

    /// Whether a report (or, with the stream down, a reconnection and report) is due at `now`.
    pub fn due(&self, now: Nanos) -> bool {
        self.next_tick.is_some_and(|tick| now >= tick)
    }

    /// The report due at the grid tick: every bucket, counts since its last report, elapsed in
    /// whole seconds. Moves the grid on; drops pending immediate reports (this one covers them).
    pub fn report(&mut self, now: Nanos) -> Vec<Usage> {
        if let Some(tick) = self.next_tick.as_mut() {
            while *tick <= now {
                *tick += self.every;
            }
        }
        self.fresh.clear();
        let ids: Vec<BucketId> = self.buckets.keys().cloned().collect();
        ids.iter()
            .filter_map(|id| self.take_usage(id, now, false))
            .collect()
    }

    fn take_usage(&mut self, id: &BucketId, now: Nanos, immediate: bool) -> Option<Usage> {
        let b = self.buckets.get_mut(id)?;
        let elapsed = if immediate {
            0
        } else {
            (now.saturating_sub(b.since) / SECOND) * SECOND
        };
        let usage = Usage {
            bucket: id.clone(),
            elapsed,
            allowed: b.allowed,
            denied: b.denied,
        };
        (b.allowed, b.denied, b.since) = (0, 0, now);
        Some(usage)
    }

    /// Applies a server's answers at `now`, sent by server process `generation`. Returns the
    /// tokens the assignments added at once (a token bucket starting full, or one grown while
    /// keeping its fill ratio): the bound's slack.
    pub fn apply(&mut self, answers: &[Assignment], generation: u64, now: Nanos) -> f64 {
        let mut jump = 0.0;
        for answer in answers {
            match answer {
                Assignment::Abandon { bucket } => {
                    self.buckets.remove(bucket);
                }
                Assignment::Assign {
                    bucket,
                    strategy,
                    ttl_seconds,
                } => {
                    let Some(b) = self.buckets.get_mut(bucket) else {
                        continue; // Envoy ignores answers for buckets it does not know.
                    };
                    if b.assigned.is_some_and(|a| now >= a.expires) {
                        b.assigned = None;
                    }
                    let expires = now + *ttl_seconds as Nanos * SECOND;
                    jump += assign(b, *strategy, expires, generation, now);
                }
            }
        }
        jump
    }

    /// Calls `each` with every strategy in force now and the generation of the server process
    /// that sent it: [`EnvoyModel::held`] without copying bucket ids, for checks after every
    /// report of a large fleet.
    pub fn each_held(&self, now: Nanos, mut each: impl FnMut(Strategy, u64, Nanos)) {
        for b in self.buckets.values() {
            if let Some(a) = b.assigned.filter(|a| now < a.expires) {
                each(a.strategy, a.generation, a.expires);
            }
        }
    }

    /// What each bucket enforces now (`None`: no assignment, the fallback applies), with the
    /// generation of the server process that sent it.
    #[cfg(test)]
    pub fn held(&self, now: Nanos) -> Vec<(BucketId, Strategy, u64)> {
        self.buckets
            .iter()
            .filter_map(|(id, b)| {
                let a = b.assigned.filter(|a| now < a.expires)?;
                Some((id.clone(), a.strategy, a.generation))
            })
            .collect()
    }
}

/// Puts `strategy` in force on `b`; returns the tokens added at once.
fn assign(
    b: &mut ModelBucket,
    strategy: Strategy,
    expires: Nanos,
    generation: u64,
    now: Nanos,
) -> f64 {
    if let Some(a) = b
        .assigned
        .as_mut()
        .filter(|a| same_to_envoy(a.strategy, strategy))
    {
        // Only the TTL restarts; the old strategy (and its interval) stays in force.
        a.expires = expires;
        a.generation = generation;
        return 0.0;
    }
    let (enforced, jump) = match strategy {
        Strategy::AllowAll => (Enforced::Allow, 0.0),
        Strategy::DenyAll => (Enforced::Deny, 0.0),
        Strategy::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        } => {
            let max = max_tokens.get() as f64;
            let per_second = tokens_per_fill.get() as f64 / fill_interval_seconds.get() as f64;
            let (tokens, jump) = match b.assigned.map(|a| a.enforced) {
                Some(Enforced::Tokens {
                    max: old_max,
                    per_second: old_rate,
                    mut tokens,
                    mut at,
                }) => {
                    refill(&mut tokens, &mut at, old_max, old_rate, now);
                    let kept = (max * tokens / old_max).floor();
                    (kept, (kept - tokens).max(0.0))
                }
                _ => (max, max),
            };
            let enforced = Enforced::Tokens {
                max,
                per_second,
                tokens,
                at: now,
            };
            (enforced, jump)
        }
    };
    b.assigned = Some(Assigned {
        strategy,
        enforced,
        expires,
        generation,
    });
    jump
}

/// Envoy's test for "the same strategy": blanket rules by value, token buckets by `max_tokens`,
/// `tokens_per_fill` and the nanoseconds of the interval only (always 0 here).
fn same_to_envoy(a: Strategy, b: Strategy) -> bool {
    match (a, b) {
        (
            Strategy::TokenBucket {
                max_tokens: am,
                tokens_per_fill: at,
                ..
            },
            Strategy::TokenBucket {
                max_tokens: bm,
                tokens_per_fill: bt,
                ..
            },
        ) => am == bm && at == bt,
        (a, b) => a == b,
    }
}

fn refill(tokens: &mut f64, at: &mut Nanos, max: f64, per_second: f64, now: Nanos) {
    if now > *at {
        let seconds = (now - *at) as f64 / SECOND as f64;
        *tokens = (*tokens + seconds * per_second).min(max);
        *at = now;
    }
}

#[cfg(test)]
mod tests;
