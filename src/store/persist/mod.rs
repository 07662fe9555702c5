//! Persistence of the memory store under `--data-dir`: a journal of changed counters written
//! once per interval (group commit, off the request path), compacted into snapshots in the
//! background, and read back before the server reports ready.
//!
//! Calls only flip a dirty bit on the counters they change (and remember the key the first
//! time in an interval); the flush task collects those counters' states every interval,
//! writes them as one checksummed frame, and optionally syncs. A journal record holds a
//! counter's whole state after its last change in the interval (a sliding log: its new
//! entries), so a hot key costs one record per interval, not one per hit.

mod codec;
mod compact;
mod file;
mod journal;
mod restore;
mod secret;

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use self::file::FrameBuf;
use self::journal::Journal;
use super::memory::MemoryOptions;
use super::{
    Charge, FlushFuture, MemoryStore, Outcome, PersistStats, Store, StoreFuture, StoreStats,
};
use crate::clock::Nanos;

pub use self::codec::DecodeError;
pub use self::file::VERSION as FORMAT_VERSION;
pub use self::secret::FILE as FINGERPRINT_KEY_FILE;

/// The name of the lock file that keeps a second sluice out of the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// The default flush interval: the most a SIGKILL can lose.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);

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
}

impl PersistSettings {
    /// The defaults for `dir`: every 50 ms, no sync, compaction past 16 MiB of journal.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            interval: DEFAULT_INTERVAL,
            sync: false,
            compact_after: 16 << 20,
        }
    }
}

/// Why the data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file or the directory could not be created, read or written. The cause is in the
    /// message, not chained as a `source` (an error chain would print it twice).
    #[error("data directory {}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error(
        "data directory {} is in use by another sluice (its {LOCK_FILE} file is locked); give each server its own --data-dir",
        .0.display()
    )]
    Locked(PathBuf),
}

/// Running totals behind [`PersistStats`].
#[derive(Debug, Default)]
struct Totals {
    flushes: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    snapshots: AtomicU64,
    restored: AtomicU64,
}

/// The state shared by flushes and the compaction thread.
#[derive(Debug)]
struct Shared {
    settings: PersistSettings,
    memory: Arc<MemoryStore>,
    journal: Mutex<Journal>,
    /// A compaction thread is running.
    compacting: AtomicBool,
    /// Compact at the next flush (files left by an earlier run, or a failed write).
    compact_soon: AtomicBool,
    /// The running compaction thread, joined by the last flush.
    compaction: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Size of the last snapshot written, in bytes.
    snapshot_bytes: AtomicU64,
    totals: Totals,
    /// Held for the store's lifetime: the directory's exclusive lock.
    _lock: File,
}

/// The memory store with persistence: counts in memory, journals, snapshots, restores.
#[derive(Debug, Clone)]
pub struct PersistentStore {
    shared: Arc<Shared>,
}

