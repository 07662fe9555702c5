//! An open-addressed table keyed by [`Fingerprint`]: one flat array of (fingerprint, value)
//! slots, linear probing, backward-shift deletion (no tombstones).
//!
//! Why not `hashbrown`: its capacities are powers of two filled to at most 7/8, so just past a
//! growth step a table is less than half full, and a slot costs more than twice its size. Here
//! the capacity is any number: a slot is found by scaling the fingerprint into the capacity
//! (`hash * capacity >> 64`), the table grows by a quarter when 4/5 full and so stays between
//! 64 % and 80 % full, and a 40-byte slot costs 50 to 63 bytes a counter. Fingerprints are
//! keyed hashes (uniform and unpredictable), so probe sequences stay short.

use crate::store::Fingerprint;

/// A slot: its fingerprint ([`Fingerprint::EMPTY`] when free) and value.
#[derive(Debug, Default)]
struct TableSlot<V> {
    fp: Fingerprint,
    value: V,
}

/// Grow when more than `MAX_LOAD_NUM / MAX_LOAD_DEN` of the slots are taken.
const MAX_LOAD_NUM: usize = 4;
const MAX_LOAD_DEN: usize = 5;
/// The smallest allocated table.
const MIN_CAPACITY: usize = 8;

/// The table. `V::default()` fills free slots (it must not allocate).
#[derive(Debug)]
pub(super) struct Table<V> {
    slots: Vec<TableSlot<V>>,
    len: usize,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V: Default> Table<V> {
    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated.
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The slot where the probe for `fp` starts.
    fn home(&self, fp: Fingerprint) -> usize {
        ((u128::from(fp.slot_bits()) * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, at: usize) -> usize {
        if at + 1 == self.slots.len() {
            0
        } else {
            at + 1
        }
    }

    /// The slot holding `fp`, or the free slot where it would go (`Err`); `None` when nothing
    /// is allocated.
    fn find(&self, fp: Fingerprint) -> Option<Result<usize, usize>> {
        if self.slots.is_empty() {
            return None;
        }
        let mut at = self.home(fp);
        loop {
            let slot = self.slots[at].fp;
            if slot == fp {
                return Some(Ok(at));
            }
            if slot == Fingerprint::EMPTY {
                return Some(Err(at));
            }
            at = self.next(at);
        }
    }

    /// The value of `fp`.
    pub(super) fn get(&self, fp: Fingerprint) -> Option<&V> {
        match self.find(fp)? {
            Ok(at) => Some(&self.slots[at].value),
            Err(_) => None,
        }
    }

    /// The value of `fp`, to change in place.
    pub(super) fn get_mut(&mut self, fp: Fingerprint) -> Option<&mut V> {
        match self.find(fp)? {
            Ok(at) => Some(&mut self.slots[at].value),
            Err(_) => None,
        }
    }

    /// Stores `value` for `fp`, replacing any value held. Returns true when `fp` is new.
    pub(super) fn insert(&mut self, fp: Fingerprint, value: V) -> bool {
        debug_assert!(fp != Fingerprint::EMPTY);
        if let Some(Ok(at)) = self.find(fp) {
            self.slots[at].value = value;
            return false;
        }
        if (self.len + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            let grown = (self.slots.len() + self.slots.len() / 4).max(MIN_CAPACITY);
            self.resize(grown);
        }
        let Some(Err(at)) = self.find(fp) else {
            unreachable!("a table with room has a free slot for an absent fingerprint");
        };
        self.slots[at] = TableSlot { fp, value };
        self.len += 1;
        true
    }

    /// Removes `fp`, returning its value.
    pub(super) fn remove(&mut self, fp: Fingerprint) -> Option<V> {
        let at = self.find(fp)?.ok()?;
        Some(self.remove_at(at))
    }

    /// Empties slot `at` and moves later entries of its probe run back into the gap, so every
    /// entry stays reachable from its home slot without tombstones.
    fn remove_at(&mut self, mut gap: usize) -> V {
        let removed = std::mem::take(&mut self.slots[gap]).value;
        self.len -= 1;
        let mut at = self.next(gap);
        while self.slots[at].fp != Fingerprint::EMPTY {
            let home = self.home(self.slots[at].fp);
            // The entry at `at` may fill the gap when the gap lies on its probe path, i.e.
            // cyclically within [home, at).
            let on_path = if gap <= at {
                home <= gap || home > at
            } else {
                home <= gap && home > at
            };
            if on_path {
                self.slots.swap(gap, at);
                gap = at;
            }
            at = self.next(at);
        }
        removed
    }

    /// Keeps only the entries for which `keep` is true. Returns how many were removed.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(Fingerprint, &mut V) -> bool) -> usize {
        let before = self.len;
        let mut at = 0;
        while at < self.slots.len() {
            let slot = &mut self.slots[at];
            if slot.fp != Fingerprint::EMPTY && !keep(slot.fp, &mut slot.value) {
                // A later entry may move into `at`: look at the same slot again.
                self.remove_at(at);
                continue;
            }
            at += 1;
        }
        before - self.len
    }

    /// Gives memory back once under a quarter full, keeping room to grow by half.
    pub(super) fn shrink(&mut self) {
        if self.slots.len() > 64 && self.len < self.slots.len() / 4 {
            self.resize(self.len * 2);
        }
    }

    /// Every entry, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Fingerprint, &V)> {
        self.slots
            .iter()
            .filter(|s| s.fp != Fingerprint::EMPTY)
            .map(|s| (s.fp, &s.value))
    }

    fn resize(&mut self, capacity: usize) {
        let capacity = capacity.max(MIN_CAPACITY);
        let mut fresh = Vec::with_capacity(capacity);
        fresh.resize_with(capacity, TableSlot::default);
        let old = std::mem::replace(&mut self.slots, fresh);
        for slot in old.into_iter().filter(|s| s.fp != Fingerprint::EMPTY) {
            let Some(Err(at)) = self.find(slot.fp) else {
                unreachable!("entries are distinct and the new table has room");
            };
            self.slots[at] = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(n: u64) -> Fingerprint {
        // Spread like real fingerprints, but reproducible.
        let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        Fingerprint::from_bytes((u128::from(x) << 64 | u128::from(x.rotate_left(17))).to_le_bytes())
            .unwrap()
    }

    /// Inserted entries are found, replaced in place, and removed; absent ones are not found.
    #[test]
    fn insert_get_remove() {
        let mut t: Table<u64> = Table::default();
        assert_eq!(t.get(fp(1)), None);
        for n in 0..1_000 {
            assert!(t.insert(fp(n), n));
        }
        assert!(!t.insert(fp(5), 50));
        assert_eq!((t.len(), t.get(fp(5))), (1_000, Some(&50)));
        for n in (0..1_000).step_by(2) {
            assert!(t.remove(fp(n)).is_some());
        }
        for n in 0..1_000 {
            assert_eq!(t.get(fp(n)).is_some(), n % 2 == 1, "{n}");
        }
        assert_eq!(t.len(), 500);
        assert_eq!(t.remove(fp(0)), None);
    }

    /// The table stays between 64 % and 80 % full while it grows (what bounds memory).
    #[test]
    fn load_stays_between_bounds() {
        let mut t: Table<u64> = Table::default();
        for n in 0..100_000u64 {
            t.insert(fp(n), n);
            if t.len() > 100 {
                let load = t.len() as f64 / t.capacity() as f64;
                assert!((0.63..=0.8).contains(&load), "{load} at {n}");
            }
        }
    }

    /// Removing many entries during one pass (wrapping runs included) keeps every survivor
    /// reachable, and shrinking keeps them all.
    #[test]
    fn retain_and_shrink_keep_survivors() {
        let mut t: Table<u64> = Table::default();
        for n in 0..20_000 {
            t.insert(fp(n), n);
        }
        let removed = t.retain(|_, v| *v % 7 == 0);
        assert_eq!(removed, 20_000 - 20_000usize.div_ceil(7));
        t.shrink();
        assert!(t.capacity() < 20_000);
        for n in 0..20_000 {
            assert_eq!(t.get(fp(n)).copied(), (n % 7 == 0).then_some(n), "{n}");
        }
        assert_eq!(t.iter().count(), t.len());
    }

    /// A full-ish small table with colliding homes: every order of removals keeps the rest.
    #[test]
    fn removal_in_crowded_runs() {
        for skip in 0..12u64 {
            let mut t: Table<u64> = Table::default();
            for n in 0..12 {
                t.insert(fp(n), n);
            }
            t.remove(fp(skip));
            for n in (0..12).filter(|&n| n != skip) {
                assert_eq!(t.get(fp(n)), Some(&n));
            }
        }
    }
}
