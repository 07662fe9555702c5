//! Every metric name and label in one place (`names.rs`), with typed recording functions:
//! envoyproxy/ratelimit's families and the hit split (`compat.rs`), the capped per-rule
//! series (`series.rs`), sluice's own decision and rule figures (`decisions.rs`), the figures a
//! store reports about itself (`store.rs`), the xDS stream's (`xds.rs`), the RLQS wing's
//! (`rlqs.rs`), a region's (`region.rs`), the configured limits as gauges (`configured.rs`), the
//! admin listener's (`admin.rs`); envoyproxy/ratelimit's stats under their statsd names
//! (`compat_statsd.rs`).
//!
//! Recording goes through handles resolved once (a rule's series, a family's fixed label),
//! never by formatting label strings per call.

mod admin;
mod capped;
mod compat;
mod compat_statsd;
mod configured;
mod connections;
mod decisions;
mod names;
mod region;
mod rlqs;
mod series;
mod store;
mod xds;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use admin::AdminOutcome;
pub use compat::{HitOutcome, HitSplit};
pub use compat_statsd::{CompatExposition, CompatStat, CompatStatValue, TimerTotals};
pub use configured::ConfiguredLimit;
pub use connections::ConnectionFigures;
pub use decisions::StoreSeries;
pub(crate) use names::{SERVICE_ERROR, STORE_ERROR};
pub use rlqs::ReportedOutcome;
pub use series::{RuleCounters, RuleSeries, SeriesSlot};

/// Latency buckets from 10 µs to 100 ms: a decision should take well under a millisecond.
const LATENCY_BUCKETS: [f64; 13] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,
];

/// The metrics registry and handles.
pub struct Metrics {
    /// Tells this registry from others in one process (see [`SeriesSlot`]).
    id: u64,
    registry: Registry,
    compat: compat::Compat,
    decisions: decisions::Decisions,
    store: store::StoreFigures,
    xds: xds::XdsFigures,
    rlqs: rlqs::RlqsFigures,
    region: region::RegionFigures,
    configured: configured::ConfiguredLimits,
    admin: admin::AdminFigures,
    connections: connections::ConnectionFigures,
    http_connections: connections::ConnectionFigures,
    statsd_send_errors: IntCounter,
    /// A statsd_exporter mapping that makes envoyproxy/ratelimit's families instead.
    exposition: std::sync::OnceLock<std::sync::Arc<dyn CompatExposition>>,
    /// Every family sluice registers, empty ones too (a mapping must not make one twice).
    built_in: std::collections::BTreeSet<String>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("max_series", &self.compat.series.max_series())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry. `near_ratio` is envoyproxy/ratelimit's NEAR_LIMIT_RATIO; `max_series` caps
    /// the per-rule series.
    pub fn new(near_ratio: f64, max_series: usize) -> Self {
        let registry = Registry::new();
        let families = Families {
            registry: &registry,
            names: Default::default(),
        };
        register_process_collector(&families);
        let compat = compat::Compat::new(&families, near_ratio, max_series);
        let folded = compat.series.folded();
        let configured = configured::ConfiguredLimits::new();
        families.collector(Box::new(configured.clone()));
        // Only told apart, never ordered: any unique number will do.
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            compat,
            decisions: decisions::Decisions::new(&families, max_series, folded.clone()),
            rlqs: rlqs::RlqsFigures::new(&families, max_series, folded),
            region: region::RegionFigures::new(&families),
            store: store::StoreFigures::new(&families),
            xds: xds::XdsFigures::new(&families),
            configured,
            admin: admin::AdminFigures::new(&families),
            connections: connections::ConnectionFigures::grpc(&families),
            http_connections: connections::ConnectionFigures::http(&families),
            statsd_send_errors: compat_statsd::send_errors(&families),
            exposition: std::sync::OnceLock::new(),
            built_in: families.names.into_inner(),
            registry,
        }
    }

    /// The family of `/metrics` that a family named `name` would clash with, if any: one of
    /// that name, or one whose series it would name (`name` is `x_bucket`, `x_sum` or `x_count`
    /// of a histogram `x`), or one named like its own series (`name_count`…). The built-in
    /// `ratelimit_service_*` families do not count: a mapping replaces them.
    pub fn family_taken(&self, name: &str) -> Option<&str> {
        const SERIES: [&str; 3] = ["_bucket", "_sum", "_count"];
        let stems = SERIES.iter().filter_map(|s| name.strip_suffix(s));
        let longer = SERIES.iter().map(|s| format!("{name}{s}"));
        std::iter::once(name.to_owned())
            .chain(stems.map(str::to_owned))
            .chain(longer)
            .find_map(|candidate| self.built_in.get(candidate.as_str()))
            .map(String::as_str)
            .filter(|family| !names::COMPAT_FAMILIES.contains(family))
    }

    /// Replaces the configured-limit gauges with those of the rules just loaded; past the
    /// per-rule series cap the rest are left out. Returns how many were left out.
    pub fn record_configured_limits(&self, limits: &[ConfiguredLimit]) -> usize {
        let kept = limits.len().min(self.compat.series.max_series());
        self.configured.replace(&limits[..kept]);
        limits.len() - kept
    }

    /// The Prometheus text exposition of every metric; with a mapping installed
    /// ([`Metrics::expose_compat_with`]), envoyproxy/ratelimit's families as it makes them.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        let exposition = self.exposition.get();
        if exposition.is_some() {
            families.retain(|f| !names::COMPAT_FAMILIES.contains(&f.name()));
        }
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&families, &mut out);
        let mut text = String::from_utf8(out).unwrap_or_default();
        if let Some(exposition) = exposition {
            let taken = |name: &str| self.family_taken(name).is_some();
            text.push_str(&exposition.render(&self.compat_stats(), &taken));
        }
        text
    }

    /// Makes envoyproxy/ratelimit's families on `/metrics` with `exposition` (a statsd_exporter
    /// mapping of the statsd names) instead of the built-in ones; the first one installed stays.
    pub fn expose_compat_with(&self, exposition: std::sync::Arc<dyn CompatExposition>) {
        let _ = self.exposition.set(exposition);
    }
}

