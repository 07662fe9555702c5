//! How much of each limit this replica may hand out: the whole of it alone, or, with replicas
//! sharing a store, the portion it last claimed while that is fresh, then its floor, then
//! nothing; and what it declares it holds when it claims again.

use std::collections::HashMap;

use crate::clock::{Nanos, SECOND};
use crate::rlqs::limits::{
    AT_REST_CLAIM_EVERY, CLAIM_EVERY, FLOOR_USABLE, MEMBER_FOR, PORTION_FRESH, PORTION_TTL,
};
use crate::store::Claimed;

use super::table::Key;

/// A portion that moved by less than this is not worth a re-split (nor a claim, at rest).
const MATERIAL: f64 = 0.01;

/// This replica's part of each limit.
pub(crate) enum Portions {
    /// One replica alone: the whole limit, always.
    Whole,
    /// Replicas sharing a store: what each claim got.
    Shared(Shared),
}

/// The last claim of each bucket.
#[derive(Default)]
pub(crate) struct Shared {
    by_bucket: HashMap<Key, Last>,
    /// What the last claim of each bucket asked.
    asked: HashMap<Key, Asked>,
    /// The most other replicas seen on any bucket lately: a new bucket's first guess of
    /// how many share it.
    others: u32,
}

/// One bucket's last successful claim.
#[derive(Debug, Clone, Copy)]
struct Last {
    claimed: Claimed,
    /// When the claim was sent, on this replica's clock (never after the store's own time of
    /// it, so this replica stops handing a portion out before the store frees it).
    at: Nanos,
    /// What this replica wants of the limit now: when it is less than the portion, the
    /// streams are split on it first, and only once they hold no more does a claim give the
    /// rest back (a claim never asks less than the streams hold).
    wanted: f64,
    /// How much longer than [`PORTION_TTL`] and [`MEMBER_FOR`] the claim reserved the portion
    /// and the floor (see [`Asked::reserve_longer`]).
    reserve_longer: Nanos,
}

impl Last {
    /// Until when the store reserves the portion for this replica.
    fn portion_until(&self) -> Nanos {
        self.at + PORTION_TTL + self.reserve_longer
    }

    /// Until when the store reserves the floor for this replica.
    fn floor_until(&self) -> Nanos {
        self.at + MEMBER_FOR.max(PORTION_TTL) + self.reserve_longer
    }
}

/// What a claim of a bucket asked: the streams' demand (requests a second), the fraction of
/// the limit wanted, and how much longer than [`PORTION_TTL`] and [`MEMBER_FOR`] it is
/// reserved (its shares live longer: streams reporting less often than every 5 s).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    pub demand: f64,
    pub wanted: f64,
    pub reserve_longer: Nanos,
}

impl Asked {
    /// How much longer than [`PORTION_TTL`] a claim sent now must reserve a bucket whose shares
    /// live `lives` from now (handed out now or already out): as long as one handed out while
    /// the portion is fresh lives, in whole seconds (so a bucket at rest asks the same).
    pub(crate) fn reserve_longer(lives: Nanos) -> Nanos {
        (PORTION_FRESH + lives)
            .saturating_sub(PORTION_TTL)
            .div_ceil(SECOND)
            .saturating_mul(SECOND)
    }
}

/// A claim granted what it asked if it fell short by no more than this (parts per million are
/// rounded by the store).
const GRANTED_WITHIN: f64 = 2e-6;

/// What this replica may hand out of a bucket now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fraction {
    /// Not known yet (no claim has answered for it): the bucket is held back, unanswered.
    Unknown,
    /// This fraction (0..=1) of the limit.
    Known(f64),
}

