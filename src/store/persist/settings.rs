//! How the memory store persists ([`PersistSettings`]) and its defaults.

use std::path::PathBuf;
use std::time::Duration;

/// The default flush interval: the most a SIGKILL can lose.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);

/// How the memory store persists.
#[derive(Debug, Clone)]
pub struct PersistSettings {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// How often changed counters are written (the most a SIGKILL can lose).
    pub interval: Duration,
    /// Sync each write to the disk (survives power loss, not only a crash of the process).
    pub sync: bool,
    /// Compact once the journal holds this many bytes (and at least as many as the last
    /// snapshot): restore time stays bounded by about twice the active state.
    pub compact_after: u64,
    /// Refuse to start on a damaged fingerprint key instead of setting it aside with its data
    /// (`--strict-data-dir`).
    pub strict: bool,
}

impl PersistSettings {
    /// The defaults for `dir`: every 50 ms, no sync, compaction past 16 MiB of journal.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            interval: DEFAULT_INTERVAL,
            sync: false,
            compact_after: 16 << 20,
            strict: false,
        }
    }
}
