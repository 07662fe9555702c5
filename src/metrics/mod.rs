//! Every metric name and label in one place: envoyproxy/ratelimit's Prometheus names (so existing
//! dashboards keep working) and sluice's own, with typed recording functions.
//!
//! Per-rule series are keyed by the upstream stats key (`domain.key1.key2...`). Only rules with
//! `detailed_metric`/`value_to_metric` and request-side overrides put runtime values into that key,
//! so the number of series is capped: past `max_series`, new keys fold into one overflow series
//! and the fold is counted.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Per-rule hits (upstream `ratelimit.service.rate_limit.<domain>.<key>.total_hits`).
pub const RULE_TOTAL_HITS: &str = "ratelimit_service_rate_limit_total_hits";
/// Hits over the limit.
pub const RULE_OVER_LIMIT: &str = "ratelimit_service_rate_limit_over_limit";
/// Hits that landed between the near-limit threshold and the limit.
pub const RULE_NEAR_LIMIT: &str = "ratelimit_service_rate_limit_near_limit";
/// Hits of calls answered OK.
pub const RULE_WITHIN_LIMIT: &str = "ratelimit_service_rate_limit_within_limit";
/// Over-limit hits let through by a shadow-mode rule.
pub const RULE_SHADOW_MODE: &str = "ratelimit_service_rate_limit_shadow_mode";
/// Rule sets loaded.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit_service_config_load_success";
/// Rule sets that failed to load (the previous rules kept serving).
pub const CONFIG_LOAD_ERROR: &str = "ratelimit_service_config_load_error";
/// Calls that failed, by `err_type` (`service_error` for bad input, `redis_error` for the store).
pub const SHOULD_RATE_LIMIT_ERROR: &str = "ratelimit_service_should_rate_limit_error";
/// gRPC calls by method.
pub const TOTAL_REQUESTS: &str = "ratelimit_service_total_requests";
/// gRPC call latency by method, seconds.
pub const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

/// Decision latency (limiter: match, store, assemble), seconds, sub-millisecond buckets.
pub const DECISION_SECONDS: &str = "sluice_decision_duration_seconds";
/// Counter store latency by backend, seconds.
pub const STORE_SECONDS: &str = "sluice_store_duration_seconds";
/// Counter store failures by backend.
pub const STORE_ERRORS: &str = "sluice_store_errors_total";
/// Decisions taken without the store (a rule's `failure_mode`), by domain, rule and mode.
pub const DEGRADED_DECISIONS: &str = "sluice_degraded_decisions_total";
/// Calls answered from the local over-limit cache without a store round trip, by backend.
pub const LOCAL_CACHE_HITS: &str = "sluice_local_cache_hits_total";
/// Over-limit counters remembered in the local cache, by backend.
pub const LOCAL_CACHE_ENTRIES: &str = "sluice_local_cache_entries";
/// 1 while the store's circuit breaker is open (calls skip the store), by backend.
pub const CIRCUIT_OPEN: &str = "sluice_store_circuit_open";
/// Counters held, by backend.
pub const ACTIVE_COUNTERS: &str = "sluice_active_counters";
/// Calls refused because they would have created a counter past `--max-counters`.
pub const COUNTERS_REFUSED: &str = "sluice_counters_refused_total";
/// Journal flushes (one per `--persist-interval`).
pub const PERSIST_FLUSHES: &str = "sluice_persist_flushes_total";
/// Counter records written to the journal.
pub const PERSIST_RECORDS: &str = "sluice_persist_records_total";
/// Bytes written to the journal.
pub const PERSIST_BYTES: &str = "sluice_persist_bytes_total";
/// Failed journal or snapshot writes (counting goes on in memory).
pub const PERSIST_ERRORS: &str = "sluice_persist_errors_total";
/// Snapshots written by compaction.
pub const PERSIST_SNAPSHOTS: &str = "sluice_persist_snapshots_total";
/// Counters restored from `--data-dir` at start.
pub const PERSIST_RESTORED: &str = "sluice_persist_restored_counters";
/// Rule set generation (1 = the rules loaded at start; +1 per successful reload).
pub const RULES_GENERATION: &str = "sluice_rules_generation";
/// Unix time of the last successful rule load, seconds.
pub const RULES_LAST_SUCCESS: &str = "sluice_rules_last_success_timestamp_seconds";
/// Per-rule series folded into the overflow series because the cap was reached.
pub const SERIES_FOLDED: &str = "sluice_metric_series_folded_total";
/// Descriptors looked up in a domain that is not loaded.
pub const DOMAIN_NOT_FOUND: &str = "sluice_domain_not_found_total";

