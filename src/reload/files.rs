//! Rule files as a rule source: `--config` files, or envoyproxy/ratelimit's layout (the
//! `ratelimit` personality); read and compile them, and watch them for changes.
//!
//! The inputs are watched by `crate::watch`: edits in place, new and deleted rule files, renames,
//! and the Kubernetes ConfigMap pattern (a `..data` symlink swapped atomically) trigger a reload;
//! files the loader does not read (logs, data directories) do not.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::rules::{self, CompatLayout, ConfigErrors, LoadOptions, RuleSet};
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

/// Where rule files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSource {
    /// `--config`: files, or directories of `*.yaml`/`*.yml`.
    Files(Vec<PathBuf>),
    /// envoyproxy/ratelimit's layout (the `ratelimit` personality).
    Runtime(CompatLayout),
}

impl RuleSource {
    /// Reads and compiles every file.
    pub(super) fn load(&self, options: &LoadOptions) -> Result<RuleSet, ConfigErrors> {
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

    /// Debounced changes of the files until `shutdown` is cancelled.
    pub(super) fn changes(&self, shutdown: CancellationToken) -> Result<Changes, WatchError> {
        let (inputs, rule) = self.watched();
        Ok(Changes::start(inputs, rule, DEBOUNCE, shutdown)?)
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
