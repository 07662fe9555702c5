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
mod failure;
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
    Charge, Cleared, FlushFuture, MemoryStore, Outcome, PersistStats, ResetFuture, Store,
    StoreError, StoreFuture, StoreStats,
};
use crate::clock::Nanos;

pub use self::codec::DecodeError;
#[cfg(feature = "fuzzing")]
pub(crate) use self::restore::{restore_bytes, restore_payload};

/// The name of the lock file that keeps a second sluice out of the data directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

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
    /// `--data-dir` names something that is not a directory.
    #[error("--data-dir {}: {what}, not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// What it is instead.
        what: String,
    },
    /// The fingerprint key is damaged and `--strict-data-dir` asks not to set it aside.
    #[error(
        "data directory {}: {error}; --strict-data-dir refuses to start on a damaged key (without it the key and the data files it names are set aside and a new key is made)",
        path.display()
    )]
    DamagedKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        error: std::io::Error,
    },
}

/// Refuses a `--data-dir` that exists as something other than a directory (a regular file, a
/// dangling symbolic link), saying which, before anything tries to create it.
fn check_is_directory(dir: &std::path::Path) -> Result<(), PersistError> {
    let not_a_directory = |what: String| PersistError::NotADirectory {
        path: dir.to_path_buf(),
        what,
    };
    let Ok(link) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(meta) => Err(not_a_directory(format!(
            "it is a {}",
            if meta.is_file() {
                "regular file"
            } else {
                crate::files::describe(&meta.file_type())
            }
        ))),
        Err(_) if link.file_type().is_symlink() => {
            let target = std::fs::read_link(dir).unwrap_or_default();
            Err(not_a_directory(format!(
                "it is a symbolic link to {}, which does not exist",
                target.display()
            )))
        }
        Err(e) => Err(PersistError::Io {
            path: dir.to_path_buf(),
            error: e,
        }),
    }
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
    set_aside: AtomicU64,
}

