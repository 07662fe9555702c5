//! Hot reload of rule files: a `notify` watcher → debounced signals → compile off the request
//! path → swap the whole rule set. A rule set that fails to compile changes nothing.
//!
//! Each `--config` path is watched itself (recursively, for a directory) and through its parent
//! directory, so edits in place, new and deleted files, renames, and the Kubernetes ConfigMap
//! pattern (a `..data` symlink swapped atomically) all trigger a reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::rules::{self, ConfigErrors, LoadOptions, RuleSet};

/// Quiet time after the last file event before reloading: editors and `kubectl` write in bursts.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch rule files: {0}")]
pub struct WatchError(#[from] notify::Error);

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
        let (signal, mut signals) = mpsc::unbounded_channel();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Reads are not changes; everything else (including errors) is worth a reload.
                if event.is_ok_and(|e| matches!(e.kind, EventKind::Access(_))) {
                    return;
                }
                let _ = signal.send(());
            })?;
        for path in watched_paths(&self.paths) {
            let (path, mode) = path;
            if let Err(error) = watcher.watch(&path, mode) {
                tracing::warn!(path = %path.display(), %error, "not watching this path");
            }
        }
        Ok(async move {
            // The watcher lives as long as this task.
            let _watcher = watcher;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    received = signals.recv() => if received.is_none() { return },
                }
                // Let a burst of events settle, then reload once.
                loop {
                    match tokio::time::timeout(DEBOUNCE, signals.recv()).await {
                        Ok(Some(())) => continue,
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
                let reloader = self.clone();
                // Compiling reads files: keep it off the runtime's request workers.
                let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
            }
        })
    }
}

/// Each configured path (recursively, if a directory) and its parent directory (so a path that
/// is replaced, created or swapped as a symlink is noticed too).
fn watched_paths(paths: &[PathBuf]) -> Vec<(PathBuf, RecursiveMode)> {
    let mut watched = Vec::new();
    for path in paths {
        if path.is_dir() {
            watched.push((path.clone(), RecursiveMode::Recursive));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => Path::new(".").to_path_buf(),
        };
        watched.push((parent, RecursiveMode::NonRecursive));
    }
    // One watch per directory; where a directory is asked for both ways, recursive wins.
    watched.sort_by_key(|(path, mode)| (path.clone(), *mode == RecursiveMode::NonRecursive));
    watched.dedup_by(|later, first| later.0 == first.0);
    watched
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
