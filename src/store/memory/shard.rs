//! One shard of the memory store: two fingerprint tables (packed O(1) counters, and counters
//! whose state lives on the heap: sliding logs) and the list of counters changed since the
//! journal last wrote them.

use std::borrow::Cow;

use super::packed::{Packed, algorithm_of};
use super::spill::Spilled;
use super::table::Table;
use crate::algorithm::{Algorithm, State};
use crate::clock::Nanos;
use crate::store::Fingerprint;
use crate::store::saved::{self, CounterView, SavedCounter};

/// The counters of one shard. Every method runs under the shard's lock.
#[derive(Debug, Default)]
pub(super) struct Shard {
    packed: Table<Packed>,
    spilled: Table<Spilled>,
    /// Counters changed since the journal last wrote them (each once; stale entries are
    /// skipped), with the instant from which a sliding log's entries are not yet written.
    dirty: Vec<(Fingerprint, Nanos)>,
}

impl Shard {
    /// How many counters the shard holds.
    pub(super) fn len(&self) -> usize {
        self.packed.len() + self.spilled.len()
    }

    /// Slots allocated across both tables (what memory follows).
    pub(super) fn capacity(&self) -> usize {
        self.packed.capacity() + self.spilled.capacity()
    }

    /// The stored state of counter `fp`, a counter of `algorithm`.
    pub(super) fn get(&self, fp: Fingerprint, algorithm: Algorithm) -> Option<Cow<'_, State>> {
        if algorithm != Algorithm::SlidingLog
            && let Some(p) = self.packed.get(fp)
        {
            return Some(Cow::Owned(p.unpack()));
        }
        self.spilled.get(fp).map(|s| Cow::Owned(s.unpack()))
    }

    /// Stores `state` for counter `fp`, marking it for the journal when `journal` is on.
    /// Returns true when the counter is new to the shard.
    pub(super) fn put(
        &mut self,
        fp: Fingerprint,
        state: State,
        idle_at: Nanos,
        journal: bool,
    ) -> bool {
        match Packed::pack(&state, idle_at) {
            Some(mut packed) => {
                if let Some(slot) = self.packed.get_mut(fp) {
                    let was_dirty = slot.stamp.is_dirty();
                    packed.stamp.set_dirty(journal);
                    *slot = packed;
                    if journal && !was_dirty {
                        self.dirty.push((fp, 0));
                    }
                    return false;
                }
                // A sliding window whose counts shrank back below 32 bits moves back.
                let moved = self.spilled.len() > 0 && self.spilled.remove(fp).is_some();
                packed.stamp.set_dirty(journal);
                self.packed.insert(fp, packed);
                if journal {
                    self.dirty.push((fp, 0));
                }
                !moved
            }
            None => {
                let mut spilled = Spilled::pack(&state, idle_at);
                spilled.stamp.set_dirty(journal);
                if let Some(slot) = self.spilled.get_mut(fp) {
                    if journal && !slot.stamp.is_dirty() {
                        // Everything up to the newest entry held now was written already.
                        self.dirty.push((fp, slot.newest()));
                    }
                    *slot = spilled;
                    return false;
                }
                let moved = self.packed.len() > 0 && self.packed.remove(fp).is_some();
                self.spilled.insert(fp, spilled);
                if journal {
                    self.dirty.push((fp, 0));
                }
                !moved
            }
        }
    }

    /// Whether counter `fp` is held and not idle at `now`.
    pub(super) fn is_active(&self, fp: Fingerprint, now: Nanos) -> bool {
        self.packed.get(fp).is_some_and(|p| !p.stamp.is_idle(now))
            || self.spilled.get(fp).is_some_and(|s| !s.stamp.is_idle(now))
    }

    /// Removes counter `fp` (either table); whether it was held. A journal entry left for it
    /// is skipped when drained (the counter is no longer there).
    pub(super) fn remove(&mut self, fp: Fingerprint) -> bool {
        let packed = self.packed.len() > 0 && self.packed.remove(fp).is_some();
        let spilled = self.spilled.len() > 0 && self.spilled.remove(fp).is_some();
        packed || spilled
    }

    /// Drops the counters idle at `now`, giving memory back when most of a table emptied.
    /// Returns how many were dropped.
    pub(super) fn sweep(&mut self, now: Nanos) -> usize {
        let removed = self.packed.retain(|_, p| !p.stamp.is_idle(now))
            + self.spilled.retain(|_, s| !s.stamp.is_idle(now));
        self.packed.shrink();
        self.spilled.shrink();
        if self.dirty.is_empty() && self.dirty.capacity() > 1024 {
            self.dirty = Vec::new();
        }
        removed
    }

    /// Hands every counter changed since the last call to `visit` (sliding logs: only their
    /// entries not yet written), and marks them written.
    pub(super) fn drain_dirty(&mut self, visit: &mut dyn FnMut(CounterView<'_>)) {
        let changed = std::mem::take(&mut self.dirty);
        for &(fp, log_from) in &changed {
            let (state, idle_at) = if let Some(p) = self.packed.get_mut(fp) {
                if !p.stamp.is_dirty() {
                    continue;
                }
                p.stamp.set_dirty(false);
                (p.unpack(), p.stamp.idle_at())
            } else if let Some(s) = self.spilled.get_mut(fp) {
                if !s.stamp.is_dirty() {
                    continue;
                }
                s.stamp.set_dirty(false);
                (s.unpack(), s.stamp.idle_at())
            } else {
                continue;
            };
            visit(CounterView {
                fingerprint: fp,
                state: &state,
                idle_at,
                log_from,
            });
        }
        self.dirty = changed;
        self.dirty.clear();
    }

    /// Hands every counter not idle at `now` to `visit`, whole (for a snapshot).
    pub(super) fn visit_active(&self, now: Nanos, visit: &mut dyn FnMut(CounterView<'_>)) {
        let packed = self
            .packed
            .iter()
            .filter(|(_, p)| !p.stamp.is_idle(now))
            .map(|(fp, p)| (fp, p.unpack(), p.stamp.idle_at()));
        let spilled = self
            .spilled
            .iter()
            .filter(|(_, s)| !s.stamp.is_idle(now))
            .map(|(fp, s)| (fp, s.unpack(), s.stamp.idle_at()));
        for (fingerprint, state, idle_at) in packed.chain(spilled) {
            visit(CounterView {
                fingerprint,
                state: &state,
                idle_at,
                log_from: 0,
            });
        }
    }

    /// Combines a counter read from disk with what the shard holds (see [`saved::combine`]).
    /// Returns true when the counter is new to the shard.
    pub(super) fn restore(&mut self, fp: Fingerprint, saved: SavedCounter) -> bool {
        let SavedCounter { state, idle_at, .. } = saved;
        let algorithm = algorithm_of(&state);
        let (state, idle_at, new) = match self.get(fp, algorithm) {
            Some(held) => {
                let mut held = held.into_owned();
                let held_idle = self.idle_at(fp).unwrap_or(0);
                let idle = saved::combine(&mut held, held_idle, state, idle_at);
                (held, idle, false)
            }
            None => (state, idle_at, true),
        };
        self.put(fp, state, idle_at, false);
        new
    }

    fn idle_at(&self, fp: Fingerprint) -> Option<Nanos> {
        self.packed
            .get(fp)
            .map(|p| p.stamp.idle_at())
            .or_else(|| self.spilled.get(fp).map(|s| s.stamp.idle_at()))
    }
}