/// Labels of the per-rule series.
pub const RULE_LABELS: [&str; 3] = ["domain", "key1", "key2"];
/// `key1` of the series that collects keys past the cap.
pub const OVERFLOW_KEY: &str = "_overflow_";
/// The gRPC method label of `ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT: &str = "ShouldRateLimit";
/// `err_type` of malformed calls.
pub const SERVICE_ERROR: &str = "service_error";
/// `err_type` of store failures (upstream's name).
pub const STORE_ERROR: &str = "redis_error";

/// Latency buckets from 10 µs to 100 ms: a decision should take well under a millisecond.
const LATENCY_BUCKETS: [f64; 13] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,
];

/// The five upstream counters of one rule series.
#[derive(Debug)]
pub struct RuleCounters {
    total_hits: IntCounter,
    over_limit: IntCounter,
    near_limit: IntCounter,
    within_limit: IntCounter,
    shadow_mode: IntCounter,
}

/// How one descriptor's hits fell against its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitOutcome {
    /// Hits of the call (its cost).
    pub hits: u64,
    /// The limit's capacity (requests, or token bucket burst).
    pub capacity: u64,
    /// Hits that would have fit before the call.
    pub available: u64,
    /// Whether the descriptor's limit admitted the call.
    pub admitted: bool,
    /// Whether a shadow-mode rule let an over-limit call through.
    pub shadowed: bool,
}

/// Upstream's split of a call's hits into over / near / within (reference §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HitSplit {
    /// Hits over the limit.
    pub over: u64,
    /// Hits in (floor(limit × ratio), limit].
    pub near: u64,
    /// Hits of a call answered OK (near-limit hits included).
    pub within: u64,
}

/// Splits hits as envoyproxy/ratelimit does, with "count before" = capacity − available.
pub fn split_hits(outcome: &HitOutcome, near_ratio: f64) -> HitSplit {
    let limit = outcome.capacity;
    let near_threshold = ((limit as f64) * near_ratio).floor() as u64;
    let before = limit.saturating_sub(outcome.available);
    let after = before.saturating_add(outcome.hits);
    if !outcome.admitted {
        if before >= limit {
            return HitSplit {
                over: outcome.hits,
                ..HitSplit::default()
            };
        }
        let over = after.saturating_sub(limit);
        let near = limit.saturating_sub(near_threshold.max(before));
        return HitSplit {
            over,
            near,
            within: 0,
        };
    }
    let near = if after > near_threshold {
        after - near_threshold.max(before)
    } else {
        0
    };
    HitSplit {
        over: 0,
        near,
        within: outcome.hits,
    }
}