impl PersistentStore {
    /// Opens (creating if needed) and locks the data directory, restores every counter still
    /// active at `now` into a new memory store built with `memory`, and starts a new journal.
    /// Blocking: call it before serving (or from a blocking task).
    pub fn open(
        settings: PersistSettings,
        memory: MemoryOptions,
        now: Nanos,
    ) -> Result<Self, PersistError> {
        let dir = settings.dir.clone();
        let io = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |error| PersistError::Io { path, error }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(PersistError::Locked(dir)),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        let key_file = dir.join(secret::FILE);
        let fingerprint_key = secret::load_or_create(&dir).map_err(io(&key_file))?;
        let memory = Arc::new(MemoryStore::with_options(MemoryOptions {
            journal: true,
            fingerprint_key: Some(fingerprint_key),
            ..memory
        }));
        let started = std::time::Instant::now();
        let restored = restore::restore(&dir, &memory, now)?;
        tracing::info!(
            dir = %dir.display(),
            files = restored.files,
            records = restored.records,
            counters = restored.counters,
            elapsed = ?started.elapsed(),
            "restored counters"
        );
        let journal = Journal::create(&dir, restored.last_seq + 1).map_err(io(&dir))?;
        let shared = Shared {
            settings,
            memory,
            journal: Mutex::new(journal),
            compacting: AtomicBool::new(false),
            compaction: Mutex::new(None),
            compact_soon: AtomicBool::new(restored.files > 0),
            snapshot_bytes: AtomicU64::new(0),
            totals: Totals::default(),
            _lock: lock,
        };
        shared
            .totals
            .restored
            .store(restored.counters as u64, Ordering::Relaxed);
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// The memory store counting underneath.
    pub fn memory(&self) -> &Arc<MemoryStore> {
        &self.shared.memory
    }

    /// Writes every counter changed since the last flush as one group commit (blocking),
    /// syncing when configured or when `sync` asks; starts a compaction when one is due.
    /// Failures are logged and counted: counting goes on in memory.
    pub fn flush_now(&self, now: Nanos, sync: bool) {
        self.write_changes(now, sync);
    }

    /// The final flush: waits for a running compaction, then writes and syncs the last changes,
    /// so nothing is left half-done when the process exits (and the lock is free after).
    pub fn close(&self, now: Nanos) {
        let running = self.shared.compaction.lock().take();
        if let Some(thread) = running {
            let _ = thread.join();
        }
        self.write_changes(now, true);
    }

    fn write_changes(&self, now: Nanos, sync: bool) {
        let shared = &self.shared;
        let mut journal = shared.journal.lock();
        let mut frames = Vec::new();
        let mut frame = FrameBuf::default();
        let mut records = 0u64;
        shared.memory.drain_dirty(&mut |view| {
            codec::encode(view, frame.payload());
            records += 1;
            if frame.payload_len() >= file::FRAME_TARGET {
                frames.push(std::mem::take(&mut frame).seal());
            }
        });
        if frame.payload_len() > 0 {
            frames.push(frame.seal());
        }
        let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
        let mut written = self.rotate_if_broken(&mut journal);
        if written.is_ok() && !frames.is_empty() {
            written = journal.append(&frames);
        }
        if written.is_ok() && (sync || shared.settings.sync) {
            written = journal.sync();
        }
        let totals = &shared.totals;
        totals.flushes.fetch_add(1, Ordering::Relaxed);
        match written {
            Ok(()) => {
                totals.records.fetch_add(records, Ordering::Relaxed);
                totals.bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(e) => {
                // Those counters are no longer marked changed: the snapshot this schedules
                // writes them again.
                if totals.errors.fetch_add(1, Ordering::Relaxed) == 0 || journal.broken {
                    tracing::warn!(journal = %journal.path().display(), error = %e, records, "journal write failed; counting goes on in memory");
                }
                shared.compact_soon.store(true, Ordering::Relaxed);
            }
        }
        let due = journal.bytes
            >= shared
                .settings
                .compact_after
                .max(shared.snapshot_bytes.load(Ordering::Relaxed))
            || shared.compact_soon.load(Ordering::Relaxed);
        drop(journal);
        if due && !sync && !shared.compacting.swap(true, Ordering::AcqRel) {
            shared.compact_soon.store(false, Ordering::Relaxed);
            compact::start(self.shared.clone(), now);
        }
    }

    /// After a failed write the journal may end in a torn frame: continue in a new file.
    fn rotate_if_broken(&self, journal: &mut Journal) -> std::io::Result<()> {
        if journal.broken {
            *journal = Journal::create(&self.shared.settings.dir, journal.seq + 1)?;
        }
        Ok(())
    }

    /// Running totals for metrics.
    pub fn persist_stats(&self) -> PersistStats {
        let t = &self.shared.totals;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        PersistStats {
            flushes: get(&t.flushes),
            records: get(&t.records),
            bytes: get(&t.bytes),
            errors: get(&t.errors),
            snapshots: get(&t.snapshots),
            restored: get(&t.restored),
        }
    }
}

impl Store for PersistentStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        self.shared.memory.apply(charges, now)
    }

    fn apply_one_now(&self, charge: &Charge, now: Nanos) -> Option<Outcome> {
        self.shared.memory.apply_one_now(charge, now)
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn sweep(&self, now: Nanos) {
        self.shared.memory.sweep(now);
    }

    fn flush_interval(&self) -> Option<Duration> {
        Some(self.shared.settings.interval)
    }

    fn flush(&self, now: Nanos, last: bool) -> FlushFuture<'_> {
        let store = self.clone();
        Box::pin(async move {
            let flushed = tokio::task::spawn_blocking(move || {
                if last {
                    store.close(now);
                } else {
                    store.flush_now(now, false);
                }
            })
            .await;
            if let Err(e) = flushed {
                tracing::error!(error = %e, "journal flush task failed");
            }
        })
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            persist: Some(self.persist_stats()),
            ..self.shared.memory.stats()
        }
    }
}

#[cfg(test)]
mod tests;
