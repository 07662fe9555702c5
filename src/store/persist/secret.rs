//! The data directory's fingerprint key: the secret under which the memory store fingerprints
//! its counters, kept beside the data so that a restart names every counter as the run before
//! it did. It is written twice, each owner-only, so that one damaged file loses nothing:
//!
//! - `FINGERPRINT_KEY`: the key as 32 hexadecimal digits (the format every sluice reads);
//! - `FINGERPRINT_KEY.copy`: the same digits, a space and the CRC-32 of the key's 16 bytes in 8
//!   hexadecimal digits, so that it is known to be intact.
//!
//! At start the checksummed copy wins: a damaged, missing or different `FINGERPRINT_KEY` is set
//! aside (`*.bad`) and written again from it. Without a sound copy (a directory of an older
//! sluice, or a damaged copy) `FINGERPRINT_KEY` alone is read: its first 32 hexadecimal digits,
//! when what follows them is no further digit (garbage appended to the file keeps the key), and
//! the copy is written from it. Only when neither yields the key are the counts it named lost
//! (`restore::set_aside_damaged_key`).

use std::io::{self, Write};
use std::path::Path;

use super::file::{set_aside, sync_dir};
use crate::store::fingerprint::random_key;

/// The file holding the key, as 32 hexadecimal digits.
pub const FILE: &str = "FINGERPRINT_KEY";
/// The second copy, with its checksum.
pub const COPY: &str = "FINGERPRINT_KEY.copy";
/// Hexadecimal digits of a key.
const DIGITS: usize = 32;
/// The most bytes of a key file read.
const MAX_BYTES: u64 = 4096;

/// A key found in the data directory.
#[derive(Debug)]
pub struct Loaded {
    /// The key.
    pub key: [u8; 16],
    /// Damaged key files set aside while finding it (each written again).
    pub set_aside: usize,
}

/// What one of the two files held.
enum Read {
    /// No such file.
    Missing,
    /// The key, and whether the file held exactly what is written (nothing to rewrite).
    Key([u8; 16], bool),
    /// Something that is not this file's key.
    Damaged(io::Error),
}

/// The key kept in `dir`, if there is one (repairing a damaged copy from the other); an error
/// when a key file is there but neither yields the key.
pub fn load(dir: &Path) -> io::Result<Option<Loaded>> {
    let primary = read(dir, FILE, parse_primary);
    let copy = read(dir, COPY, parse_copy);
    let (key, from) = match (&primary, &copy) {
        (Read::Missing, Read::Missing) => return Ok(None),
        (_, Read::Key(key, _)) => (*key, COPY),
        (Read::Key(key, _), _) => (*key, FILE),
        (Read::Damaged(e), _) | (Read::Missing, Read::Damaged(e)) => {
            return Err(io::Error::new(e.kind(), e.to_string()));
        }
    };
    let mut loaded = Loaded { key, set_aside: 0 };
    loaded.repair(dir, FILE, &primary, from);
    loaded.repair(dir, COPY, &copy, from);
    Ok(Some(loaded))
}

impl Loaded {
    /// Writes `name` again unless it already holds the key as written; a damaged one is set
    /// aside first, with a warning saying the key came from `from` and nothing is lost.
    fn repair(&mut self, dir: &Path, name: &str, found: &Read, from: &str) {
        let why = match found {
            Read::Key(key, true) if *key == self.key => return,
            Read::Key(key, _) if *key != self.key => {
                format!("{name} names another key than {from}, whose checksum holds")
            }
            Read::Key(..) => format!("{name} holds more than its key"),
            Read::Damaged(e) => e.to_string(),
            Read::Missing if name == COPY => {
                // A directory of an older sluice, or a copy deleted: made, nothing to say.
                return write_quietly(dir, name, &self.key);
            }
            Read::Missing => format!("{name} is missing"),
        };
        let path = dir.join(name);
        if std::fs::symlink_metadata(&path).is_ok() {
            self.set_aside += usize::from(set_aside(
                &path,
                &format!("{why}; the key was read from {from}, nothing is lost"),
            ));
        } else {
            tracing::warn!(file = %path.display(), "data directory: {why}; written again from {from}, nothing is lost");
        }
        write_quietly(dir, name, &self.key);
    }
}