/// The state shared by flushes and the compaction thread.
#[derive(Debug)]
struct Shared {
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
        check_is_directory(&dir)?;
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let lock = restore::lock(&dir)?;
        let key_file = dir.join(secret::FILE);
        let (fingerprint_key, unwritten_key, key_set_aside) = match secret::load_or_new(&dir) {
            Ok((key, unwritten)) => (key, unwritten, 0),
            Err(error) if settings.strict => {
                return Err(PersistError::DamagedKey {
                    path: key_file,
                    error,
                });
            }
            Err(error) => {
                let moved = restore::set_aside_damaged_key(&dir, &error);
                let (key, unwritten) = secret::new_key(&dir);
                (key, unwritten, moved)
            }
        };
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
        let mut journal = Journal::closed(&dir, restored.last_seq);
        let failure = failure::Failure::default();
        // A full disk must not stop the start: the key, then the journal, are written once the
        // disk can take them (a compaction writes a pending key before any data file).
        let key_pending = AtomicBool::new(unwritten_key.is_some());
        if let Some(e) = unwritten_key {
            failure.failed(now, "writing the fingerprint key", &e);
        } else if let Err(e) = journal.rotate(&dir) {
            failure.failed(now, "starting a journal", &e);
        }
        let shared = Shared {
            settings,
            memory,
            journal: Mutex::new(journal),
            failure,
            key_pending,
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
        shared.totals.set_aside.store(
            (key_set_aside + restored.set_aside) as u64,
            Ordering::Relaxed,
        );
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
    /// so nothing is left half-done when the process exits (and the lock is free after). If
    /// the files are behind (writes failed), a last snapshot is tried here and now.
    pub fn close(&self, now: Nanos) {
        let running = self.shared.compaction.lock().take();
        if let Some(thread) = running {
            let _ = thread.join();
        }
        if self.shared.failure.behind() {
            // A failure is recorded and logged below.
            let _ = compact::run(&self.shared, now);
        }
        self.write_changes(now, true);
        if self.shared.failure.behind() {
            tracing::error!(
                dir = %self.shared.settings.dir.display(),
                counters = self.shared.memory.len(),
                "the data directory cannot be written: the changes since the last successful \
                 write are lost with this process"
            );
        }
    }

    fn write_changes(&self, now: Nanos, sync: bool) {
        let shared = &self.shared;
        let mut journal = shared.journal.lock();
        let totals = &shared.totals;
        totals.flushes.fetch_add(1, Ordering::Relaxed);
        if shared.failure.behind() || !journal.is_open() {
            // The files miss changes already: these records alone would not bring them up to
            // date. Memory holds every counter; the snapshot retried below writes them all.
            shared.memory.drain_dirty(&mut |_| {});
            drop(journal);
            if !sync && shared.failure.retry_due(now) {
                self.start_compaction(now);
            }
            return;
        }
        let (frames, records) = collect_changes(&shared.memory);
        let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
        let mut written = journal.append(&frames);
        if written.is_ok() && (sync || shared.settings.sync) {
            written = journal.sync();
        }
        match written {
            Ok(()) => {
                totals.records.fetch_add(records, Ordering::Relaxed);
                totals.bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(e) => {
                totals.errors.fetch_add(1, Ordering::Relaxed);
                shared.failure.failed(now, "journal write", &e);
            }
        }
        let due = journal.bytes
            >= shared
                .settings
                .compact_after
                .max(shared.snapshot_bytes.load(Ordering::Relaxed))
            || shared.compact_soon.load(Ordering::Relaxed)
            || (shared.failure.behind() && shared.failure.retry_due(now));
        drop(journal);
        if due && !sync {
            shared.compact_soon.store(false, Ordering::Relaxed);
            self.start_compaction(now);
        }
    }

    /// Starts a compaction on its own thread unless one is running.
    fn start_compaction(&self, now: Nanos) {
        if !self.shared.compacting.swap(true, Ordering::AcqRel) {
            compact::start(self.shared.clone(), now);
        }
    }

    /// Removes the counters of `charges` and, when any was held, brings the data directory up
    /// to date before returning (blocking): a snapshot without them, every older file deleted,
    /// so a restart does not bring them back. A snapshot that fails leaves the reset done in
    /// memory and retried on disk at the next flush.
    pub fn reset_now(&self, charges: &[Charge], now: Nanos) -> Result<u64, StoreError> {
        let removed = self.shared.memory.remove(charges, now);
        if removed == 0 {
            return Ok(0);
        }
        compact::run_exclusively(&self.shared, now).map_err(|e| {
            self.shared.compact_soon.store(true, Ordering::Relaxed);
            StoreError::ResetNotPersisted(e.to_string())
        })?;
        Ok(removed)
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
            set_aside: get(&t.set_aside),
            failing: self.shared.failure.behind(),
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

    fn reset<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> ResetFuture<'a> {
        let store = self.clone();
        let charges = charges.to_vec();
        Box::pin(async move {
            let counters = tokio::task::spawn_blocking(move || store.reset_now(&charges, now))
                .await
                .map_err(|e| StoreError::ResetNotPersisted(e.to_string()))??;
            Ok(Cleared {
                counters,
                leased_hits: 0,
            })
        })
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

/// Every counter changed since the last flush, as sealed frames, and how many records.
fn collect_changes(memory: &MemoryStore) -> (Vec<Vec<u8>>, u64) {
    let mut frames = Vec::new();
    let mut frame = FrameBuf::default();
    let mut records = 0u64;
    memory.drain_dirty(&mut |view| {
        codec::encode(view, frame.payload());
        records += 1;
        if frame.payload_len() >= file::FRAME_TARGET {
            frames.push(std::mem::take(&mut frame).seal());
        }
    });
    if frame.payload_len() > 0 {
        frames.push(frame.seal());
    }
    (frames, records)
}

#[cfg(test)]
mod tests;
