//! The rules in force and how they change. A rule source — rule files (`files.rs`: `--config` or
//! envoyproxy/ratelimit's layout; load, watch, reload) or the xDS stream (`crate::xds`) — compiles
//! a rule set off the request path and hands it to the [`Reloader`], which swaps it in whole; a set
//! that did not compile is reported and changes nothing. Counters live in the store, keyed by what
//! a limit counts, so the limits a new set leaves unchanged keep their counters.

mod files;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use tracing::field::display;

use crate::log_text::{self, LogText};
use crate::metrics::Metrics;
use crate::rules::{ConfigErrors, LoadOptions, RuleSet};

pub use files::{RuleSource, WatchError};

/// The rules in force, swapped whole by whichever source feeds them.
pub struct Reloader {
    rules: Arc<ArcSwap<RuleSet>>,
    /// Each rule set put in force, announced to whoever keeps state derived from the rules
    /// (the RLQS book): told, not polled.
    announced: watch::Sender<Arc<RuleSet>>,
    metrics: Arc<Metrics>,
    generation: AtomicU64,
    /// Serving (and healthy) before the first rule set, with no rules.
    serves_without_rules: bool,
    /// The rule files and how they compile, when rules come from files.
    files: Option<(RuleSource, LoadOptions)>,
}

impl Reloader {
    /// Loads the rule files of `source` (generation 1); fails with every error if they do not
    /// load.
    pub fn load(
        source: RuleSource,
        options: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConfigErrors> {
        let initial = source
            .load(&options)
            .inspect_err(|_| metrics.record_rules_failed())?;
        let reloader = Self::with(RuleSet::default(), metrics, Some((source, options)));
        reloader.install(initial);
        Ok(reloader)
    }

    /// Loads the initial rule set like [`Reloader::load`], but a rule set that does not load
    /// is only logged: the reloader starts with no rules (generation 0) and the first good
    /// reload brings them, as envoyproxy/ratelimit starts.
    pub fn load_or_wait(source: RuleSource, options: LoadOptions, metrics: Arc<Metrics>) -> Self {
        match Self::load(source.clone(), options, metrics.clone()) {
            Ok(loaded) => loaded,
            Err(errors) => {
                log_failed(
                    &errors,
                    None,
                    "rules did not load; serving no rules until they do",
                );
                Self::with(RuleSet::default(), metrics, Some((source, options)))
            }
        }
    }

    /// No rules yet (generation 0), for a source that delivers them later (xDS): with `serve`
    /// the empty rule set is in force and counts as serving (every call is OK, no domain being
    /// known); without it calls fail as unavailable and health reports not serving until the
    /// first set arrives.
    pub fn pending(metrics: Arc<Metrics>, serve: bool) -> Self {
        let placeholder = if serve {
            RuleSet::default()
        } else {
            RuleSet::awaiting()
        };
        let mut reloader = Self::with(placeholder, metrics, None);
        reloader.serves_without_rules = serve;
        reloader
    }

    fn with(
        rules: RuleSet,
        metrics: Arc<Metrics>,
        files: Option<(RuleSource, LoadOptions)>,
    ) -> Self {
        let rules = Arc::new(rules);
        Self {
            announced: watch::Sender::new(rules.clone()),
            rules: Arc::new(ArcSwap::new(rules)),
            metrics,
            generation: AtomicU64::new(0),
            serves_without_rules: false,
            files,
        }
    }

    /// The swappable rule set readers load from.
    pub fn rules(&self) -> Arc<ArcSwap<RuleSet>> {
        self.rules.clone()
    }

    /// The rules in force now, and each rule set put in force after, as it is.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RuleSet>> {
        self.announced.subscribe()
    }

    /// How many rule sets have been put in force (1 after a start with rules; 0 until the first
    /// arrives after [`Reloader::load_or_wait`] or [`Reloader::pending`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Whether sluice answers by rules it was given: a rule set has loaded, or it was told to
    /// serve without one ([`Reloader::pending`] with `serve`).
    pub fn has_rules(&self) -> bool {
        self.serves_without_rules || self.generation() > 0
    }

    /// Puts `rules` in force, logs one line (its generation, source version and summary) and
    /// returns its generation.
    pub fn install(&self, rules: RuleSet) -> u64 {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::info!(
            generation,
            version = rules.version.as_deref().map(|v| display(LogText(v))),
            summary = %rules.summary(),
            "rules loaded"
        );
        let (afresh, count) = rules.counted_afresh(&self.rules.load());
        if count > 0 {
            tracing::warn!(
                count,
                limits = %LogText(&afresh.join(", ")),
                "rules loaded: these limits count afresh, their window, algorithm or calendar \
                 changed: every key starts with its whole allowance (the old counts return if \
                 the change is reverted before their windows pass)"
            );
        }
        for warning in &rules.warnings {
            tracing::warn!(warning = %LogText(&warning.to_string()), "rule file");
        }
        let left_out = self
            .metrics
            .record_configured_limits(&rules.configured_limits());
        if left_out > 0 {
            tracing::warn!(
                left_out,
                "more limits than --metrics-max-series: some have no sluice_rule_limit gauge"
            );
        }
        let rules = Arc::new(rules);
        self.rules.store(rules.clone());
        self.announced.send_replace(rules);
        self.metrics.record_rules_loaded(generation, unix_now());
        generation
    }

    /// Reports a rule set that did not compile (of source version `version`, if it has one):
    /// one log line with every error; the rules in force stay.
    pub fn reject(&self, errors: &ConfigErrors, version: Option<&str>) {
        self.metrics.record_rules_failed();
        log_failed(
            errors,
            version,
            "rules rejected; the previous rules stay in force",
        );
    }

    /// Re-reads the rule files and swaps the rules if they compile; otherwise keeps the current
    /// rules. Returns whether new rules are in force (never, without rule files).
    pub fn reload(&self) -> bool {
        let Some((source, options)) = &self.files else {
            return false;
        };
        match source.load(options) {
            Ok(loaded) => {
                self.install(loaded);
                true
            }
            Err(errors) => {
                self.reject(&errors, None);
                false
            }
        }
    }

    /// Watches the rule files and reloads on change until `shutdown` is cancelled; `None`
    /// without rule files.
    pub fn watch(
        self: Arc<Self>,
        shutdown: CancellationToken,
    ) -> Result<Option<impl Future<Output = ()> + use<>>, WatchError> {
        let Some((source, _)) = &self.files else {
            return Ok(None);
        };
        let mut changes = source.changes(shutdown)?;
        Ok(Some(async move {
            while changes.changed().await {
                let reloader = self.clone();
                // Compiling reads files: keep it off the runtime's request workers.
                let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
            }
        }))
    }
}

fn log_failed(errors: &ConfigErrors, version: Option<&str>, what: &str) {
    // Debug-formatted (quoted, escaped); each error cut, since xDS writes them.
    let errors: Vec<String> = errors
        .iter()
        .map(|e| log_text::cut(&e.to_string()).into_owned())
        .collect();
    let version = version.map(|v| display(LogText(v)));
    tracing::error!(version, ?errors, "{what}");
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
