//! A counter family whose label sets are capped: past the cap, a new label set counts in one
//! overflow series (its unbounded labels set to [`OVERFLOW_KEY`]) and the fold is counted, so
//! no client can grow `/metrics` without bound by sending new values.

use std::collections::HashMap;

use parking_lot::RwLock;
use prometheus::{IntCounter, IntCounterVec};

use super::names::OVERFLOW_KEY;

/// A capped family of `N` labels.
pub(super) struct CappedCounters<const N: usize> {
    family: IntCounterVec,
    /// Which labels take few values (kept in the overflow series) and which take many.
    bounded: [bool; N],
    created: RwLock<HashMap<[Box<str>; N], IntCounter>>,
    max_series: usize,
    folded: IntCounter,
}

impl<const N: usize> CappedCounters<N> {
    /// Caps `family` at `max_series` (at least 1) label sets; `bounded` marks the labels whose
    /// values are few (an enum), which the overflow series keeps; folds count in `folded`.
    pub(super) fn new(
        family: IntCounterVec,
        bounded: [bool; N],
        max_series: usize,
        folded: IntCounter,
    ) -> Self {
        Self {
            family,
            bounded,
            created: RwLock::new(HashMap::new()),
            max_series: max_series.max(1),
            folded,
        }
    }

    /// The counter of `labels`, created on first use; past the cap, the overflow series.
    pub(super) fn get(&self, labels: [&str; N]) -> IntCounter {
        let key: [Box<str>; N] = labels.map(Box::from);
        if let Some(found) = self.created.read().get(&key) {
            return found.clone();
        }
        let mut created = self.created.write();
        if let Some(found) = created.get(&key) {
            return found.clone();
        }
        if created.len() >= self.max_series {
            self.folded.inc();
            let mut overflow = labels;
            for (label, bounded) in overflow.iter_mut().zip(self.bounded) {
                if !bounded {
                    *label = OVERFLOW_KEY;
                }
            }
            return self.family.with_label_values(&overflow);
        }
        let counter = self.family.with_label_values(&labels);
        created.insert(key, counter.clone());
        counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    /// Past the cap, new label sets land in the overflow series, bounded labels kept.
    #[test]
    fn label_sets_are_capped() {
        let family = IntCounterVec::new(Opts::new("t", "t"), &["domain", "mode"]).unwrap();
        let folded = IntCounter::new("f", "f").unwrap();
        let capped = CappedCounters::new(family.clone(), [false, true], 2, folded.clone());
        for i in 0..10 {
            capped.get([&format!("d{i}"), "deny"]).inc();
        }
        capped.get(["d0", "deny"]).inc();
        assert_eq!(family.with_label_values(&["d0", "deny"]).get(), 2);
        assert_eq!(family.with_label_values(&[OVERFLOW_KEY, "deny"]).get(), 8);
        assert_eq!(folded.get(), 8);
    }
}
