//! The group commit: the counters changed since the last flush written, a compaction when due.

use std::sync::atomic::Ordering;

use super::file::{self, FrameBuf};
use super::{MemoryStore, PersistentStore, codec, compact};
use crate::clock::Nanos;

impl PersistentStore {
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