impl Portions {
    /// What may be handed out of bucket `key` at `now`: the portion within [`PORTION_FRESH`] of
    /// its claim, then the floor until [`FLOOR_USABLE`], then nothing (the store frees both
    /// a [`crate::rlqs::limits::HELD_FOR`] later, once every share they paid for has expired).
    pub(crate) fn fraction(&self, key: Key, now: Nanos) -> Fraction {
        let Portions::Shared(shared) = self else {
            return Fraction::Known(1.0);
        };
        let Some(last) = shared.by_bucket.get(&key) else {
            return Fraction::Unknown;
        };
        let c = &last.claimed;
        // A settling store granted nothing to a replica that held nothing (no floor either):
        // wait, as for a bucket not claimed yet, rather than refuse everything; and keep
        // waiting if no claim answers after it (the store went away), not refuse once stale.
        if c.settling && c.portion == 0.0 && c.floor == 0.0 {
            return Fraction::Unknown;
        }
        let age = now.saturating_sub(last.at);
        let may = if age < PORTION_FRESH {
            c.portion
        } else if age < FLOOR_USABLE {
            c.floor
        } else {
            0.0
        };
        Fraction::Known(may.min(last.wanted))
    }

    /// What this replica may still have out of bucket `key` at `now` (shares handed out under
    /// its portion or floor, live in Envoys): what it declares it holds when it claims.
    pub(crate) fn held(&self, key: Key, now: Nanos) -> f64 {
        let Portions::Shared(shared) = self else {
            return 1.0;
        };
        let Some(last) = shared.by_bucket.get(&key) else {
            return 0.0;
        };
        match now {
            t if t < last.portion_until() => last.claimed.portion,
            t if t < last.floor_until() => last.claimed.floor,
            _ => 0.0,
        }
    }

    /// Until when what may be handed out of bucket `key` at `now` stays reserved for this
    /// replica: the portion's reservation while it is fresh, then the floor's. Every share
    /// handed out expires before it ([`super::bucket::Bucket::ttl_for`]). `None` when nothing
    /// is reserved because nothing needs it: alone (the whole limit, always), or a bucket never
    /// claimed (a blanket rule takes no portion; a limit not claimed yet is held back).
    pub(crate) fn covers(&self, key: Key, now: Nanos) -> Option<Nanos> {
        let Portions::Shared(shared) = self else {
            return None;
        };
        let last = shared.by_bucket.get(&key)?;
        Some(if now.saturating_sub(last.at) < PORTION_FRESH {
            last.portion_until()
        } else {
            last.floor_until()
        })
    }

    /// The other replicas' demand and number for bucket `key`, as its last claim saw them (a
    /// bucket not claimed yet: none, and the most replicas seen lately).
    pub(crate) fn others(&self, key: Key) -> (f64, u32) {
        match self {
            Portions::Whole => (0.0, 0),
            Portions::Shared(shared) => shared
                .by_bucket
                .get(&key)
                .map_or((0.0, shared.others), |l| {
                    (l.claimed.others_demand, l.claimed.others)
                }),
        }
    }

    /// Records a claim sent at `at` for `keys` and answered with `answers` (in the same
    /// order); returns the buckets whose fraction moved materially, or whose reservation now
    /// lasts longer (shares whose TTL was cut to the last may be sent again, longer).
    pub(crate) fn claimed(&mut self, at: Nanos, keys: &[Key], answers: &[Claimed]) -> Vec<Key> {
        let before: Vec<Fraction> = keys.iter().map(|&k| self.fraction(k, at)).collect();
        let Portions::Shared(shared) = self else {
            return Vec::new();
        };
        let mut longer: Vec<Key> = (keys.iter())
            .filter(|&key| {
                let was = shared.by_bucket.get(key).map(|l| l.reserve_longer);
                let now = shared.asked.get(key).map(|a| a.reserve_longer);
                now > was.or(Some(0))
            })
            .copied()
            .collect();
        shared.others = answers.iter().map(|c| c.others).max().unwrap_or(0);
        for (&key, &claimed) in keys.iter().zip(answers) {
            let wanted = shared.by_bucket.get(&key).map_or(1.0, |l| l.wanted);
            let reserve_longer = shared.asked.get(&key).map_or(0, |a| a.reserve_longer);
            shared.by_bucket.insert(
                key,
                Last {
                    claimed,
                    at,
                    wanted,
                    reserve_longer,
                },
            );
        }
        let moved = (keys.iter().zip(before))
            .filter(|&(&key, old)| moved_materially(old, self.fraction(key, at)))
            .map(|(&key, _)| key);
        longer.extend(moved);
        longer.sort_unstable();
        longer.dedup();
        longer
    }

