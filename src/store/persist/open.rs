//! Opening the data directory: checked, locked, its key loaded, its active counters restored.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::journal::Journal;
use super::{
    MemoryOptions, MemoryStore, PersistError, PersistSettings, PersistState, PersistTotals,
    PersistentStore, failure, restore, secret,
};
use crate::clock::Nanos;

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
            Ok((loaded, unwritten)) => (loaded.key, unwritten, loaded.set_aside),
            Err(error) if settings.strict => {
                return Err(PersistError::DamagedKey {
                    path: key_file,
                    error,
                });
            }
            Err(error) => {
                let moved = restore::set_aside_damaged_key(&dir, &error);
                let (loaded, unwritten) = secret::new_key(&dir);
                (loaded.key, unwritten, moved)
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
        let shared = PersistState {
            settings,
            memory,
            journal: Mutex::new(journal),
            failure,
            key_pending,
            compacting: AtomicBool::new(false),
            compaction: Mutex::new(None),
            compact_soon: AtomicBool::new(restored.files > 0),
            snapshot_bytes: AtomicU64::new(0),
            totals: PersistTotals::default(),
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
