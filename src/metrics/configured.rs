//! The configured limits as gauges: `sluice_rule_limit` (requests per window) and
//! `sluice_rule_window_seconds`, one series per limit of every limited node, so a dashboard can
//! plot use as a fraction of the limit. Each rule load replaces the whole set at once: a scrape
//! sees the old rules' series or the new ones', never a mix and never a stale series.

use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntGaugeVec, Opts};

use super::names::{CONFIGURED_LIMIT_LABELS, RULE_LIMIT, RULE_WINDOW_SECONDS};
use super::series::label_keys;

/// One counted limit of the rules in force, as plain data (the metrics know no rules).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguredLimit {
    /// The domain.
    pub domain: String,
    /// The node's full key (`domain.key_value.key`), as `/rlconfig` prints it.
    pub key: String,
    /// The limit's position among the node's limits (0 for `rate_limit`).
    pub index: u8,
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// Requests per window.
    pub requests: u64,
    /// The window, seconds.
    pub window_seconds: f64,
}

/// The two gauge families of one rule set.
struct LimitGauges {
    limit: IntGaugeVec,
    window: GaugeVec,
}

impl LimitGauges {
    fn of(limits: &[ConfiguredLimit]) -> Self {
        let families = Self::empty();
        for limit in limits {
            let (key1, key2) = label_keys(&limit.domain, &limit.key);
            let index = limit.index.to_string();
            let labels = [
                limit.domain.as_str(),
                limit.key.as_str(),
                key1.as_str(),
                key2.as_str(),
                index.as_str(),
                limit.algorithm,
            ];
            let requests = i64::try_from(limit.requests).unwrap_or(i64::MAX);
            families.limit.with_label_values(&labels).set(requests);
            families
                .window
                .with_label_values(&labels)
                .set(limit.window_seconds);
        }
        families
    }

    fn empty() -> Self {
        // Constant names and labels: they cannot be invalid.
        let limit = IntGaugeVec::new(
            Opts::new(RULE_LIMIT, "Requests per window of each configured limit."),
            &CONFIGURED_LIMIT_LABELS,
        )
        .expect("valid gauge");
        let window = GaugeVec::new(
            Opts::new(
                RULE_WINDOW_SECONDS,
                "Window of each configured limit, seconds.",
            ),
            &CONFIGURED_LIMIT_LABELS,
        )
        .expect("valid gauge");
        Self { limit, window }
    }
}

/// The gauges of the rules in force, registered once and swapped whole on each load.
#[derive(Clone)]
pub(super) struct ConfiguredLimits {
    current: Arc<ArcSwap<LimitGauges>>,
    descs: Vec<Desc>,
}

impl ConfiguredLimits {
    pub(super) fn new() -> Self {
        let families = LimitGauges::empty();
        let descs = families
            .limit
            .desc()
            .into_iter()
            .chain(families.window.desc())
            .cloned()
            .collect();
        Self {
            current: Arc::new(ArcSwap::from_pointee(families)),
            descs,
        }
    }

    /// Puts `limits` in place of the previous rule set's.
    pub(super) fn replace(&self, limits: &[ConfiguredLimit]) {
        self.current.store(Arc::new(LimitGauges::of(limits)));
    }
}

impl Collector for ConfiguredLimits {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let families = self.current.load();
        let mut collected = families.limit.collect();
        collected.extend(families.window.collect());
        collected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    fn limit(key: &str, index: u8, requests: u64, window_seconds: f64) -> ConfiguredLimit {
        ConfiguredLimit {
            domain: "edge".into(),
            key: key.into(),
            index,
            algorithm: "sliding_window",
            requests,
            window_seconds,
        }
    }

    /// Each limit is one series of each gauge, labelled to join the per-rule hit series.
    #[test]
    fn each_limit_is_a_series() {
        let metrics = Metrics::new(0.8, 100);
        metrics.record_configured_limits(&[
            limit("edge.api_key", 0, 100, 60.0),
            limit("edge.api_key", 1, 1000, 3600.0),
        ]);
        let text = metrics.render();
        let labels =
            r#"algorithm="sliding_window",domain="edge",key="edge.api_key",key1="api_key",key2="""#;
        assert!(
            text.contains(&format!(r#"sluice_rule_limit{{{labels},limit="0"}} 100"#)),
            "{text}"
        );
        assert!(text.contains(&format!(r#"sluice_rule_limit{{{labels},limit="1"}} 1000"#)));
        assert!(text.contains(&format!(
            r#"sluice_rule_window_seconds{{{labels},limit="1"}} 3600"#
        )));
    }

    /// A reload replaces the set: a limit that is gone leaves no series behind.
    #[test]
    fn a_reload_leaves_no_stale_series() {
        let metrics = Metrics::new(0.8, 100);
        metrics.record_configured_limits(&[limit("edge.old", 0, 5, 1.0)]);
        metrics.record_configured_limits(&[limit("edge.new", 0, 7, 60.0)]);
        let text = metrics.render();
        assert!(!text.contains("edge.old"), "{text}");
        assert!(text.contains(r#"key="edge.new""#));
        metrics.record_configured_limits(&[]);
        assert!(!metrics.render().contains("sluice_rule_limit{"));
    }
}
