//! The journal being written: frames are appended to the open file, one write per frame.
//!
//! A journal whose write failed is closed (it may end in a torn frame, so nothing more goes
//! in it); the next one is a new file. Creating a file that cannot get its header (a full
//! disk) removes it again, so a later attempt finds the name free: no "File exists" loop.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::file::FileKind;

/// Names tried past one that is taken (a file left by someone else) before giving up.
const NAMES_TRIED: u64 = 16;

/// The journal: the open file, if any, and its sequence number.
#[derive(Debug)]
pub struct Journal {
    file: Option<File>,
    path: PathBuf,
    /// Its sequence number (the next journal or snapshot gets a later one).
    pub seq: u64,
    /// Bytes written to it, header included.
    pub bytes: u64,
}

impl Journal {
    /// No journal open yet; the first one [`Journal::rotate`] creates is `after + 1`.
    pub fn closed(dir: &Path, after: u64) -> Self {
        Self {
            file: None,
            path: dir.join(FileKind::Journal.file_name(after)),
            seq: after,
            bytes: 0,
        }
    }

    /// Whether a file is open for appending.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// Closes this journal and starts the next one in `dir` with its header, never reusing
    /// a file: a name already taken is skipped. On failure no new file is left behind and
    /// no journal is open.
    pub fn rotate(&mut self, dir: &Path) -> io::Result<()> {
        self.file = None;
        let header = FileKind::Journal.header();
        for seq in (self.seq + 1)..=(self.seq + NAMES_TRIED) {
            let path = dir.join(FileKind::Journal.file_name(seq));
            let mut file = match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            };
            if let Err(e) = file.write_all(&header) {
                drop(file);
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            *self = Self {
                file: Some(file),
                path,
                seq,
                bytes: header.len() as u64,
            };
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "the next {NAMES_TRIED} journal names after {} are taken",
                self.path.display()
            ),
        ))
    }

    /// Appends sealed frames. On failure the journal is closed.
    pub fn append(&mut self, frames: &[Vec<u8>]) -> io::Result<()> {
        let Some(file) = &mut self.file else {
            return Err(not_open());
        };
        for frame in frames {
            if let Err(e) = file.write_all(frame) {
                self.file = None;
                return Err(e);
            }
            self.bytes += frame.len() as u64;
        }
        Ok(())
    }

    /// Forces what was written to the disk. On failure the journal is closed.
    pub fn sync(&mut self) -> io::Result<()> {
        let Some(file) = &mut self.file else {
            return Err(not_open());
        };
        file.sync_data().inspect_err(|_| self.file = None)
    }
}

fn not_open() -> io::Error {
    io::Error::other("no journal is open")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rotation skips names taken by stray files and numbers on from the last journal.
    #[test]
    fn rotation_skips_taken_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FileKind::Journal.file_name(2)), b"stray").unwrap();
        let mut journal = Journal::closed(dir.path(), 1);
        journal.rotate(dir.path()).unwrap();
        assert_eq!(journal.seq, 3);
        journal.append(&[b"frame".to_vec()]).unwrap();
        journal.rotate(dir.path()).unwrap();
        assert_eq!(journal.seq, 4);
        assert_eq!(
            std::fs::read(dir.path().join(FileKind::Journal.file_name(3))).unwrap(),
            [&FileKind::Journal.header()[..], b"frame"].concat()
        );
    }

    /// Appending to a closed journal fails without touching any file.
    #[test]
    fn closed_journal_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::closed(dir.path(), 0);
        assert!(!journal.is_open());
        assert!(journal.append(&[vec![1]]).is_err());
        assert!(journal.sync().is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
