//! Persistence of the memory store under `--data-dir`: a journal of changed counters written
//! once per interval (group commit, off the request path), compacted into snapshots in the
//! background, and read back before the server reports ready.
//!
//! Calls only flip a dirty bit on the counters they change (and remember the key the first
//! time in an interval); the flush task collects those counters' states every interval,
//! writes them as one checksummed frame, and optionally syncs. A journal record holds a
//! counter's whole state after its last change in the interval (a sliding log: its new
//! entries), so a hot key costs one record per interval, not one per hit.
//!
//! A write that fails (a full disk) costs no counts: memory holds them, and a snapshot of
//! every counter is retried until it is written (`failure.rs`). Nothing in the directory can
//! stop or hang a start: files that are not regular files, or that no sluice could have
//! written, are set aside with a warning (`restore.rs`).

mod codec;
mod compact;
mod error;
mod failure;
mod file;
mod flush;
mod journal;
mod open;
mod restore;
mod secret;
mod settings;
mod store;

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use parking_lot::Mutex;

use self::journal::Journal;
use super::MemoryStore;
use super::memory::MemoryOptions;

pub use self::codec::DecodeError;
pub use self::error::PersistError;
#[cfg(feature = "fuzzing")]
pub(crate) use self::restore::{restore_bytes, restore_payload};
pub(crate) use self::settings::DEFAULT_INTERVAL;
pub use self::settings::PersistSettings;

/// The name of the lock file that keeps a second sluice out of the data directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// Running totals behind [`PersistStats`](super::PersistStats).
#[derive(Debug, Default)]
struct PersistTotals {
    flushes: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    snapshots: AtomicU64,
    restored: AtomicU64,
    set_aside: AtomicU64,
}

/// The state shared by flushes and the compaction thread.
#[derive(Debug)]
struct PersistState {
    settings: PersistSettings,
    memory: Arc<MemoryStore>,
    journal: Mutex<Journal>,
    /// Whether the files miss changes that only a snapshot can restore, and the retries.
    failure: failure::Failure,
    /// A compaction thread is running.
    compacting: AtomicBool,
    /// Compact at the next flush (files left by an earlier run).
    compact_soon: AtomicBool,
    /// Set while the fingerprint key exists only in memory (the disk was full at start).
    key_pending: AtomicBool,
    /// The running compaction thread, joined by the last flush.
    compaction: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Size of the last snapshot written, in bytes.
    snapshot_bytes: AtomicU64,
    totals: PersistTotals,
    /// Held for the store's lifetime: the directory's exclusive lock.
    _lock: File,
}

/// The memory store with persistence: counts in memory, journals, snapshots, restores.
#[derive(Debug, Clone)]
pub struct PersistentStore {
    shared: Arc<PersistState>,
}

impl PersistentStore {
    /// The memory store counting underneath.
    pub fn memory(&self) -> &Arc<MemoryStore> {
        &self.shared.memory
    }
}

#[cfg(test)]
mod tests;
