//! The files under `--data-dir`: their names, their 8-byte header, checksummed frames, and setting a bad one aside.
//!
//! ```text
//! file   = "SLUICE" kind:u8 version:u8 frame*        kind: b'J' journal, b'S' snapshot
//! frame  = len:u32le crc32:u32le payload[len]         payload = record* (see codec.rs)
//! ```
//! A frame is written with one `write` call, so a crash leaves at most one torn frame, at the
//! end. Reading stops at the first frame that is short or fails its checksum, and reports it.

use std::io::{self, BufReader, Read};
use std::path::Path;

/// The first six bytes of every file.
const MAGIC: &[u8; 6] = b"SLUICE";
/// The format version written, and the only one read.
pub const VERSION: u8 = 1;
/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 8;
/// The largest frame read back (writers keep frames near [`FRAME_TARGET`]).
const MAX_FRAME: usize = 256 << 20;
/// Writers close a frame once its payload passes this size.
pub const FRAME_TARGET: usize = 1 << 20;

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Counters changed in each flush interval.
    Journal,
    /// Every active counter at one moment.
    Snapshot,
}

impl FileKind {
    fn tag(self) -> u8 {
        match self {
            FileKind::Journal => b'J',
            FileKind::Snapshot => b'S',
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            FileKind::Journal => ".journal",
            FileKind::Snapshot => ".snapshot",
        }
    }

    /// The file name of sequence number `seq` (hex, so names sort by number).
    pub fn file_name(self, seq: u64) -> String {
        format!("{seq:016x}{}", self.suffix())
    }

    /// Reads a file name back: its kind and sequence number.
    pub fn parse(name: &str) -> Option<(FileKind, u64)> {
        [FileKind::Journal, FileKind::Snapshot]
            .into_iter()
            .find_map(|kind| {
                let hex = name.strip_suffix(kind.suffix())?;
                (hex.len() == 16)
                    .then(|| u64::from_str_radix(hex, 16).ok())
                    .flatten()
                    .map(|seq| (kind, seq))
            })
    }

    /// The header that starts a file of this kind.
    pub fn header(self) -> [u8; 8] {
        let mut header = [0; 8];
        header[..6].copy_from_slice(MAGIC);
        header[6] = self.tag();
        header[7] = VERSION;
        header
    }
}

/// A frame being filled: the header's room is reserved up front so the finished frame goes
/// out in one write.
#[derive(Debug)]
pub struct FrameBuf(Vec<u8>);

impl Default for FrameBuf {
    fn default() -> Self {
        Self(vec![0; FRAME_HEADER])
    }
}

impl FrameBuf {
    /// Where records are appended.
    pub fn payload(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }

    /// Bytes of payload so far.
    pub fn payload_len(&self) -> usize {
        self.0.len() - FRAME_HEADER
    }

    /// The finished frame: header (length and checksum) and payload.
    pub fn seal(mut self) -> Vec<u8> {
        let len = (self.0.len() - FRAME_HEADER) as u32;
        let crc = crc32fast::hash(&self.0[FRAME_HEADER..]);
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0[4..8].copy_from_slice(&crc.to_le_bytes());
        self.0
    }
}

/// How reading one file went.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Frames read and checked.
    pub frames: u64,
    /// The header is not one this sluice writes: another program's file, or a newer format.
    pub foreign: bool,
    /// Why reading stopped before the end, with the offset and the bytes left unread.
    pub problem: Option<String>,
}

/// Reads the frames of `path`, a file of `kind`, handing each intact payload to `visit`.
/// A bad header skips the whole file; a short or corrupt frame ends the read. Both are
/// reported, never returned as errors: only failing to open or read the file is an error,
/// and so is a path that is not a regular file ([`io::ErrorKind::InvalidInput`]; a FIFO is
/// never opened in a way that could block). Reading stops at the size the file had when
/// opened.
pub fn read(path: &Path, kind: FileKind, visit: &mut dyn FnMut(&[u8])) -> io::Result<ReadReport> {
    let (file, size) = crate::files::open(path)?;
    read_from(file.take(size), size, kind, visit)
}

