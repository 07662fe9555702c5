//! The data directory's fingerprint key: the secret under which the memory store fingerprints
//! its counters, kept beside the data (file `FINGERPRINT_KEY`, owner-only) so that a restart
//! names every counter as the run before it did.

use std::io::{self, Write};
use std::path::Path;

use super::file::sync_dir;
use crate::store::fingerprint::random_key;

/// The file holding the key, as 32 hexadecimal digits.
pub const FILE: &str = "FINGERPRINT_KEY";

/// The key kept in `dir`, if there is one.
pub fn load(dir: &Path) -> io::Result<Option<[u8; 16]>> {
    let path = dir.join(FILE);
    // Read as every data file is: a regular file only (a FIFO here cannot hang the start), capped.
    match crate::files::read_to_string(&path, 4096) {
        Ok(text) => parse(text.trim()).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{FILE} does not hold 32 hexadecimal digits"),
            )
        }),
        // A symbolic link to nothing is a key that was there and is gone, not a first start.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::read_link(&path) {
            Ok(target) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{FILE} is a symbolic link to {}, which does not exist",
                    target.display()
                ),
            )),
            Err(_) => Ok(None),
        },
        Err(e) => Err(io::Error::new(e.kind(), format!("{FILE}: {e}"))),
    }
}

/// Writes `key` into `dir`, durably (a temporary file renamed into place, then the directory
/// synced), so that no data file is ever written before the key that names its counters.
pub fn create(dir: &Path, key: &[u8; 16]) -> io::Result<()> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    let written = owner_only().open(&tmp).and_then(|mut file| {
        file.write_all(hex(key).as_bytes())?;
        file.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, dir.join(FILE))) {
        // A partial file must not keep the space a retry needs.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// The key kept in `dir`, or a new one with whether it still has to be written: a full disk
/// must not stop the start, so a key that cannot be written yet is kept in memory and written
/// before the first data file (see `compact`).
/// An error is a key file that is there but damaged (not 32 hexadecimal digits, not a regular
/// file, unreadable): the caller decides whether to set it aside or refuse.
pub fn load_or_new(dir: &Path) -> io::Result<([u8; 16], Option<io::Error>)> {
    match load(dir)? {
        Some(key) => Ok((key, None)),
        None => Ok(new_key(dir)),
    }
}

/// A new random key, written into `dir` if the disk takes it (else the error, and the key is
/// written later).
pub fn new_key(dir: &Path) -> ([u8; 16], Option<io::Error>) {
    let key = random_key();
    (key, create(dir, &key).err())
}

fn owner_only() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

fn hex(key: &[u8; 16]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse(text: &str) -> Option<[u8; 16]> {
    if text.len() != 32 || !text.is_ascii() {
        return None;
    }
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key is created once and read back unchanged; a damaged file is an error.
    #[test]
    fn key_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (first, unwritten) = load_or_new(dir.path()).unwrap();
        assert!(unwritten.is_none());
        assert_eq!(load(dir.path()).unwrap(), Some(first));
        assert_eq!(load_or_new(dir.path()).unwrap().0, first);
        std::fs::write(dir.path().join(FILE), "not hex").unwrap();
        let err = load_or_new(dir.path()).unwrap_err();
        assert!(err.to_string().contains(FILE), "{err}");
    }
}
