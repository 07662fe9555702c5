//! The open journal file: frames are appended to it, one write per frame.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::file::Kind;

/// The journal being written.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    /// Its sequence number (a snapshot taken after rotating away from it gets a later one).
    pub seq: u64,
    /// Bytes written to it, header included.
    pub bytes: u64,
    /// A write failed part-way: the file may end in a torn frame, so nothing more goes in it.
    pub broken: bool,
}

impl Journal {
    /// Creates journal `seq` in `dir` (never reusing a file) and writes its header.
    pub fn create(dir: &Path, seq: u64) -> io::Result<Self> {
        let path = dir.join(Kind::Journal.file_name(seq));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let header = Kind::Journal.header();
        file.write_all(&header)?;
        Ok(Self {
            file,
            path,
            seq,
            bytes: header.len() as u64,
            broken: false,
        })
    }

    /// Appends sealed frames. On failure the journal is marked broken.
    pub fn append(&mut self, frames: &[Vec<u8>]) -> io::Result<()> {
        for frame in frames {
            if let Err(e) = self.file.write_all(frame) {
                self.broken = true;
                return Err(e);
            }
            self.bytes += frame.len() as u64;
        }
        Ok(())
    }

    /// Forces what was written to the disk.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data().inspect_err(|_| self.broken = true)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
