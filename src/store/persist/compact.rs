//! Compaction: rotate the journal, write every active counter to a new snapshot beside it,
//! then delete the files the snapshot supersedes. Runs on its own thread while flushes go on.
//!
//! Safe at any crash point because restore combines files order-independently: until the
//! snapshot is renamed into place the old files are intact, and after it they are redundant.
//! Each shard is encoded under its lock (a short pause for that shard only), written after.
//!
//! A snapshot is also how persistence catches up after a failed write: once the new journal
//! is open, every later change goes to it, and the snapshot holds everything before.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::PersistState;
use super::codec;
use super::file::{FRAME_TARGET, FileKind, FrameBuf, sync_dir};
use crate::clock::Nanos;

/// Starts compacting on a new thread; the `compacting` flag is cleared when it ends.
pub(super) fn start(shared: Arc<PersistState>, now: Nanos) {
    let spawned = std::thread::Builder::new()
        .name("sluice-compact".into())
        .spawn({
            let shared = shared.clone();
            move || {
                // Failures are recorded (and retried) by `run`.
                let _ = run(&shared, now);
                shared.compacting.store(false, Ordering::Release);
            }
        });
    match spawned {
        Ok(thread) => {
            // The previous thread (if any) has ended: it cleared `compacting` as its last act.
            *shared.compaction.lock() = Some(thread);
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the compaction thread");
            shared.compacting.store(false, Ordering::Release);
        }
    }
}

/// Compacts on the calling thread and records how it went; the error, if it failed.
pub(super) fn run(shared: &PersistState, now: Nanos) -> Result<(), io::Error> {
    match compact(shared, now) {
        Ok(bytes) => {
            shared.snapshot_bytes.store(bytes, Ordering::Relaxed);
            shared.totals.snapshots.fetch_add(1, Ordering::Relaxed);
            shared.failure.caught_up();
            Ok(())
        }
        Err(Failed { error, behind }) => {
            shared.totals.errors.fetch_add(1, Ordering::Relaxed);
            if behind {
                shared.failure.failed(now, "snapshot", &error);
            } else {
                shared.failure.snapshot_failed(now, &error);
            }
            Err(error)
        }
    }
}

/// Compacts on the calling thread once no other compaction runs (waiting for one that does):
/// a snapshot taken after this call started, with every older file deleted. How a removal
/// (an admin reset) reaches the disk: records only ever add to a counter, so the files that
/// hold the removed counter must go.
pub(super) fn run_exclusively(shared: &PersistState, now: Nanos) -> Result<(), io::Error> {
    loop {
        if !shared.compacting.swap(true, Ordering::AcqRel) {
            let done = run(shared, now);
            shared.compacting.store(false, Ordering::Release);
            return done;
        }
        let running = shared.compaction.lock().take();
        match running {
            Some(thread) => {
                let _ = thread.join();
            }
            // Started, its handle not stored yet: it is a moment away.
            None => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
}

/// A compaction that failed, and whether the files now miss changes (no journal is open, or
/// the snapshot was to catch up after failed writes).
struct Failed {
    error: io::Error,
    behind: bool,
}

/// Rotates the journal and writes the snapshot; returns the snapshot's size.
fn compact(shared: &PersistState, now: Nanos) -> Result<u64, Failed> {
    let dir = &shared.settings.dir;
    // No data file before the key that names its counters.
    if shared.key_pending.load(Ordering::Acquire) {
        super::secret::create(dir, &shared.memory.fingerprint_key()).map_err(|error| Failed {
            error,
            behind: true,
        })?;
        shared.key_pending.store(false, Ordering::Release);
    }
    // Everything journaled before this point is in memory, which the snapshot reads after it;
    // everything after goes to the new journal.
    let (seq, catching_up) = {
        let mut journal = shared.journal.lock();
        let catching_up = shared.failure.behind() || !journal.is_open();
        journal.rotate(dir).map_err(|error| Failed {
            error,
            behind: true,
        })?;
        shared.failure.journal_resumed();
        (journal.seq, catching_up)
    };
    let failed = |error| Failed {
        error,
        behind: catching_up,
    };
    let tmp = dir.join(format!("{}.tmp", FileKind::Snapshot.file_name(seq)));
    let written = write_snapshot(shared, &tmp, now).and_then(|bytes| {
        std::fs::rename(&tmp, dir.join(FileKind::Snapshot.file_name(seq)))?;
        Ok(bytes)
    });
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(e) => {
            // A partial snapshot must not keep the space a retry needs.
            let _ = std::fs::remove_file(&tmp);
            return Err(failed(e));
        }
    };
    sync_dir(dir).map_err(failed)?;
    remove_older(dir, seq);
    tracing::debug!(seq, bytes, "snapshot written");
    Ok(bytes)
}

fn write_snapshot(shared: &PersistState, path: &Path, now: Nanos) -> io::Result<u64> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(&FileKind::Snapshot.header())?;
    let mut bytes = FileKind::Snapshot.header().len() as u64;
    let memory = &shared.memory;
    for shard in 0..memory.shard_count() {
        let mut frames = Vec::new();
        let mut frame = FrameBuf::default();
        memory.visit_shard(shard, now, &mut |view| {
            codec::encode(view, frame.payload());
            if frame.payload_len() >= FRAME_TARGET {
                frames.push(std::mem::take(&mut frame).seal());
            }
        });
        if frame.payload_len() > 0 {
            frames.push(frame.seal());
        }
        for frame in frames {
            file.write_all(&frame)?;
            bytes += frame.len() as u64;
        }
    }
    file.sync_all()?;
    Ok(bytes)
}

/// Deletes the data files older than `seq` (superseded by snapshot `seq`). A file named like
/// one that this sluice did not write (another program's, a newer format's, one dropped in
/// while serving) is set aside instead: deleting is only for what is known to be superseded.
fn remove_older(dir: &Path, seq: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((kind, _)) = FileKind::parse(&name.to_string_lossy()).filter(|(_, s)| *s < seq)
        else {
            continue;
        };
        let path = entry.path();
        if !super::file::is_ours(&path, kind) {
            super::file::set_aside(&path, "not a data file this sluice wrote");
        } else if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(file = %path.display(), error = %e, "cannot delete an old data file");
        }
    }
}