/// The metrics registry and handles.
pub struct Metrics {
    registry: Registry,
    rule_families: [IntCounterVec; 5],
    rules: RwLock<HashMap<Box<str>, Arc<RuleCounters>>>,
    max_series: usize,
    near_ratio: f64,
    config_load_success: IntCounter,
    config_load_error: IntCounter,
    should_rate_limit_error: IntCounterVec,
    total_requests: IntCounter,
    response_time: Histogram,
    decision_seconds: Histogram,
    store_seconds: HistogramVec,
    store_errors: IntCounterVec,
    degraded: IntCounterVec,
    local_cache_hits: IntCounterVec,
    local_cache_entries: IntGaugeVec,
    circuit_open: IntGaugeVec,
    active_counters: IntGaugeVec,
    counters_refused: IntCounter,
    persist: [IntCounter; 5],
    persist_restored: IntGauge,
    rules_generation: IntGauge,
    rules_last_success: Gauge,
    series_folded: IntCounter,
    domain_not_found: IntCounter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("max_series", &self.max_series)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry. `near_ratio` is upstream's NEAR_LIMIT_RATIO; `max_series` caps the
    /// per-rule series.
    pub fn new(near_ratio: f64, max_series: usize) -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| register(&registry, IntCounter::new(name, help));
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            register(&registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let histogram = |name: &str, help: &str| {
            let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
            register(&registry, Histogram::with_opts(opts))
        };
        let rule = |name: &str, help: &str| counter_vec(name, help, &RULE_LABELS);
        let rule_families = [
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
        ];
        let response_time = {
            let opts = HistogramOpts::new(RESPONSE_TIME, "gRPC call latency in seconds.")
                .buckets(LATENCY_BUCKETS.to_vec());
            let vec = register(&registry, HistogramVec::new(opts, &["grpc_method"]));
            vec.with_label_values(&[SHOULD_RATE_LIMIT])
        };
        let store_seconds = {
            let opts = HistogramOpts::new(STORE_SECONDS, "Counter store latency in seconds.")
                .buckets(LATENCY_BUCKETS.to_vec());
            register(&registry, HistogramVec::new(opts, &["backend"]))
        };
        Self {
            rule_families,
            rules: RwLock::new(HashMap::new()),
            max_series: max_series.max(1),
            near_ratio,
            config_load_success: counter(CONFIG_LOAD_SUCCESS, "Rule sets loaded."),
            config_load_error: counter(CONFIG_LOAD_ERROR, "Rule sets that failed to load."),
            should_rate_limit_error: counter_vec(
                SHOULD_RATE_LIMIT_ERROR,
                "Calls that failed.",
                &["err_type"],
            ),
            total_requests: counter_vec(TOTAL_REQUESTS, "gRPC calls.", &["grpc_method"])
                .with_label_values(&[SHOULD_RATE_LIMIT]),
            response_time,
            decision_seconds: histogram(DECISION_SECONDS, "Decision latency in seconds."),
            store_seconds,
            store_errors: counter_vec(STORE_ERRORS, "Counter store failures.", &["backend"]),
            degraded: counter_vec(
                DEGRADED_DECISIONS,
                "Decisions taken without the store.",
                &["domain", "key1", "mode"],
            ),
            local_cache_hits: counter_vec(
                LOCAL_CACHE_HITS,
                "Calls answered from the local over-limit cache.",
                &["backend"],
            ),
            local_cache_entries: register(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        LOCAL_CACHE_ENTRIES,
                        "Counters in the local over-limit cache.",
                    ),
                    &["backend"],
                ),
            ),
            circuit_open: register(
                &registry,
                IntGaugeVec::new(
                    Opts::new(CIRCUIT_OPEN, "1 while the store's circuit breaker is open."),
                    &["backend"],
                ),
            ),
            active_counters: register(
                &registry,
                IntGaugeVec::new(Opts::new(ACTIVE_COUNTERS, "Counters held."), &["backend"]),
            ),
            counters_refused: counter(
                COUNTERS_REFUSED,
                "Calls refused because the counter store was full (--max-counters).",
            ),
            persist: [
                counter(PERSIST_FLUSHES, "Journal flushes."),
                counter(PERSIST_RECORDS, "Counter records written to the journal."),
                counter(PERSIST_BYTES, "Bytes written to the journal."),
                counter(PERSIST_ERRORS, "Failed journal or snapshot writes."),
                counter(PERSIST_SNAPSHOTS, "Snapshots written by compaction."),
            ],
            persist_restored: register(
                &registry,
                IntGauge::new(PERSIST_RESTORED, "Counters restored at start."),
            ),
            rules_generation: register(
                &registry,
                IntGauge::new(RULES_GENERATION, "Rule set generation."),
            ),
            rules_last_success: register(
                &registry,
                Gauge::new(RULES_LAST_SUCCESS, "Unix time of the last rule load."),
            ),
            series_folded: counter(
                SERIES_FOLDED,
                "Per-rule series folded into the overflow series.",
            ),
            domain_not_found: counter(
                DOMAIN_NOT_FOUND,
                "Descriptors in a domain that is not loaded.",
            ),
            registry,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The counters of the rule series for `stats_key` (`domain.key1.key2...`), created on
    /// first use; past the cap, the overflow series of the domain.
    pub fn rule(&self, domain: &str, stats_key: &str) -> Arc<RuleCounters> {
        if let Some(found) = self.rules.read().get(stats_key) {
            return found.clone();
        }
        let mut rules = self.rules.write();
        if let Some(found) = rules.get(stats_key) {
            return found.clone();
        }
        let (key1, key2) = if rules.len() >= self.max_series {
            self.series_folded.inc();
            (OVERFLOW_KEY.to_owned(), String::new())
        } else {
            label_keys(domain, stats_key)
        };
        let labels = [sanitize(domain), key1, key2];
        let labels = [labels[0].as_str(), labels[1].as_str(), labels[2].as_str()];
        let [total, over, near, within, shadow] = &self.rule_families;
        let counters = Arc::new(RuleCounters {
            total_hits: total.with_label_values(&labels),
            over_limit: over.with_label_values(&labels),
            near_limit: near.with_label_values(&labels),
            within_limit: within.with_label_values(&labels),
            shadow_mode: shadow.with_label_values(&labels),
        });
        if labels[1] != OVERFLOW_KEY {
            rules.insert(stats_key.into(), counters.clone());
        }
        counters
    }

