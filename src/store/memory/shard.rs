//! One shard of the memory store: packed counters, wide counters (sliding logs), and the list
//! of counters changed since the journal last wrote them.

use std::borrow::Cow;
use std::collections::HashMap;

use super::packed::{Packed, Stamp, algorithm_of};
use crate::algorithm::{Algorithm, State};
use crate::clock::Nanos;
use crate::store::CounterKey;
use crate::store::saved::{self, CounterView, SavedCounter};

pub(super) type Hasher = foldhash::fast::RandomState;

/// A counter whose state does not pack into two words (a sliding log).
#[derive(Debug)]
struct Wide {
    state: State,
    stamp: Stamp,
    /// Sliding log: entries before this instant are in the journal already.
    written_to: Nanos,
}

/// The counters of one shard. Every method runs under the shard's lock.
#[derive(Debug, Default)]
pub(super) struct Shard {
    packed: HashMap<CounterKey, Packed, Hasher>,
    wide: HashMap<CounterKey, Wide, Hasher>,
    /// Counters changed since the journal last wrote them (each once; stale entries are skipped).
    dirty: Vec<CounterKey>,
}

/// The newest instant in a log state.
fn newest(state: &State) -> Nanos {
    match state {
        State::Log { entries, .. } => entries.back().map_or(0, |e| e.at),
        _ => 0,
    }
}

impl Shard {
    /// How many counters the shard holds.
    pub(super) fn len(&self) -> usize {
        self.packed.len() + self.wide.len()
    }

    /// Slots allocated across both tables (what memory follows).
    pub(super) fn capacity(&self) -> usize {
        self.packed.capacity() + self.wide.capacity()
    }

    /// The stored state of `key`, a counter of `algorithm`.
    pub(super) fn get(&self, key: &CounterKey, algorithm: Algorithm) -> Option<Cow<'_, State>> {
        if algorithm != Algorithm::SlidingLog
            && let Some(p) = self.packed.get(key)
        {
            return Some(Cow::Owned(p.unpack()));
        }
        self.wide.get(key).map(|w| Cow::Borrowed(&w.state))
    }

    /// Stores `state` for `key`, marking it for the journal when `journal` is on. Returns true
    /// when the key is new to the shard.
    pub(super) fn put(
        &mut self,
        key: &CounterKey,
        state: State,
        idle_at: Nanos,
        journal: bool,
    ) -> bool {
        match Packed::pack(&state, idle_at) {
            Some(mut packed) => {
                if let Some(slot) = self.packed.get_mut(key) {
                    let was_dirty = slot.stamp.is_dirty();
                    packed.stamp.set_dirty(journal);
                    *slot = packed;
                    if journal && !was_dirty {
                        self.dirty.push(key.clone());
                    }
                    return false;
                }
                // A sliding window whose counts shrank back below 32 bits moves back.
                let moved = !self.wide.is_empty() && self.wide.remove(key).is_some();
                packed.stamp.set_dirty(journal);
                self.packed.insert(key.clone(), packed);
                if journal {
                    self.dirty.push(key.clone());
                }
                !moved
            }
            None => {
                let mut stamp = Stamp::new(idle_at, algorithm_of(&state));
                stamp.set_dirty(journal);
                if let Some(slot) = self.wide.get_mut(key) {
                    let was_dirty = slot.stamp.is_dirty();
                    slot.state = state;
                    slot.stamp = stamp;
                    if journal && !was_dirty {
                        self.dirty.push(key.clone());
                    }
                    return false;
                }
                let moved = !self.packed.is_empty() && self.packed.remove(key).is_some();
                let wide = Wide {
                    state,
                    stamp,
                    written_to: 0,
                };
                self.wide.insert(key.clone(), wide);
                if journal {
                    self.dirty.push(key.clone());
                }
                !moved
            }
        }
    }

    /// Drops the counters idle at `now`, giving memory back when most of a table emptied.
    /// Returns how many were dropped.
    pub(super) fn sweep(&mut self, now: Nanos) -> usize {
        let before = self.len();
        self.packed.retain(|_, p| !p.stamp.is_idle(now));
        self.wide.retain(|_, w| !w.stamp.is_idle(now));
        shrink(&mut self.packed);
        shrink(&mut self.wide);
        if self.dirty.is_empty() && self.dirty.capacity() > 1024 {
            self.dirty = Vec::new();
        }
        before - self.len()
    }

    /// Hands every counter changed since the last call to `visit` (sliding logs: only their
    /// entries not yet written), and marks them written.
    pub(super) fn drain_dirty(&mut self, visit: &mut dyn FnMut(CounterView<'_>)) {
        let keys = std::mem::take(&mut self.dirty);
        for key in &keys {
            if let Some(p) = self.packed.get_mut(key) {
                if p.stamp.is_dirty() {
                    p.stamp.set_dirty(false);
                    let state = p.unpack();
                    let idle_at = p.stamp.idle_at();
                    visit(CounterView {
                        key,
                        state: &state,
                        idle_at,
                        log_from: 0,
                    });
                }
            } else if let Some(w) = self.wide.get_mut(key)
                && w.stamp.is_dirty()
            {
                w.stamp.set_dirty(false);
                let log_from = w.written_to;
                w.written_to = newest(&w.state);
                visit(CounterView {
                    key,
                    state: &w.state,
                    idle_at: w.stamp.idle_at(),
                    log_from,
                });
            }
        }
    }

    /// Hands every counter not idle at `now` to `visit`, whole (for a snapshot).
    pub(super) fn visit_active(&self, now: Nanos, visit: &mut dyn FnMut(CounterView<'_>)) {
        for (key, p) in self.packed.iter().filter(|(_, p)| !p.stamp.is_idle(now)) {
            let state = p.unpack();
            visit(CounterView {
                key,
                state: &state,
                idle_at: p.stamp.idle_at(),
                log_from: 0,
            });
        }
        for (key, w) in self.wide.iter().filter(|(_, w)| !w.stamp.is_idle(now)) {
            visit(CounterView {
                key,
                state: &w.state,
                idle_at: w.stamp.idle_at(),
                log_from: 0,
            });
        }
    }

    /// Combines a counter read from disk with what the shard holds (see [`saved::combine`]).
    /// Returns true when the key is new to the shard.
    pub(super) fn restore(&mut self, saved: SavedCounter) -> bool {
        let SavedCounter {
            key,
            state,
            idle_at,
        } = saved;
        let algorithm = algorithm_of(&state);
        let (state, idle_at, new) = match self.get(&key, algorithm) {
            Some(held) => {
                let mut held = held.into_owned();
                let held_idle = self.idle_at(&key).unwrap_or(0);
                let idle = saved::combine(&mut held, held_idle, state, idle_at);
                (held, idle, false)
            }
            None => (state, idle_at, true),
        };
        self.put(&key, state, idle_at, false);
        new
    }

    fn idle_at(&self, key: &CounterKey) -> Option<Nanos> {
        self.packed
            .get(key)
            .map(|p| p.stamp.idle_at())
            .or_else(|| self.wide.get(key).map(|w| w.stamp.idle_at()))
    }
}

/// Gives a table's memory back once it is under a quarter full, keeping room to double.
fn shrink<V>(table: &mut HashMap<CounterKey, V, Hasher>) {
    if table.capacity() > 64 && table.len() < table.capacity() / 4 {
        table.shrink_to(table.len() * 2);
    }
}
