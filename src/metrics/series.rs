//! The per-rule series, keyed by the envoyproxy/ratelimit stats key (`domain.key1.key2...`) and
//! capped.
//!
//! Only rules with `detailed_metric`/`value_to_metric` and request-side overrides put runtime
//! values into that key, so the number of series is capped: past `max_series`, new keys fold
//! into one overflow series per domain and the fold is counted.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use prometheus::{IntCounter, IntCounterVec};

use super::Families;
use super::names::{OVERFLOW_KEY, RULE_LABELS, SERIES_FOLDED};
use super::names::{
    RULE_NEAR_LIMIT, RULE_OVER_LIMIT, RULE_SHADOW_MODE, RULE_TOTAL_HITS, RULE_WITHIN_LIMIT,
};

/// The five envoyproxy/ratelimit counters of one rule series.
#[derive(Debug)]
pub struct RuleCounters {
    pub(super) total_hits: IntCounter,
    pub(super) over_limit: IntCounter,
    pub(super) near_limit: IntCounter,
    pub(super) within_limit: IntCounter,
    pub(super) shadow_mode: IntCounter,
}

/// A rule's series resolved once per rule set: each compiled rule node holds one, so every call
/// after the first skips the lookup (hashing the stats key under a lock). Filled only with a
/// series of the rule's own (never an overflow series, whose every fold is counted), and tagged
/// with the registry that filled it, so a rule set shared by two registries (tests, benchmarks)
/// still counts in each its own.
#[derive(Debug, Default)]
pub struct SeriesSlot(OnceLock<(u64, Arc<RuleCounters>)>);

impl Clone for SeriesSlot {
    /// A copy of a rule starts unresolved: resolving again costs one lookup.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl SeriesSlot {
    /// The series held for `registry`, if resolved.
    pub(super) fn get(&self, registry: u64) -> Option<&RuleCounters> {
        self.0
            .get()
            .filter(|(filled_by, _)| *filled_by == registry)
            .map(|(_, counters)| &**counters)
    }

    /// Holds `counters` of `registry` (the first registry to fill it keeps it).
    pub(super) fn fill(&self, registry: u64, counters: Arc<RuleCounters>) {
        let _ = self.0.set((registry, counters));
    }
}

/// The counters of a rule series: borrowed from the rule's [`SeriesSlot`] once resolved, else
/// looked up for the call.
pub enum RuleSeries<'a> {
    /// Held by the rule set.
    Resolved(&'a RuleCounters),
    /// Looked up (a stats key with runtime values, an override, or an overflow series).
    Looked(Arc<RuleCounters>),
}

impl Deref for RuleSeries<'_> {
    type Target = RuleCounters;

    fn deref(&self) -> &RuleCounters {
        match self {
            Self::Resolved(counters) => counters,
            Self::Looked(counters) => counters,
        }
    }
}

/// The five families of the per-rule series and the series created so far.
pub(super) struct PerRuleSeries {
    families: [IntCounterVec; 5],
    /// Hashed with foldhash, not SipHash: this lookup runs on every counted call, the keys
    /// are short, and the map is capped (a client cannot grow it past `max_series`).
    created: RwLock<HashMap<Box<str>, Arc<RuleCounters>, foldhash::quality::RandomState>>,
    max_series: usize,
    folded: IntCounter,
    /// The overflow series of each domain that has one, by domain (for the statsd names).
    overflowed: parking_lot::Mutex<HashMap<Box<str>, Arc<RuleCounters>>>,
}

impl PerRuleSeries {
    /// Registers the families; at most `max_series` (at least 1) series are created.
    pub(super) fn new(families: &Families<'_>, max_series: usize) -> Self {
        let rule = |name: &str, help: &str| families.counter_vec(name, help, &RULE_LABELS);
        Self {
            families: [
                rule(RULE_TOTAL_HITS, "Hits of calls that matched the rule."),
                rule(RULE_OVER_LIMIT, "Hits over the rule's limit."),
                rule(
                    RULE_NEAR_LIMIT,
                    "Hits between the near-limit threshold and the limit.",
                ),
                rule(RULE_WITHIN_LIMIT, "Hits of calls within the rule's limit."),
                rule(
                    RULE_SHADOW_MODE,
                    "Over-limit hits let through by shadow mode.",
                ),
            ],
            created: RwLock::new(HashMap::default()),
            overflowed: parking_lot::Mutex::default(),
            max_series: max_series.max(1),
            folded: families.counter(
                SERIES_FOLDED,
                "Metric series folded into an overflow series (per-rule and degraded-decision series).",
            ),
        }
    }

    /// The cap on series.
    pub(super) fn max_series(&self) -> usize {
        self.max_series
    }

    /// The count of series folded into overflow series (shared with the other capped
    /// families).
    pub(super) fn folded(&self) -> IntCounter {
        self.folded.clone()
    }