    /// Records one descriptor's hits against its rule series.
    pub fn record_hits(&self, counters: &RuleCounters, outcome: &HitOutcome) {
        let split = split_hits(outcome, self.near_ratio);
        counters.total_hits.inc_by(outcome.hits);
        counters.over_limit.inc_by(split.over);
        counters.near_limit.inc_by(split.near);
        counters.within_limit.inc_by(split.within);
        if outcome.shadowed {
            counters.shadow_mode.inc_by(outcome.hits);
        }
    }

    /// Records one gRPC `ShouldRateLimit` call and its latency.
    pub fn record_call(&self, seconds: f64) {
        self.total_requests.inc();
        self.response_time.observe(seconds);
    }

    /// Records a failed call (`SERVICE_ERROR` or `STORE_ERROR`).
    pub fn record_call_error(&self, err_type: &str) {
        self.should_rate_limit_error
            .with_label_values(&[err_type])
            .inc();
    }

    /// Records one decision's latency.
    pub fn record_decision(&self, seconds: f64) {
        self.decision_seconds.observe(seconds);
    }

    /// Records one store round trip.
    pub fn record_store(&self, backend: &str, seconds: f64, failed: bool) {
        self.store_seconds
            .with_label_values(&[backend])
            .observe(seconds);
        if failed {
            self.store_errors.with_label_values(&[backend]).inc();
        }
    }

    /// Records a decision a rule's `failure_mode` took without the store.
    pub fn record_degraded(&self, domain: &str, rule: &str, mode: &str) {
        self.degraded.with_label_values(&[domain, rule, mode]).inc();
    }

    /// Records the local over-limit cache: entries held and calls answered since last time.
    pub fn record_local_cache(&self, backend: &str, entries: usize, new_hits: u64) {
        self.local_cache_entries
            .with_label_values(&[backend])
            .set(entries as i64);
        self.local_cache_hits
            .with_label_values(&[backend])
            .inc_by(new_hits);
    }

    /// Sets whether the store's circuit breaker is open.
    pub fn set_circuit_open(&self, backend: &str, open: bool) {
        self.circuit_open
            .with_label_values(&[backend])
            .set(i64::from(open));
    }

    /// Sets the number of counters a backend holds.
    pub fn set_active_counters(&self, backend: &str, count: usize) {
        self.active_counters
            .with_label_values(&[backend])
            .set(count as i64);
    }

