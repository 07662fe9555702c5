//! Leases (`lease: N` on a rule): a replica takes up to N hits of a shared counter from Redis
//! in one script run and admits later calls from them without a round trip.
//!
//! A refill is asked for by the call that finds less than half the lease held, so concurrent
//! calls go on being answered from the rest while it is in flight; a refill that fails (Redis
//! away) is answered from the held hits after all.
//!
//! The hits are counted in Redis when they are leased, before they are used, so replicas
//! together never admit more than the limit: a held hit is admitted only before the end of
//! the window it was counted in (the lease expires then, by the replica's monotonic clock,
//! measured from when the call was sent, less 0.1 % for clock-rate drift), and within a fixed
//! or sliding window a hit counted early weighs exactly as one counted when it is used. What
//! a lease gives up is the other direction: hits leased and not used before the window ends
//! are lost, at most N − 1 per replica per counter and window (one refill in flight per
//! counter per replica, none in the window's last 0.1 %), and a lease whose reply took d
//! ends d early (its hits lapse sooner; another lease may follow in that window). A held
//! hit's answer reports what Redis had left at the lease plus the hits still held.
//! Logs and token buckets take no leases (rules refuse them): an early-counted hit would leave
//! their count early. The property tests in `lease/tests.rs` hold the bounds against several
//! replicas, late replies, failed calls and window changes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::key_shards::KeyShards;

use super::script::Answered;
use crate::algorithm::{Algorithm, Limit, Verdict};
use crate::clock::Nanos;
use crate::store::{Charge, ChargeOutcome};

/// The most counters a store holds leases on (about 150 bytes each with the key); past it a
/// new counter is applied by Redis on every call until expired leases are swept.
pub const MAX_LEASED_COUNTERS: usize = 65_536;

const SHARDS: usize = 16;

/// Hits held for one counter.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The limit they were leased under (a reload that changes it starts afresh).
    limit: Limit,
    /// Leased hits not used yet.
    tokens: u64,
    /// Until when they may be admitted (cache clock): before Redis's window ends.
    until: Nanos,
    /// When that window ends, as measured from the call that leased them. Between `until` and
    /// then no new lease is taken: its hits would lapse at once, counted and unused.
    end: Nanos,
    /// When the counter is back to its full allowance if no more calls arrive, as Redis said.
    reset_at: Nanos,
    /// What Redis had left after the last lease.
    remaining: u64,
    /// A call asked for a refill and has not settled until then (one refill at a time, so a
    /// replica holds at most N − 1 hits; a call dropped mid-flight frees it at its timeout).
    refilling_until: Nanos,
    /// When that call was sent: only it ends its refill (a later one may have started after
    /// a timeout).
    refill_sent_at: Nanos,
}

impl Held {
    fn new(limit: Limit) -> Self {
        Self {
            limit,
            tokens: 0,
            until: 0,
            end: 0,
            reset_at: 0,
            remaining: 0,
            refilling_until: 0,
            refill_sent_at: 0,
        }
    }

    /// Hits usable at `now`.
    fn live(&self, now: Nanos) -> u64 {
        if now < self.until { self.tokens } else { 0 }
    }

    /// Ends the refill started by the call sent at `sent_at`, if it is still the one in flight.
    fn end_refill(&mut self, sent_at: Nanos) {
        if self.refill_sent_at == sent_at {
            self.refilling_until = 0;
        }
    }

    /// Whether a call at `now` may start a refill: none in flight, and not in the window's
    /// last moments (a lease taken there would lapse at once).
    fn may_refill(&self, now: Nanos) -> bool {
        self.refilling_until <= now && !(self.until..self.end).contains(&now)
    }

    /// Whether a call of `cost` at `now` can be answered from held hits: enough are held, and
    /// (with `refill_first`) either at least half the lease would stay or a refill cannot
    /// start now. Below half, the call goes to Redis for a refill while the rest still answer
    /// concurrent calls, so a busy counter is rarely empty while its refill is in flight.
    fn answers(&self, cost: u64, lease: u32, now: Nanos, refill_first: bool) -> bool {
        let live = self.live(now);
        live >= cost.max(1)
            && (!refill_first || 2 * (live - cost) >= u64::from(lease) || !self.may_refill(now))
    }
}