/// As [`read`], from `input` of `size` bytes (the fuzz targets feed bytes straight in).
pub fn read_from(
    input: impl Read,
    size: u64,
    kind: FileKind,
    visit: &mut dyn FnMut(&[u8]),
) -> io::Result<ReadReport> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut report = ReadReport::default();
    let mut header = [0u8; 8];
    if read_full(&mut input, &mut header)? < header.len() || header[..6] != MAGIC[..] {
        report.problem = Some("not a sluice data file (bad header)".into());
        report.foreign = true;
        return Ok(report);
    }
    if header[6] != kind.tag() || header[7] != VERSION {
        report.problem = Some(format!(
            "unsupported kind {:?} or version {} (this sluice reads version {VERSION})",
            header[6] as char, header[7]
        ));
        report.foreign = true;
        return Ok(report);
    }
    let mut offset = header.len() as u64;
    let mut payload = Vec::new();
    loop {
        let mut frame = [0u8; FRAME_HEADER];
        let got = read_full(&mut input, &mut frame)?;
        if got == 0 {
            return Ok(report);
        }
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let left = size.saturating_sub(offset + FRAME_HEADER as u64);
        let problem = if got < FRAME_HEADER || len as u64 > left || len > MAX_FRAME {
            Some("torn frame")
        } else if len == 0 {
            // Writers never write an empty frame; zeros (a sparse or zero-filled file) would
            // otherwise read as empty frames, 8 bytes at a time, to the end.
            Some("empty frame")
        } else {
            payload.resize(len, 0);
            if read_full(&mut input, &mut payload)? < len {
                Some("torn frame")
            } else if crc32fast::hash(&payload) != crc {
                Some("checksum mismatch")
            } else {
                None
            }
        };
        if let Some(problem) = problem {
            report.problem = Some(format!(
                "{problem} at byte {offset}; skipped the last {} bytes",
                size.saturating_sub(offset)
            ));
            return Ok(report);
        }
        visit(&payload);
        report.frames += 1;
        offset += (FRAME_HEADER + len) as u64;
    }
}

/// Whether `path` is a regular file starting with the header this sluice writes for `kind`:
/// only such a file may be deleted as superseded (anything else is set aside).
pub fn is_ours(path: &Path, kind: FileKind) -> bool {
    let Ok((file, _)) = crate::files::open(path) else {
        return false;
    };
    let mut header = [0u8; 8];
    let mut input = file;
    matches!(read_full(&mut input, &mut header), Ok(8))
        && header[..6] == MAGIC[..]
        && header[6] == kind.tag()
        && header[7] == VERSION
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Makes a rename durable (a no-op where directories cannot be opened).
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    match std::fs::File::open(dir) {
        Ok(d) => d.sync_all().or(Ok(())),
        Err(_) => Ok(()),
    }
}

/// Renames `path` to `<name>.bad` so no later start reads it, with a warning saying why;
/// whether it was moved.
pub(super) fn set_aside(path: &Path, why: &str) -> bool {
    match crate::files::set_aside(path) {
        Some(aside) => {
            tracing::warn!(
                file = %path.display(), moved_to = %aside.display(),
                "data directory: {why}; set aside"
            );
            true
        }
        None => {
            tracing::warn!(
                file = %path.display(),
                "data directory: {why}; skipped (it could not be renamed)"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut buf = FrameBuf::default();
        buf.payload().extend_from_slice(payload);
        buf.seal()
    }

    fn read_all(bytes: &[u8]) -> (Vec<Vec<u8>>, ReadReport) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        let mut seen = Vec::new();
        let report = read(&path, FileKind::Journal, &mut |p| seen.push(p.to_vec())).unwrap();
        (seen, report)
    }

    /// Names carry kind and sequence number, and sort by number.
    #[test]
    fn names_round_trip() {
        let name = FileKind::Snapshot.file_name(0x2a);
        assert_eq!(name, "000000000000002a.snapshot");
        assert_eq!(FileKind::parse(&name), Some((FileKind::Snapshot, 42)));
        assert_eq!(FileKind::parse("2a.journal"), None);
        assert_eq!(FileKind::parse("LOCK"), None);
    }

    /// Intact frames are read in order.
    #[test]
    fn frames_round_trip() {
        let mut bytes = FileKind::Journal.header().to_vec();
        bytes.extend(frame(b"one"));
        bytes.extend(frame(b"two"));
        bytes.extend(frame(b"three"));
        let (seen, report) = read_all(&bytes);
        assert_eq!(seen, [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
        assert_eq!(
            report,
            ReadReport {
                frames: 3,
                foreign: false,
                problem: None
            }
        );
    }

    /// A torn or corrupt last frame is reported and skipped; the frames before it are kept.
    #[test]
    fn bad_tail_is_reported_and_skipped() {
        let mut good = FileKind::Journal.header().to_vec();
        good.extend(frame(b"kept"));
        let tail = frame(b"lost");
        let mut torn = good.clone();
        torn.extend(&tail[..tail.len() - 1]);
        let mut flipped = good.clone();
        flipped.extend(&tail);
        *flipped.last_mut().unwrap() ^= 1;
        let mut garbage = good.clone();
        garbage.extend([0xff; 5]);
        let mut zeros = good.clone();
        zeros.extend([0; 4096]);
        for (bytes, why) in [
            (torn, "torn"),
            (flipped, "checksum"),
            (garbage, "torn"),
            (zeros, "empty frame"),
        ] {
            let (seen, report) = read_all(&bytes);
            assert_eq!(seen, [b"kept".to_vec()]);
            let problem = report.problem.expect("a problem");
            assert!(problem.contains(why), "{problem}");
        }
    }

    /// A file that is not ours, or of another version, is skipped whole.
    #[test]
    fn foreign_files_are_skipped() {
        let (seen, report) = read_all(b"hello world, not ours");
        assert!(seen.is_empty() && report.problem.is_some());
        let mut future = FileKind::Journal.header();
        future[7] = VERSION + 1;
        let (seen, report) = read_all(&future);
        assert!(seen.is_empty() && report.problem.unwrap().contains("version"));
    }
}