    /// The counters of the series for `stats_key`, created on first use; past the cap, the
    /// overflow series of the domain. `true` with a series of the key's own (not an overflow).
    pub(super) fn get(&self, domain: &str, stats_key: &str) -> (Arc<RuleCounters>, bool) {
        if let Some(found) = self.created.read().get(stats_key) {
            return (found.clone(), true);
        }
        let mut created = self.created.write();
        if let Some(found) = created.get(stats_key) {
            return (found.clone(), true);
        }
        let (key1, key2) = if created.len() >= self.max_series {
            self.folded.inc();
            (OVERFLOW_KEY.to_owned(), String::new())
        } else {
            label_keys(domain, stats_key)
        };
        let labels = [sanitize(domain), key1, key2];
        let labels = [labels[0].as_str(), labels[1].as_str(), labels[2].as_str()];
        let [total, over, near, within, shadow] = &self.families;
        let counters = Arc::new(RuleCounters {
            total_hits: total.with_label_values(&labels),
            over_limit: over.with_label_values(&labels),
            near_limit: near.with_label_values(&labels),
            within_limit: within.with_label_values(&labels),
            shadow_mode: shadow.with_label_values(&labels),
        });
        let own = labels[1] != OVERFLOW_KEY;
        if own {
            created.insert(stats_key.into(), counters.clone());
        } else {
            let mut overflowed = self.overflowed.lock();
            overflowed
                .entry(domain.into())
                .or_insert_with(|| counters.clone());
        }
        (counters, own)
    }

    /// Every series created so far with its stats key (an overflow series as
    /// `<domain>._overflow_`), copied out so no lock is held while the caller reads them.
    pub(super) fn all(&self) -> Vec<(Box<str>, Arc<RuleCounters>)> {
        let mut all: Vec<_> = (self.created.read().iter())
            .map(|(key, counters)| (key.clone(), counters.clone()))
            .collect();
        let overflowed = self.overflowed.lock();
        all.extend(overflowed.iter().map(|(domain, counters)| {
            (format!("{domain}.{OVERFLOW_KEY}").into(), counters.clone())
        }));
        all
    }
}

/// `key1`/`key2` labels: the first two path segments after the domain (deeper ones are dropped,
/// as envoyproxy/ratelimit's Prometheus mapping does).
pub(super) fn label_keys(domain: &str, stats_key: &str) -> (String, String) {
    let path = stats_key
        .strip_prefix(domain)
        .and_then(|p| p.strip_prefix('.'))
        .unwrap_or(stats_key);
    let mut segments = path.splitn(3, '.');
    let key1 = segments.next().map(sanitize).unwrap_or_default();
    let key2 = segments.next().map(sanitize).unwrap_or_default();
    (key1, key2)
}

/// envoyproxy/ratelimit's stats sanitising: `:` and `|` become `_`.
fn sanitize(text: &str) -> String {
    text.replace([':', '|'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{HitOutcome, Metrics};

    /// Label keys keep two levels, drop deeper ones, and sanitise.
    #[test]
    fn label_keys_from_stats_key() {
        let keys = label_keys("domain1", "domain1.key3_val3.key4_val4.key5_val5");
        assert_eq!(keys, ("key3_val3".to_owned(), "key4_val4".to_owned()));
        assert_eq!(
            label_keys("d", "d.k_a:b"),
            ("k_a_b".to_owned(), String::new())
        );
    }

    /// One hit admitted by a limit of 5 with room for all of it.
    fn one_admitted_hit() -> HitOutcome {
        HitOutcome {
            hits: 1,
            capacity: 5,
            available: 5,
            admitted: true,
            shadowed: false,
        }
    }

    /// A slot resolves on the first call and then serves its own registry only; a second
    /// registry reading the same rule counts in its own series; an overflow series is never
    /// held, so every fold is still counted.
    #[test]
    fn a_slot_holds_its_registrys_own_series() {
        let hit = one_admitted_hit();
        let (first, second) = (Metrics::new(0.8, 10), Metrics::new(0.8, 10));
        let slot = SeriesSlot::default();
        assert!(matches!(
            first.rule_in(&slot, "d", "d.k"),
            RuleSeries::Looked(_)
        ));
        for _ in 0..3 {
            let series = first.rule_in(&slot, "d", "d.k");
            assert!(matches!(series, RuleSeries::Resolved(_)));
            first.record_hits(&series, &hit);
        }
        let other = second.rule_in(&slot, "d", "d.k");
        assert!(matches!(other, RuleSeries::Looked(_)));
        second.record_hits(&other, &hit);
        let line = |metrics: &Metrics| {
            let text = metrics.render();
            text.lines()
                .find(|l| l.starts_with(RULE_TOTAL_HITS) && l.contains("key1=\"k\""))
                .map(str::to_owned)
        };
        assert!(
            line(&first).is_some_and(|l| l.ends_with(" 3")),
            "{:?}",
            line(&first)
        );
        assert!(
            line(&second).is_some_and(|l| l.ends_with(" 1")),
            "{:?}",
            line(&second)
        );

        let full = Metrics::new(0.8, 1);
        let _ = full.rule("d", "d.taken");
        let overflow = SeriesSlot::default();
        for _ in 0..3 {
            assert!(matches!(
                full.rule_in(&overflow, "d", "d.k"),
                RuleSeries::Looked(_)
            ));
        }
        assert!(full.render().contains(&format!("{SERIES_FOLDED} 3")));
    }

    /// Past the cap, new keys fold into one overflow series and the fold is counted.
    #[test]
    fn series_are_capped() {
        let metrics = Metrics::new(0.8, 2);
        let hit = one_admitted_hit();
        for i in 0..10 {
            let rule = metrics.rule("d", &format!("d.k_{i}"));
            metrics.record_hits(&rule, &hit);
        }
        let text = metrics.render();
        let series = text
            .lines()
            .filter(|l| l.starts_with(RULE_TOTAL_HITS))
            .count();
        assert_eq!(series, 3, "{text}");
        assert!(text.contains(&format!(
            "{RULE_TOTAL_HITS}{{domain=\"d\",key1=\"{OVERFLOW_KEY}\",key2=\"\"}} 8"
        )));
        assert!(text.contains(&format!("{SERIES_FOLDED} 8")));
    }
}