/// The leases a Redis store holds.
#[derive(Debug)]
pub struct Leases {
    shards: KeyShards<Held>,
    /// Calls answered from held hits so far.
    answered: AtomicU64,
}

impl Default for Leases {
    fn default() -> Self {
        Self::new(MAX_LEASED_COUNTERS)
    }
}

impl Leases {
    /// Room for leases on about `capacity` counters.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: KeyShards::new(SHARDS, capacity),
            answered: AtomicU64::new(0),
        }
    }

    /// Whether any charge of a call may take a lease.
    pub fn wanted(charges: &[Charge]) -> bool {
        charges.iter().any(|c| c.lease > 1)
    }

    /// The call answered from held hits at `now`, if every charge has a lease holding enough
    /// (and, with `refill_first`, none is due a refill); then the hits are used. Otherwise
    /// nothing is used and `None` says: ask Redis.
    pub fn answer(
        &self,
        charges: &[Charge],
        now: Nanos,
        refill_first: bool,
    ) -> Option<Vec<ChargeOutcome>> {
        if charges.iter().any(|c| c.lease <= 1) {
            return None;
        }
        let mut outcomes = Vec::with_capacity(charges.len());
        // What was taken, from which lease (its `until` tells a refill apart), to give back.
        let mut taken: Vec<(usize, Nanos)> = Vec::with_capacity(charges.len());
        for (i, charge) in charges.iter().enumerate() {
            let key = charge.key.as_bytes();
            let mut shard = self.shards.shard(key).lock();
            let held = shard.get_mut(key).filter(|h| {
                h.limit == charge.limit && h.answers(charge.cost, charge.lease, now, refill_first)
            });
            let Some(held) = held else {
                drop(shard);
                self.give_back(charges, &taken);
                return None;
            };
            held.tokens -= charge.cost;
            taken.push((i, held.until));
            let remaining = held.remaining.saturating_add(held.tokens);
            outcomes.push(ChargeOutcome {
                verdict: Verdict {
                    admitted: true,
                    remaining,
                    reset_after: held.reset_at.saturating_sub(now).max(1),
                },
                available: remaining.saturating_add(charge.cost),
            });
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
        Some(outcomes)
    }

    /// Returns hits taken by a call that could not be answered whole, to the lease they came
    /// from (a lease refilled meanwhile may be another window's: they are dropped then).
    fn give_back(&self, charges: &[Charge], taken: &[(usize, Nanos)]) {
        for &(i, until) in taken {
            let charge = &charges[i];
            let key = charge.key.as_bytes();
            if let Some(held) = self.shards.shard(key).lock().get_mut(key)
                && held.until == until
            {
                held.tokens += charge.cost;
            }
        }
    }

    /// The extra hits each charge of a call going to Redis at `sent_at` should ask for (0 for
    /// most); a charge asking starts its counter's refill, in flight until `deadline`.
    pub fn extras(&self, charges: &[Charge], sent_at: Nanos, deadline: Nanos) -> Vec<u64> {
        charges
            .iter()
            .enumerate()
            .map(|(i, charge)| {
                let key = charge.key.as_bytes();
                // A counter named twice in a call: hits leased for the first could deny the second.
                let repeated = charges
                    .iter()
                    .enumerate()
                    .any(|(j, c)| j != i && c.key.as_bytes() == key);
                if charge.lease <= 1 || charge.cost == 0 || repeated {
                    return 0;
                }
                self.start_refill(charge, sent_at, deadline)
            })
            .collect()
    }

    fn start_refill(&self, charge: &Charge, sent_at: Nanos, deadline: Nanos) -> u64 {
        let key = charge.key.as_bytes();
        let mut shard = self.shards.shard(key).lock();
        if !shard.contains_key(key) {
            if shard.len() >= self.shards.per_shard {
                shard.retain(|_, h| h.live(sent_at) > 0 || h.refilling_until > sent_at);
            }
            if shard.len() >= self.shards.per_shard {
                return 0;
            }
            shard.insert(key.into(), Held::new(charge.limit));
        }
        let held = shard.get_mut(key).expect("inserted above");
        if held.limit != charge.limit {
            *held = Held::new(charge.limit);
        }
        if !held.may_refill(sent_at) {
            return 0;
        }
        let extra = u64::from(charge.lease)
            .saturating_sub(charge.cost)
            .saturating_sub(held.live(sent_at));
        if extra > 0 {
            held.refilling_until = deadline;
            held.refill_sent_at = sent_at;
        }
        extra
    }

    /// Takes in Redis's answers to a call sent at `sent_at` with `extras`: leased hits join their
    /// leases, refills end, and each outcome reports the hits held besides Redis's remaining.
    pub fn settle(
        &self,
        charges: &[Charge],
        extras: &[u64],
        answered: Vec<Answered>,
        sent_at: Nanos,
    ) -> Vec<ChargeOutcome> {
        charges
            .iter()
            .zip(extras)
            .zip(answered)
            .map(|((charge, &extra), a)| {
                if extra == 0 {
                    return a.outcome;
                }
                let key = charge.key.as_bytes();
                let mut shard = self.shards.shard(key).lock();
                let Some(held) = shard.get_mut(key).filter(|h| h.limit == charge.limit) else {
                    return a.outcome;
                };
                held.end_refill(sent_at);
                let mut outcome = a.outcome;
                if a.leased > 0 && outcome.verdict.admitted {
                    add_leased(held, &charge.limit, &outcome.verdict, a.leased, sent_at);
                    outcome.verdict.remaining =
                        outcome.verdict.remaining.saturating_add(held.live(sent_at));
                }
                outcome
            })
            .collect()
    }

    /// Ends the refills a failed call sent at `sent_at` started.
    pub fn abandon(&self, charges: &[Charge], extras: &[u64], sent_at: Nanos) {
        for (charge, _) in charges.iter().zip(extras).filter(|(_, e)| **e > 0) {
            let key = charge.key.as_bytes();
            if let Some(held) = self.shards.shard(key).lock().get_mut(key) {
                held.end_refill(sent_at);
            }
        }
    }

    /// Hits held for the counter of `charge` usable at `now` (`None`: no lease on it).
    pub fn held(&self, charge: &Charge, now: Nanos) -> Option<u64> {
        let key = charge.key.as_bytes();
        let shard = self.shards.shard(key).lock();
        shard
            .get(key)
            .filter(|h| h.limit == charge.limit)
            .map(|h| h.live(now))
    }

    /// Gives up the leases of `charges`' counters (an admin reset: their hits were counted in
    /// the Redis counter that is being deleted); returns the hits that were still usable at
    /// `now`. A refill in flight settles into nothing: its lease is gone.
    pub fn forget(&self, charges: &[Charge], now: Nanos) -> u64 {
        charges
            .iter()
            .filter_map(|charge| {
                let key = charge.key.as_bytes();
                self.shards.shard(key).lock().remove(key)
            })
            .map(|held| held.live(now))
            .sum()
    }

    /// Drops leases with nothing usable and no refill in flight at `now`.
    pub fn sweep(&self, now: Nanos) {
        for shard in self.shards.all() {
            shard
                .lock()
                .retain(|_, h| h.live(now) > 0 || h.refilling_until > now);
        }
    }

    /// Counters with a lease now.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Calls answered from held hits so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

/// Adds `leased` hits, leased at `sent_at` with Redis's `verdict`, to `held`.
fn add_leased(held: &mut Held, limit: &Limit, verdict: &Verdict, leased: u64, sent_at: Nanos) {
    let end = window_end(limit, verdict.reset_after);
    // 0.1 % short of the window's end: no replica clock drifts that far from Redis's.
    let until = sent_at + end - end / 1000;
    if sent_at >= held.until || until >= held.until + limit.window / 2 {
        // Nothing held, or held from the window before: those hits are that window's.
        held.tokens = leased;
        held.until = until;
        held.end = sent_at + end;
    } else {
        // The same window, as seen by two calls: the earlier end is the safe one.
        held.tokens += leased;
        held.until = held.until.min(until);
        held.end = held.end.min(sent_at + end);
    }
    held.remaining = verdict.remaining;
    held.reset_at = sent_at + verdict.reset_after;
}

/// Time from the call to the end of the window its admitted hits were counted in, from the
/// reset Redis reported: a fixed window resets at its end; a sliding window with hits in its
/// current window is full again one window after that window ends.
fn window_end(limit: &Limit, reset_after: Nanos) -> Nanos {
    match limit.algorithm {
        Algorithm::SlidingWindow => reset_after.saturating_sub(limit.window),
        _ => reset_after,
    }
}

#[cfg(test)]
mod tests;