    /// Publishes a store's running totals (refusals at the counter bound, persistence).
    pub fn record_store_stats(&self, stats: &crate::store::StoreStats) {
        // The store keeps totals; the counters catch up to them.
        let catch_up = |counter: &IntCounter, total: u64| {
            counter.inc_by(total.saturating_sub(counter.get()));
        };
        catch_up(&self.counters_refused, stats.refused);
        if let Some(p) = stats.persist {
            let totals = [p.flushes, p.records, p.bytes, p.errors, p.snapshots];
            for (counter, total) in self.persist.iter().zip(totals) {
                catch_up(counter, total);
            }
            self.persist_restored
                .set(i64::try_from(p.restored).unwrap_or(i64::MAX));
        }
    }

    /// Records a successful rule load: its generation and time.
    pub fn record_rules_loaded(&self, generation: u64, unix_seconds: f64) {
        self.config_load_success.inc();
        self.rules_generation.set(generation as i64);
        self.rules_last_success.set(unix_seconds);
    }

    /// Records a rule load that failed (the previous rules keep serving).
    pub fn record_rules_failed(&self) {
        self.config_load_error.inc();
    }

    /// Records a descriptor in a domain that is not loaded.
    pub fn record_domain_not_found(&self) {
        self.domain_not_found.inc();
    }
}

fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    // Names are constants of this module, registered once each: failure is a programming error.
    let metric = metric.expect("valid metric definition");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric registered once");
    metric
}

/// `key1`/`key2` labels: the first two path segments after the domain (deeper ones are dropped,
/// as upstream's Prometheus mapping does).
fn label_keys(domain: &str, stats_key: &str) -> (String, String) {
    let path = stats_key
        .strip_prefix(domain)
        .and_then(|p| p.strip_prefix('.'))
        .unwrap_or(stats_key);
    let mut segments = path.splitn(3, '.');
    let key1 = segments.next().map(sanitize).unwrap_or_default();
    let key2 = segments.next().map(sanitize).unwrap_or_default();
    (key1, key2)
}

/// Upstream's stats sanitising: `:` and `|` become `_`.
fn sanitize(text: &str) -> String {
    text.replace([':', '|'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(capacity: u64, count_before: u64, hits: u64) -> HitOutcome {
        let available = capacity.saturating_sub(count_before);
        HitOutcome {
            hits,
            capacity,
            available,
            admitted: hits <= available,
            shadowed: false,
        }
    }

    /// Reference §4.1's worked example: limit 20, ratio 0.8.
    #[test]
    fn near_limit_worked_example() {
        assert_eq!(
            split_hits(&outcome(20, 19, 3), 0.8),
            HitSplit {
                over: 2,
                near: 1,
                within: 0
            }
        );
        assert_eq!(
            split_hits(&outcome(20, 15, 7), 0.8),
            HitSplit {
                over: 2,
                near: 4,
                within: 0
            }
        );
    }

    /// Calls within the limit count as within, and near when they pass the threshold.
    #[test]
    fn within_and_near() {
        assert_eq!(
            split_hits(&outcome(15, 11, 2), 0.8),
            HitSplit {
                over: 0,
                near: 1,
                within: 2
            }
        );
        assert_eq!(
            split_hits(&outcome(15, 0, 2), 0.8),
            HitSplit {
                over: 0,
                near: 0,
                within: 2
            }
        );
        assert_eq!(
            split_hits(&outcome(15, 13, 2), 0.8),
            HitSplit {
                over: 0,
                near: 2,
                within: 2
            }
        );
        assert_eq!(
            split_hits(&outcome(15, 15, 2), 0.8),
            HitSplit {
                over: 2,
                near: 0,
                within: 0
            }
        );
    }

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

    /// Past the cap, new keys fold into one overflow series and the fold is counted.
    #[test]
    fn series_are_capped() {
        let metrics = Metrics::new(0.8, 2);
        for i in 0..10 {
            let rule = metrics.rule("d", &format!("d.k_{i}"));
            metrics.record_hits(&rule, &outcome(5, 0, 1));
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
