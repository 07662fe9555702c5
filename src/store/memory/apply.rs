//! Applying a call's charges in the memory store: lock the shards of its counters in ascending
//! order, run the algorithms, and commit every new state only if the call is not blocked (a
//! descriptor whose charge crossed a limit recording every charge keeps its hits on those
//! limits whatever the call's fate).

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::shard::Shard;
use super::{FULL_RETRY, Fingerprint, MemoryStore};
use crate::algorithm::{self, State, Verdict};
use crate::clock::Nanos;
use crate::store::{Charge, ChargeOutcome, gate};

impl MemoryStore {
    /// The synchronous core of [`Store::apply`](crate::store::Store::apply).
    pub fn apply_now(&self, charges: &[Charge], now: Nanos) -> Vec<ChargeOutcome> {
        if let [charge] = charges {
            return vec![self.apply_one(charge, now)];
        }
        let fps: Vec<Fingerprint> = charges
            .iter()
            .map(|c| self.fingerprinter.of(c.key.as_bytes()))
            .collect();
        let shard_ids: Vec<usize> = fps.iter().map(|&fp| self.shard_of(fp)).collect();
        let mut order: Vec<usize> = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        // Lock in ascending order: every call does, so no two calls wait on each other in a cycle.
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, self.shards[i].lock())).collect();

        // Pending states, so a call naming one counter twice sees its own earlier charge, and
        // whether each took a new counter's room.
        let mut pending: Vec<(usize, State, bool)> = Vec::new();
        let mut outcomes = Vec::with_capacity(charges.len());
        for (i, charge) in charges.iter().enumerate() {
            let earlier = pending
                .iter()
                .rev()
                .find(|(j, _, _)| fps[*j] == fps[i])
                .map(|(_, s, _)| s);
            let held = match earlier {
                Some(_) => None,
                None => guard_for(&guards, shard_ids[i]).get(fps[i], charge.limit.algorithm),
            };
            let stored = earlier.or(held.as_deref());
            let (verdict, next) = algorithm::decide(&charge.limit, stored, now, charge.cost);
            let (outcome, next) = match next {
                // A new counter: only if there is room for it.
                Some(_) if stored.is_none() && !self.reserve() => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    (full(), None)
                }
                Some(next) => (
                    ChargeOutcome::judged(charge, stored, now, verdict),
                    Some((next, stored.is_none())),
                ),
                None => (ChargeOutcome::judged(charge, stored, now, verdict), None),
            };
            outcomes.push(outcome);
            drop(held);
            if let Some((next, reserved)) = next {
                pending.push((i, next, reserved));
            }
        }

        let blocked = gate::blocked(
            charges
                .iter()
                .zip(&outcomes)
                .map(|(c, o)| (c.gate, o.verdict.admitted)),
        );
        let kept = if blocked {
            kept_when_blocked(charges, &outcomes, &pending, &fps)
        } else {
            Vec::new()
        };
        for (p, (i, state, reserved)) in pending.into_iter().enumerate() {
            let charge = &charges[i];
            if blocked && !kept[p] {
                self.held
                    .fetch_sub(usize::from(reserved), Ordering::Relaxed);
                continue;
            }
            let idle_at = algorithm::idle_at(&charge.limit, &state);
            guard_for_mut(&mut guards, shard_ids[i]).put(fps[i], state, idle_at, self.journal);
        }
        outcomes
    }

    /// [`MemoryStore::apply_now`] for a call with one counter (the common case): one lock,
    /// no bookkeeping of pending states. A lone charge blocks its call exactly when denied, when
    /// `decide` returns no state unless its limit records every charge.
    pub(super) fn apply_one(&self, charge: &Charge, now: Nanos) -> ChargeOutcome {
        let fp = self.fingerprinter.of(charge.key.as_bytes());
        let mut shard = self.shards[self.shard_of(fp)].lock();
        let held = shard.get(fp, charge.limit.algorithm);
        let stored = held.as_deref();
        let (verdict, next) = algorithm::decide(&charge.limit, stored, now, charge.cost);
        let Some(next) = next else {
            return ChargeOutcome::judged(charge, stored, now, verdict);
        };
        if stored.is_none() && !self.reserve() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return full();
        }
        let outcome = ChargeOutcome::judged(charge, stored, now, verdict);
        drop(held);
        let idle_at = algorithm::idle_at(&charge.limit, &next);
        shard.put(fp, next, idle_at, self.journal);
        outcome
    }
}

/// Which `pending` states (charge index, state) a blocked call keeps: those of limits that record
/// every charge, of a descriptor that crossed one of them (a charge of it was denied yet left a
/// state: only a recording limit does), each counter's last such state (as apply.lua keeps it).
fn kept_when_blocked(
    charges: &[Charge],
    outcomes: &[ChargeOutcome],
    pending: &[(usize, State, bool)],
    fps: &[Fingerprint],
) -> Vec<bool> {
    let crossed = |descriptor: u32| {
        pending
            .iter()
            .any(|&(j, _, _)| charges[j].descriptor == descriptor && !outcomes[j].verdict.admitted)
    };
    let records = |i: usize| charges[i].limit.recording.records();
    pending
        .iter()
        .enumerate()
        .map(|(p, &(i, _, _))| {
            let last = !pending[p + 1..]
                .iter()
                .any(|&(j, _, _)| fps[j] == fps[i] && records(j));
            records(i) && last && crossed(charges[i].descriptor)
        })
        .collect()
}

/// The outcome of a charge refused because the store is full.
fn full() -> ChargeOutcome {
    ChargeOutcome {
        verdict: Verdict {
            admitted: false,
            remaining: 0,
            reset_after: FULL_RETRY,
        },
        available: 0,
    }
}

fn guard_for<'g>(guards: &'g [(usize, MutexGuard<'_, Shard>)], shard: usize) -> &'g Shard {
    let at = guards
        .binary_search_by_key(&shard, |(i, _)| *i)
        .unwrap_or_default();
    &guards[at].1
}

fn guard_for_mut<'g, 'm>(
    guards: &'g mut [(usize, MutexGuard<'m, Shard>)],
    shard: usize,
) -> &'g mut Shard {
    let at = guards
        .binary_search_by_key(&shard, |(i, _)| *i)
        .unwrap_or_default();
    &mut guards[at].1
}