/// Writes one key file, warning if it cannot be written (the key is still in memory and the
/// other file holds it; the next start writes it again).
fn write_quietly(dir: &Path, name: &str, key: &[u8; 16]) {
    if let Err(error) = write(dir, name, &text(name, key)) {
        tracing::warn!(file = %dir.join(name).display(), %error, "data directory: cannot write the fingerprint key's file; the other one holds it");
    }
}

/// A file's parser: the key it holds, and whether it holds nothing else.
type Parse = fn(&[u8]) -> Option<([u8; 16], bool)>;

/// Reads `name` in `dir` with `parse`.
fn read(dir: &Path, name: &str, parse: Parse) -> Read {
    let path = dir.join(name);
    // Read as every data file is: a regular file only (a FIFO here cannot hang the start), capped.
    match crate::files::read(&path, MAX_BYTES) {
        Ok(bytes) => match parse(&bytes) {
            Some((key, exact)) => Read::Key(key, exact),
            None => Read::Damaged(io::Error::new(
                io::ErrorKind::InvalidData,
                match name {
                    FILE => format!("{FILE} does not hold 32 hexadecimal digits"),
                    _ => format!("{name} does not hold a key with its checksum"),
                },
            )),
        },
        // A symbolic link to nothing is a key that was there and is gone, not a first start.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::read_link(&path) {
            Ok(target) => Read::Damaged(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{name} is a symbolic link to {}, which does not exist",
                    target.display()
                ),
            )),
            Err(_) => Read::Missing,
        },
        Err(e) => Read::Damaged(io::Error::new(e.kind(), format!("{name}: {e}"))),
    }
}

/// Writes `key` into `dir`, both files, durably (each a temporary file renamed into place,
/// then the directory synced), so that no data file is ever written before the key that
/// names its counters.
pub fn create(dir: &Path, key: &[u8; 16]) -> io::Result<()> {
    write(dir, FILE, &text(FILE, key))?;
    write(dir, COPY, &text(COPY, key))
}

