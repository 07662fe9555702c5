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
use crate::rules::{self, ConfigErrors, LoadOptions, RuleSet, RuntimeLayout};
use crate::watch::{Changes, DirectoryRule};

/// Quiet time after the last file event before reloading: editors and `kubectl` write in bursts.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// The files of a rule directory that are rules: the loader's own rule, so nothing else there (a
/// log, a data directory) triggers or delays a reload.
const RULE_FILES: DirectoryRule = DirectoryRule {
    skip: rules::is_skipped,
    reads: rules::is_rule_file,
};

/// The files of a directory in envoyproxy/ratelimit's layout: every file, dot entries too.
const EVERY_FILE: DirectoryRule = DirectoryRule {
    skip: |_| false,
    reads: |_| true,
};

/// The files of a directory in envoyproxy/ratelimit's layout with `RUNTIME_IGNOREDOTFILES`.
const UNDOTTED_FILES: DirectoryRule = DirectoryRule {
    skip: rules::is_skipped,
    reads: |_| true,
};

/// Where rule sets come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSource {
    /// `--config`: files, or directories of `*.yaml`/`*.yml`.
    Files(Vec<PathBuf>),
    /// envoyproxy/ratelimit's layout (the `ratelimit` personality).
    Runtime(RuntimeLayout),
}

impl RuleSource {
    fn load(&self, options: &LoadOptions) -> Result<RuleSet, ConfigErrors> {
        match self {
            RuleSource::Files(paths) => rules::load(paths, options),
            RuleSource::Runtime(layout) => layout.load(options),
        }
    }

    /// What the watcher watches, and which entries of a watched directory are inputs.
    fn watched(&self) -> (Vec<PathBuf>, DirectoryRule) {
        match self {
            RuleSource::Files(paths) => (paths.clone(), RULE_FILES),
            RuleSource::Runtime(layout) => {
                let rule = if layout.ignore_dotfiles {
                    UNDOTTED_FILES
                } else {
                    EVERY_FILE
                };
                (layout.directory().into_iter().collect(), rule)
            }
        }
    }
}

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
    source: RuleSource,
    options: LoadOptions,
    rules: Arc<ArcSwap<RuleSet>>,
    metrics: Arc<Metrics>,
    generation: AtomicU64,
}

impl Reloader {
    /// Loads the initial rule set (generation 1); fails with every error if it does not load.
    pub fn load(
        source: RuleSource,
        options: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConfigErrors> {
        let initial = source
            .load(&options)
            .inspect_err(|_| metrics.record_rules_failed())?;
        log_loaded(&initial, 1);
        metrics.record_rules_loaded(1, unix_now());
        Ok(Self::with(source, options, metrics, initial, 1))
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
                    "rules did not load; serving no rules until they do",
                );
                Self::with(source, options, metrics, RuleSet::default(), 0)
            }
        }
    }

    fn with(
        source: RuleSource,
        options: LoadOptions,
        metrics: Arc<Metrics>,
        rules: RuleSet,
        generation: u64,
    ) -> Self {
        Self {
            source,
            options,
            rules: Arc::new(ArcSwap::from_pointee(rules)),
            metrics,
            generation: AtomicU64::new(generation),
        }
    }

    /// The swappable rule set readers load from.
    pub fn rules(&self) -> Arc<ArcSwap<RuleSet>> {
        self.rules.clone()
    }

    /// How many rule sets have loaded successfully (1 after a start with rules; 0 until the
    /// first rule set loads after [`Reloader::load_or_wait`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Re-reads every file and swaps the rules if they compile; otherwise keeps the current
    /// rules and logs every error. Returns whether the new rules are in force.
    pub fn reload(&self) -> bool {
        match self.source.load(&self.options) {
            Ok(loaded) => {
                let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                log_loaded(&loaded, generation);
                self.rules.store(Arc::new(loaded));
                self.metrics.record_rules_loaded(generation, unix_now());
                true
            }
            Err(errors) => {
                self.metrics.record_rules_failed();
                log_failed(
                    &errors,
                    "rules did not reload; the previous rules stay in force",
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
        let (inputs, rule) = self.source.watched();
        let mut changes = Changes::start(inputs, rule, DEBOUNCE, shutdown)?;
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

fn log_failed(errors: &ConfigErrors, what: &str) {
    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
    tracing::error!(?errors, "{what}");
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