/// The standard `process_*` gauges (resident and virtual memory, CPU seconds, open and maximum
/// file descriptors, start time, threads), which dashboards of envoyproxy/ratelimit read.
/// Linux only: elsewhere there is nothing to register.
fn register_process_collector(families: &Families<'_>) {
    #[cfg(target_os = "linux")]
    families.collector(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ));
    #[cfg(not(target_os = "linux"))]
    let _ = families;
}

/// Creates metrics and registers them in one registry, noting each family's name.
struct Families<'r> {
    registry: &'r Registry,
    names: std::cell::RefCell<std::collections::BTreeSet<String>>,
}

impl Families<'_> {
    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help))
    }

    fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help))
    }

    fn float_gauge(&self, name: &str, help: &str) -> Gauge {
        self.register(Gauge::new(name, help))
    }

    fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels))
    }

    /// A latency histogram with [`LATENCY_BUCKETS`].
    fn latency(&self, name: &str, help: &str) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
        self.register(Histogram::with_opts(opts))
    }

    /// A latency histogram with [`LATENCY_BUCKETS`], by `labels`.
    fn latency_vec(&self, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
        self.register(HistogramVec::new(opts, labels))
    }

    fn register<M: Collector + Clone + 'static>(&self, metric: prometheus::Result<M>) -> M {
        // Names are constants of this module, registered once each: failure is a programming
        // error.
        let metric = metric.expect("valid metric definition");
        self.collector(Box::new(metric.clone()));
        metric
    }

    /// Registers `collector` and notes the names of its families.
    fn collector(&self, collector: Box<dyn Collector>) {
        let names: Vec<String> = collector.desc().iter().map(|d| d.fq_name.clone()).collect();
        self.names.borrow_mut().extend(names);
        self.registry
            .register(collector)
            .expect("metric registered once");
    }
}