/// Writes `contents` as `dir/name`, durably.
fn write(dir: &Path, name: &str, contents: &str) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let written = owner_only().open(&tmp).and_then(|mut file| {
        file.write_all(contents.as_bytes())?;
        file.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, dir.join(name))) {
        // A partial file must not keep the space a retry needs.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// The key kept in `dir`, or a new one with whether it still has to be written: a full disk
/// must not stop the start, so a key that cannot be written yet is kept in memory and written
/// before the first data file (see `compact`).
/// An error is a key that is there but that neither file yields (not 32 hexadecimal digits,
/// not a regular file, unreadable): the caller decides whether to set it aside or refuse.
pub fn load_or_new(dir: &Path) -> io::Result<(Loaded, Option<io::Error>)> {
    match load(dir)? {
        Some(loaded) => Ok((loaded, None)),
        None => Ok(new_key(dir)),
    }
}

/// A new random key, written into `dir` if the disk takes it (else the error, and the key is
/// written later).
pub fn new_key(dir: &Path) -> (Loaded, Option<io::Error>) {
    let key = random_key();
    let unwritten = create(dir, &key).err();
    (Loaded { key, set_aside: 0 }, unwritten)
}

fn owner_only() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// What file `name` holds for `key`.
fn text(name: &str, key: &[u8; 16]) -> String {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    match name {
        FILE => hex,
        _ => format!("{hex} {:08x}\n", crc32fast::hash(key)),
    }
}

/// `FINGERPRINT_KEY`: its first 32 hexadecimal digits, unless another digit follows them
/// (then they may be any 32 of a longer number); exact when nothing but whitespace follows.
fn parse_primary(bytes: &[u8]) -> Option<([u8; 16], bool)> {
    let text = bytes.trim_ascii_start();
    let key = hex_key(text.get(..DIGITS)?)?;
    let rest = &text[DIGITS..];
    if rest.first().is_some_and(u8::is_ascii_hexdigit) {
        return None;
    }
    Some((key, rest.trim_ascii().is_empty()))
}

/// `FINGERPRINT_KEY.copy`: 32 hexadecimal digits, a space and their CRC-32 in 8; exact when
/// only a newline follows.
fn parse_copy(bytes: &[u8]) -> Option<([u8; 16], bool)> {
    let key = hex_key(bytes.get(..DIGITS)?)?;
    let crc = bytes.get(DIGITS + 1..DIGITS + 9)?;
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    (bytes[DIGITS] == b' ' && crc == crc32fast::hash(&key))
        .then(|| (key, &bytes[DIGITS + 9..] == b"\n"))
}

/// 32 hexadecimal digits as a key.
fn hex_key(digits: &[u8]) -> Option<[u8; 16]> {
    if digits.len() != DIGITS || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let text = std::str::from_utf8(digits).ok()?;
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `dir` holds the two key files and nothing else.
    fn both_files_only(dir: &Path) -> bool {
        let names: std::collections::BTreeSet<_> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names == [FILE, COPY].map(std::ffi::OsString::from).into()
    }

    /// The key is created once, in both files, and read back unchanged; with both damaged it
    /// is an error.
    #[test]
    fn key_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (first, unwritten) = load_or_new(dir.path()).unwrap();
        assert!(unwritten.is_none());
        assert!(both_files_only(dir.path()));
        assert_eq!(load(dir.path()).unwrap().unwrap().key, first.key);
        assert_eq!(load_or_new(dir.path()).unwrap().0.key, first.key);
        std::fs::write(dir.path().join(FILE), "not hex").unwrap();
        std::fs::write(dir.path().join(COPY), "not hex either").unwrap();
        let err = load_or_new(dir.path()).unwrap_err();
        assert!(err.to_string().contains(FILE), "{err}");
    }

    /// Either file damaged in any way, alone, loses nothing: the key comes from the other,
    /// the damaged one is set aside and written again.
    #[test]
    fn one_damaged_file_loses_nothing() {
        type Damage = fn(&Path);
        let damages: [(&str, Damage); 6] = [
            ("garbage appended", |p| {
                let mut text = std::fs::read(p).unwrap();
                text.extend_from_slice(b"\x00\xffgarbage\n");
                std::fs::write(p, text).unwrap();
            }),
            ("truncated", |p| {
                std::fs::write(p, "0123456789abcdef").unwrap()
            }),
            ("empty", |p| std::fs::write(p, "").unwrap()),
            ("one digit changed", |p| {
                let mut text = std::fs::read(p).unwrap();
                text[3] = if text[3] == b'0' { b'1' } else { b'0' };
                std::fs::write(p, text).unwrap();
            }),
            ("removed", |p| std::fs::remove_file(p).unwrap()),
            ("a dangling symlink", |p| {
                std::fs::remove_file(p).unwrap();
                std::os::unix::fs::symlink("/nonexistent/sluice-key", p).unwrap();
            }),
        ];
        for name in [FILE, COPY] {
            for (what, damage) in damages {
                // A changed digit in the primary is told by the copy's checksum; in the copy,
                // by the checksum itself.
                let dir = tempfile::tempdir().unwrap();
                let (created, _) = load_or_new(dir.path()).unwrap();
                damage(&dir.path().join(name));
                let loaded = load(dir.path()).unwrap().unwrap();
                assert_eq!(loaded.key, created.key, "{name} {what}");
                let again = load(dir.path()).unwrap().unwrap();
                assert_eq!(
                    (again.key, again.set_aside),
                    (created.key, 0),
                    "{name} {what}: both files sound again"
                );
            }
        }
    }

    /// An older sluice's directory (no copy): its key is read, the copy written; appended
    /// garbage keeps the key, more digits do not.
    #[test]
    fn an_older_directory_gets_its_copy() {
        let dir = tempfile::tempdir().unwrap();
        let key = "00112233445566778899aabbccddeeff";
        std::fs::write(dir.path().join(FILE), format!("{key}\n")).unwrap();
        let loaded = load(dir.path()).unwrap().unwrap();
        assert_eq!(loaded.set_aside, 0);
        assert!(both_files_only(dir.path()));
        std::fs::remove_file(dir.path().join(COPY)).unwrap();
        std::fs::write(dir.path().join(FILE), format!("{key}\u{0}junk")).unwrap();
        assert_eq!(load(dir.path()).unwrap().unwrap().key, loaded.key);
        std::fs::remove_file(dir.path().join(COPY)).unwrap();
        std::fs::write(dir.path().join(FILE), format!("{key}0")).unwrap();
        assert!(load(dir.path()).is_err());
    }
}
