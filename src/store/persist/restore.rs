//! Reading `--data-dir` back at start: every snapshot and journal, combined counter by counter.
//!
//! Combining is order-independent (see `store::saved`), so restore reads every data file it
//! finds, whatever crash left them behind: old files a compaction did not get to delete only
//! cost reading time. Counters whose windows have passed are not restored.
//!
//! Nothing found there can stop or hang a start: a data file that is not a regular file (a
//! FIFO, a directory), or whose sequence number no sluice reaches, is set aside as
//! `<name>.bad` with a warning; so is a `LOCK` that is not a regular file, a file named like a
//! data file that another program (or a newer sluice) wrote, and a damaged fingerprint key
//! together with the data files it named.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::file::{self, FileKind, set_aside};
use super::{LOCK_FILE, PersistError, codec};
use crate::clock::Nanos;
use crate::store::MemoryStore;

/// The highest sequence number a data file may have. A sluice starts one file per rotation,
/// at most a few per second, so this is never reached; a higher name (a stray
/// `ffffffffffffffff.journal`) would leave no number for the next journal.
pub const MAX_SEQ: u64 = 1 << 48;

/// Opens and locks the directory's `LOCK` file. One that is not a regular file is set aside
/// first; it is opened without blocking (a FIFO there cannot hang the start).
pub fn lock(dir: &Path) -> Result<File, PersistError> {
    let path = dir.join(LOCK_FILE);
    let io = |error| PersistError::Io {
        path: path.clone(),
        error,
    };
    if let Ok(meta) = std::fs::metadata(&path)
        && !meta.is_file()
    {
        set_aside(
            &path,
            &format!(
                "not a regular file (a {})",
                crate::files::describe(&meta.file_type())
            ),
        );
    }
    let mut options = File::options();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let lock = options.open(&path).map_err(io)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(PersistError::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

/// A fingerprint key that neither of its files yields (`error` says how): the key files and
/// every data file, whose counters it named and no new key can find again, are set aside
/// together, with one loud warning saying what is lost. Returns how many files were set aside.
pub(super) fn set_aside_damaged_key(dir: &Path, error: &io::Error) -> usize {
    let key = dir.join(super::secret::FILE);
    let mut moved = 0;
    for name in [super::secret::FILE, super::secret::COPY] {
        let path = dir.join(name);
        moved += usize::from(
            std::fs::symlink_metadata(&path).is_ok()
                && set_aside(&path, "the fingerprint key is damaged"),
        );
    }
    let data_files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| FileKind::parse(&entry.file_name().to_string_lossy()).is_some())
        .map(|entry| entry.path())
        .collect();
    for path in &data_files {
        moved += usize::from(set_aside(
            path,
            "its counters are named by the damaged fingerprint key",
        ));
    }
    tracing::error!(
        dir = %dir.display(),
        key = %key.display(),
        %error,
        data_files_set_aside = data_files.len(),
        "data directory: the fingerprint key is damaged (neither FINGERPRINT_KEY nor its \
         checksummed copy FINGERPRINT_KEY.copy holds it), so the counts saved under it cannot be \
         found again: they are lost (hits they held may be admitted again until their windows \
         pass); the key and its data files are set aside as *.bad and a new key is made \
         (--strict-data-dir refuses to start instead)"
    );
    moved
}

/// Restores the records of one frame's payload; returns how many were read and whether the
/// rest of the frame could not be decoded.
fn decode_payload(mut payload: &[u8], memory: &MemoryStore, now: Nanos) -> (u64, bool) {
    let mut records = 0;
    while !payload.is_empty() {
        match codec::decode(&mut payload) {
            Ok(saved) => {
                records += 1;
                memory.restore(saved, now);
            }
            // The frame's checksum held, so a writer of another build wrote this: the rest
            // of the frame cannot be delimited.
            Err(_) => return (records, true),
        }
    }
    (records, false)
}

#[cfg(feature = "fuzzing")]
/// Restores counters from the bytes of one data file (a journal, or a snapshot when
/// `snapshot`), as a start reads it: header, frames, checksums, records. For the fuzz targets.
pub(crate) fn restore_bytes(bytes: &[u8], snapshot: bool, memory: &MemoryStore, now: Nanos) -> u64 {
    let kind = if snapshot {
        FileKind::Snapshot
    } else {
        FileKind::Journal
    };
    let mut records = 0;
    let mut visit = |payload: &[u8]| records += decode_payload(payload, memory, now).0;
    // Reading from memory cannot fail.
    let _ = file::read_from(bytes, bytes.len() as u64, kind, &mut visit);
    records
}

#[cfg(feature = "fuzzing")]
/// Restores the records of `payload` as if it were a frame that passed its checksum. For the
/// fuzz targets (a fuzzer rarely forges a CRC-32).
pub(crate) fn restore_payload(payload: &[u8], memory: &MemoryStore, now: Nanos) -> u64 {
    decode_payload(payload, memory, now).0
}

/// What was found in the data directory.
#[derive(Debug, Default)]
pub struct Restored {
    /// The highest sequence number seen (0 when the directory held no data file).
    pub last_seq: u64,
    /// Data files read.
    pub files: usize,
    /// Counters held after restore.
    pub counters: usize,
    /// Records read (a counter may have several).
    pub records: u64,
    /// Files set aside as `*.bad` (not regular, out of range, or not this sluice's).
    pub set_aside: usize,
}

/// Reads every data file in `dir` into `memory`, skipping counters idle at `now`. Problems
/// inside files are logged as warnings; only an unreadable directory is an error.
pub fn restore(dir: &Path, memory: &MemoryStore, now: Nanos) -> Result<Restored, PersistError> {
    let io = |error| PersistError::Io {
        path: dir.to_path_buf(),
        error,
    };
    let mut found: Vec<(u64, FileKind, PathBuf)> = Vec::new();
    let mut aside = 0;
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        match FileKind::parse(&name) {
            Some((_, seq)) if seq > MAX_SEQ => {
                aside += usize::from(set_aside(
                    &entry.path(),
                    &format!(
                        "sequence number {seq:#x} is past the last one sluice uses ({MAX_SEQ:#x})"
                    ),
                ));
            }
            Some((kind, seq)) => found.push((seq, kind, entry.path())),
            None if name.ends_with(".tmp") => {
                // A snapshot whose writing was interrupted: never renamed, so never complete.
                let _ = std::fs::remove_file(entry.path());
            }
            None => {}
        }
    }
    found.sort_by_key(|(seq, kind, _)| (*seq, *kind == FileKind::Journal));
    let mut restored = Restored {
        set_aside: aside,
        ..Restored::default()
    };
    for (seq, kind, path) in &found {
        restored.last_seq = restored.last_seq.max(*seq);
        restored.files += 1;
        let mut bad_records = 0u64;
        let mut visit = |payload: &[u8]| {
            let (records, bad) = decode_payload(payload, memory, now);
            restored.records += records;
            bad_records += u64::from(bad);
        };
        match file::read(path, *kind, &mut visit) {
            // Another program's file, or a newer sluice's: kept for whoever it belongs to,
            // never left where a compaction would delete it.
            Ok(report) if report.foreign => {
                let why = report.problem.unwrap_or_default();
                restored.set_aside += usize::from(set_aside(path, &why));
            }
            Ok(report) => {
                if let Some(problem) = report.problem {
                    tracing::warn!(file = %path.display(), frames_kept = report.frames, "data file: {problem}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                restored.set_aside += usize::from(set_aside(path, &e.to_string()));
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "data file unreadable; skipped")
            }
        }
        if bad_records > 0 {
            tracing::warn!(file = %path.display(), frames = bad_records, "undecodable records; skipped the rest of those frames");
        }
    }
    restored.counters = memory.len();
    Ok(restored)
}
