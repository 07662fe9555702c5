//! Hot reload of rule files: a `notify` watcher → debounced signals → compile off the request
//! path → swap the whole rule set. A rule set that fails to compile changes nothing.
//!
//! The `--config` paths are watched by `crate::watch`: edits in place, new and deleted rule
//! files, renames, and the Kubernetes ConfigMap pattern (a `..data` symlink swapped atomically)
//! trigger a reload; files the loader does not read (logs, data directories) do not.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::rules::{self, ConfigErrors, LoadOptions, RuleSet};
use crate::watch::{Changes, DirectoryRule};

/// Quiet time after the last file event before reloading: editors and `kubectl` write in bursts.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// The files of a rule directory that are rules: the loader's own rule, so nothing else there (a
/// log, a data directory) triggers or delays a reload.
const RULE_FILES: DirectoryRule = DirectoryRule {
    skip: rules::is_skipped,
    reads: rules::is_rule_file,
};

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch rule files: {0}")]
pub struct WatchError(notify::Error);

impl From<notify::Error> for WatchError {
    fn from(error: notify::Error) -> Self {
        Self(error)
    }
}

/// Loads rule sets and keeps the current one.
pub struct Reloader {
    paths: Vec<PathBuf>,
    options: LoadOptions,
    rules: Arc<ArcSwap<RuleSet>>,
    metrics: Arc<Metrics>,
    generation: AtomicU64,
}

impl Reloader {
    /// Loads the initial rule set (generation 1); fails with every error if it does not load.
    pub fn load(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConfigErrors> {
        let initial =
            rules::load(&paths, &options).inspect_err(|_| metrics.record_rules_failed())?;
        log_loaded(&initial, 1);
        metrics.record_rules_loaded(1, unix_now());
        Ok(Self {
            paths,
            options,
            rules: Arc::new(ArcSwap::from_pointee(initial)),
            metrics,
            generation: AtomicU64::new(1),
        })
    }

    /// The swappable rule set readers load from.
    pub fn rules(&self) -> Arc<ArcSwap<RuleSet>> {
        self.rules.clone()
    }

    /// How many rule sets have loaded successfully (1 after start).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Re-reads every file and swaps the rules if they compile; otherwise keeps the current
    /// rules and logs every error. Returns whether the new rules are in force.
    pub fn reload(&self) -> bool {
        match rules::load(&self.paths, &self.options) {
            Ok(loaded) => {
                let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                log_loaded(&loaded, generation);
                self.rules.store(Arc::new(loaded));
                self.metrics.record_rules_loaded(generation, unix_now());
                true
            }
            Err(errors) => {
                self.metrics.record_rules_failed();
                let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                tracing::error!(
                    ?errors,
                    "rules did not reload; the previous rules stay in force"
                );
                false
            }
        }
    }

    /// Watches the rule paths and reloads on change until `shutdown` is cancelled.
    pub fn watch(
        self: Arc<Self>,
        shutdown: CancellationToken,
    ) -> Result<impl Future<Output = ()>, WatchError> {
        let mut changes = Changes::start(self.paths.clone(), RULE_FILES, DEBOUNCE, shutdown)?;
        Ok(async move {
            while changes.changed().await {
                let reloader = self.clone();
                // Compiling reads files: keep it off the runtime's request workers.
                let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
            }
        })
    }
}

fn log_loaded(rules: &RuleSet, generation: u64) {
    tracing::info!(generation, summary = %rules.summary(), "rules loaded");
    for warning in &rules.warnings {
        tracing::warn!(%warning, "rule file");
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
