//! Reading `--data-dir` back at start: every snapshot and journal, combined counter by counter.
//!
//! Combining is order-independent (see `store::saved`), so restore reads every data file it
//! finds, whatever crash left them behind: old files a compaction did not get to delete only
//! cost reading time. Counters whose windows have passed are not restored.

use std::path::{Path, PathBuf};

use super::PersistError;
use super::codec;
use super::file::{self, Kind};
use crate::clock::Nanos;
use crate::store::MemoryStore;

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
}

/// Reads every data file in `dir` into `memory`, skipping counters idle at `now`. Problems
/// inside files are logged as warnings; only an unreadable directory is an error.
pub fn restore(dir: &Path, memory: &MemoryStore, now: Nanos) -> Result<Restored, PersistError> {
    let io = |error| PersistError::Io {
        path: dir.to_path_buf(),
        error,
    };
    let mut found: Vec<(u64, Kind, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some((kind, seq)) = Kind::parse(&name) {
            found.push((seq, kind, entry.path()));
        } else if name.ends_with(".tmp") {
            // A snapshot whose writing was interrupted: never renamed, so never complete.
            let _ = std::fs::remove_file(entry.path());
        }
    }
    found.sort_by_key(|(seq, kind, _)| (*seq, *kind == Kind::Journal));
    let mut restored = Restored::default();
    for (seq, kind, path) in &found {
        restored.last_seq = restored.last_seq.max(*seq);
        restored.files += 1;
        let mut bad_records = 0u64;
        let mut visit = |mut payload: &[u8]| {
            while !payload.is_empty() {
                match codec::decode(&mut payload) {
                    Ok(saved) => {
                        restored.records += 1;
                        memory.restore(saved, now);
                    }
                    Err(_) => {
                        // The frame's checksum held, so a writer of another build wrote this:
                        // the rest of the frame cannot be delimited.
                        bad_records += 1;
                        break;
                    }
                }
            }
        };
        match file::read(path, *kind, &mut visit) {
            Ok(report) => {
                if let Some(problem) = report.problem {
                    tracing::warn!(file = %path.display(), frames_kept = report.frames, "data file: {problem}");
                }
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
