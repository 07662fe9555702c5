//! Rule files as a rule source: read and compile them, and watch them for changes.
//!
//! The `--config` paths are watched by `crate::watch`: edits in place, new and deleted rule
//! files, renames, and the Kubernetes ConfigMap pattern (a `..data` symlink swapped atomically)
//! trigger a reload; files the loader does not read (logs, data directories) do not.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

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

/// The rule paths and how they compile.
pub(super) struct RuleFiles {
    pub(super) paths: Vec<PathBuf>,
    pub(super) options: LoadOptions,
}

impl RuleFiles {
    /// Reads and compiles every file.
    pub(super) fn load(&self) -> Result<RuleSet, ConfigErrors> {
        rules::load(&self.paths, &self.options)
    }

    /// Debounced changes of the rule files until `shutdown` is cancelled.
    pub(super) fn changes(&self, shutdown: CancellationToken) -> Result<Changes, WatchError> {
        Ok(Changes::start(
            self.paths.clone(),
            RULE_FILES,
            DEBOUNCE,
            shutdown,
        )?)
    }
}
