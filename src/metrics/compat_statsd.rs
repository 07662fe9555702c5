//! envoyproxy/ratelimit's stats under their statsd names, read from the counters the
//! `ratelimit_service_*` families already keep: what the statsd sink flushes and what a
//! statsd_exporter mapping turns into Prometheus families. Nothing here runs on a call.

use prometheus::IntCounter;
use prometheus::core::Metric;

use super::Metrics;
use super::names::{
    SERVICE_ERROR, STATSD_CALL_ERRORS, STATSD_CONFIG_LOAD_ERROR, STATSD_CONFIG_LOAD_SUCCESS,
    STATSD_GLOBAL_SHADOW_MODE, STATSD_RESPONSE_TIME, STATSD_RULE_PREFIX, STATSD_RULE_STATS,
    STATSD_SEND_ERRORS, STATSD_TOTAL_REQUESTS, STORE_ERROR,
};

/// Turns the stats into Prometheus text in place of the built-in `ratelimit_service_*` families
/// (a statsd_exporter mapping does).
pub trait CompatExposition: Send + Sync {
    /// The text exposition of `stats`, leaving out every family whose name is `taken` (one
    /// `/metrics` has already: two families of one name make Prometheus refuse the scrape).
    fn render(&self, stats: &[CompatStat], taken: &dyn Fn(&str) -> bool) -> String;
}

/// One stat as envoyproxy/ratelimit names it, with its value since the start.
#[derive(Debug, Clone, PartialEq)]
pub struct CompatStat {
    /// The dotted gostats name, e.g. `ratelimit.service.rate_limit.edge.api_key.total_hits`.
    pub name: String,
    /// Its value.
    pub value: CompatStatValue,
}

/// What a stat holds.
#[derive(Debug, Clone, PartialEq)]
pub enum CompatStatValue {
    /// A counter's total.
    Counter(u64),
    /// A timer's samples, as the histogram that kept them.
    Timer(TimerTotals),
}

/// A timer's samples since the start, in milliseconds, as its histogram kept them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimerTotals {
    /// Samples.
    pub count: u64,
    /// Their sum, milliseconds.
    pub sum_ms: f64,
    /// `(upper bound in milliseconds, samples at or below it)` per bucket, ascending, the last
    /// bound infinite.
    pub buckets: Vec<(f64, u64)>,
}

impl Metrics {
    /// Every envoyproxy/ratelimit stat sluice keeps, under its statsd name: the per-rule stats
    /// (their key sanitised as envoyproxy/ratelimit's: `:` and `|` become `_`), rule loads, global
    /// shadow mode, failed calls, `ShouldRateLimit` calls and their latency as a timer.
    pub fn compat_stats(&self) -> Vec<CompatStat> {
        let compat = &self.compat;
        let counter = |name: &str, counter: &IntCounter| CompatStat {
            name: name.to_owned(),
            value: CompatStatValue::Counter(counter.get()),
        };
        let mut stats = Vec::new();
        for (key, counters) in compat.series.all() {
            let key = key.replace([':', '|'], "_");
            let values = [
                &counters.total_hits,
                &counters.over_limit,
                &counters.near_limit,
                &counters.within_limit,
                &counters.shadow_mode,
            ];
            for (stat, value) in STATSD_RULE_STATS.iter().zip(values) {
                stats.push(counter(
                    &format!("{STATSD_RULE_PREFIX}.{key}.{stat}"),
                    value,
                ));
            }
        }
        stats.push(counter(
            STATSD_CONFIG_LOAD_SUCCESS,
            &compat.config_load_success,
        ));
        stats.push(counter(STATSD_CONFIG_LOAD_ERROR, &compat.config_load_error));
        stats.push(counter(
            STATSD_GLOBAL_SHADOW_MODE,
            &compat.global_shadow_mode,
        ));
        for err_type in [STORE_ERROR, SERVICE_ERROR] {
            let failed = compat
                .should_rate_limit_error
                .with_label_values(&[err_type]);
            stats.push(counter(
                &format!("{STATSD_CALL_ERRORS}.{err_type}"),
                &failed,
            ));
        }
        stats.push(counter(STATSD_TOTAL_REQUESTS, &compat.total_requests));
        stats.push(CompatStat {
            name: STATSD_RESPONSE_TIME.to_owned(),
            value: CompatStatValue::Timer(timer_totals(&compat.response_time)),
        });
        stats
    }

    /// Counts a flush that did not reach the statsd receiver.
    pub fn record_statsd_send_error(&self) {
        self.statsd_send_errors.inc();
    }
}

/// The histogram's samples in milliseconds (it keeps seconds).
fn timer_totals(histogram: &prometheus::Histogram) -> TimerTotals {
    let metric = histogram.metric();
    let histogram = metric.get_histogram();
    let mut buckets: Vec<(f64, u64)> = (histogram.get_bucket().iter())
        .map(|b| (b.upper_bound() * 1_000.0, b.cumulative_count()))
        .collect();
    buckets.push((f64::INFINITY, histogram.get_sample_count()));
    TimerTotals {
        count: histogram.get_sample_count(),
        sum_ms: histogram.get_sample_sum() * 1_000.0,
        buckets,
    }
}

/// The sink's own figure, registered with the others.
pub(super) fn send_errors(families: &super::Families<'_>) -> IntCounter {
    families.counter(
        STATSD_SEND_ERRORS,
        "Flushes to the statsd receiver that failed to send.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::HitOutcome;

    /// Per-rule stats take envoyproxy/ratelimit's names (sanitised key, deeper levels kept); the
    /// timer is in milliseconds with cumulative buckets ending at infinity.
    #[test]
    fn stats_carry_compat_names() {
        let metrics = Metrics::new(0.8, 10);
        let rule = metrics.rule("edge", "edge.api_key_a:b.path_x");
        let hit = HitOutcome {
            hits: 3,
            capacity: 10,
            available: 10,
            admitted: true,
            shadowed: false,
        };
        metrics.record_hits(&rule, &hit);
        metrics.record_call(0.002);
        let stats = metrics.compat_stats();
        let find = |name: &str| stats.iter().find(|s| s.name == name).map(|s| &s.value);
        assert_eq!(
            find("ratelimit.service.rate_limit.edge.api_key_a_b.path_x.total_hits"),
            Some(&CompatStatValue::Counter(3))
        );
        assert_eq!(
            find("ratelimit_server.ShouldRateLimit.total_requests"),
            Some(&CompatStatValue::Counter(1))
        );
        let Some(CompatStatValue::Timer(timer)) = find(STATSD_RESPONSE_TIME) else {
            panic!("{stats:?}")
        };
        assert_eq!(timer.count, 1);
        assert!((timer.sum_ms - 2.0).abs() < 1e-9);
        assert_eq!(timer.buckets.last(), Some(&(f64::INFINITY, 1)));
    }
}