    /// Notes what this replica wants of bucket `key` before it claims again: its streams are
    /// split on no more than that from now on. `true` when that moved what they may hold.
    pub(crate) fn want(&mut self, key: Key, wanted: f64, now: Nanos) -> bool {
        let before = self.fraction(key, now);
        let Portions::Shared(shared) = self else {
            return false;
        };
        let Some(last) = shared.by_bucket.get_mut(&key) else {
            return false;
        };
        last.wanted = wanted;
        moved_materially(before, self.fraction(key, now))
    }

    /// Whether bucket `key`, whose limit is `rate` requests a second, may be left out of the
    /// claim sent at `now` that would ask `asked`: its last claim is younger than
    /// [`AT_REST_CLAIM_EVERY`] (half a claim period early, so a bucket at rest is claimed every
    /// other second, not every third), got all it asked from a store that was not settling, and
    /// neither the fraction wanted nor the demand (counted in the limit) moved materially since.
    /// Whatever moved is claimed at once; the others learn this replica's demand within
    /// [`AT_REST_CLAIM_EVERY`].
    pub(crate) fn at_rest(&self, key: Key, rate: f64, asked: Asked, now: Nanos) -> bool {
        let Portions::Shared(shared) = self else {
            return false;
        };
        let (Some(last), Some(before)) = (shared.by_bucket.get(&key), shared.asked.get(&key))
        else {
            return false;
        };
        let young = now.saturating_sub(last.at) + CLAIM_EVERY / 2 < AT_REST_CLAIM_EVERY;
        let granted = last.claimed.portion + GRANTED_WITHIN >= before.wanted;
        let still = (asked.wanted - before.wanted).abs() < MATERIAL
            && (rate > 0.0 && (asked.demand - before.demand).abs() < MATERIAL * rate)
            && asked.reserve_longer <= before.reserve_longer;
        young && granted && still && !last.claimed.settling
    }

    /// Notes what the claim about to be sent asks of bucket `key`.
    pub(crate) fn asking(&mut self, key: Key, asked: Asked) {
        if let Portions::Shared(shared) = self {
            shared.asked.insert(key, asked);
        }
    }

    /// Forgets a bucket the book forgot.
    pub(crate) fn forget(&mut self, key: Key) {
        if let Portions::Shared(shared) = self {
            shared.by_bucket.remove(&key);
            shared.asked.remove(&key);
        }
    }

    /// The buckets whose fraction moved between `then` and `now` with no claim between (the
    /// portion went stale, or the floor ran out): the clock's work while claims fail.
    pub(crate) fn lapsed(&self, then: Nanos, now: Nanos) -> Vec<Key> {
        let Portions::Shared(shared) = self else {
            return Vec::new();
        };
        (shared.by_bucket.keys())
            .filter(|&&key| moved_materially(self.fraction(key, then), self.fraction(key, now)))
            .copied()
            .collect()
    }
}

fn moved_materially(old: Fraction, new: Fraction) -> bool {
    match (old, new) {
        (Fraction::Known(a), Fraction::Known(b)) => {
            (a - b).abs() >= MATERIAL || (b == 0.0) != (a == 0.0)
        }
        (a, b) => a != b,
    }
}

/// The fraction of a limit of `rate` requests a second a replica whose streams ask `demand`
/// should claim, beside `others` replicas asking `others_demand`: everything it asks plus an
/// equal part of what nobody asks when the limit covers all, else its part in proportion to
/// demand. With no demand known anywhere, an equal part.
pub(crate) fn wanted(rate: f64, demand: f64, others_demand: f64, others: u32) -> f64 {
    let replicas = f64::from(others + 1);
    let total = demand + others_demand;
    let fraction = if rate <= 0.0 || total <= 0.0 {
        1.0 / replicas
    } else if total <= rate {
        (demand + (rate - total) / replicas) / rate
    } else {
        demand / total
    };
    fraction.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests;
