//! Reading files that must be regular files: bounded in size, never blocking on a FIFO or device.
//!
//! Every file the library reads (rules, certificates, data files, the host's name) goes
//! through [`open`]: the file is opened with `O_NONBLOCK`, so a FIFO or a device in its place
//! cannot block the thread that opens it (a FIFO with no writer would block a plain `open`
//! forever), and the descriptor itself is checked to be a regular file, so nothing can be
//! swapped in between a check and the read.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest certificate or key file (PEM) read: a system CA bundle is about 200 KB. The
/// gRPC listener's TLS, the Redis client's TLS and the xDS client's TLS all read theirs with it.
pub const MAX_PEM_BYTES: u64 = 4 << 20;

/// Opens `path` for reading if it is a regular file (symlinks followed); returns it with its
/// size at open. Anything else (a FIFO, socket, device or directory) is an
/// [`io::ErrorKind::InvalidInput`] error naming what it is.
pub fn open(path: &Path) -> io::Result<(File, u64)> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    Ok((file, meta.len()))
}

/// Reads the whole of `path`, a regular file of at most `max` bytes.
pub fn read(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (file, size) = open(path)?;
    read_open(file, size, max)
}

/// Reads `path` as UTF-8 text, a regular file of at most `max` bytes, with its permission
/// bits (`0o644`) as the descriptor read had them, so no other file can be swapped in between
/// the check and the read; `0` where files have no such bits.
pub fn read_to_string_with_mode(path: &Path, max: u64) -> io::Result<(String, u32)> {
    let (file, size) = open(path)?;
    #[cfg(unix)]
    let mode = std::os::unix::fs::PermissionsExt::mode(&file.metadata()?.permissions()) & 0o7777;
    #[cfg(not(unix))]
    let mode = 0;
    Ok((utf8(read_open(file, size, max)?)?, mode))
}

/// The rest of [`read`], on a file already open.
fn read_open(file: File, size: u64, max: u64) -> io::Result<Vec<u8>> {
    if size > max {
        return Err(too_large(size, max));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // One byte past the cap tells a file that grew after the check from one that did not.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64, max));
    }
    Ok(bytes)
}

/// Reads `path` as UTF-8 text, a regular file of at most `max` bytes.
pub fn read_to_string(path: &Path, max: u64) -> io::Result<String> {
    utf8(read(path, max)?)
}

fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file is not valid UTF-8"))
}

/// The host's name as the kernel holds it (`/proc/sys/kernel/hostname`, Linux: a file that
/// reports no size, read like any other up to a small cap); `None` where it cannot be read.
pub fn hostname() -> Option<String> {
    let name = read_to_string(Path::new("/proc/sys/kernel/hostname"), MAX_HOSTNAME_BYTES).ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// A host name is at most 64 bytes on Linux; room to spare.
const MAX_HOSTNAME_BYTES: u64 = 256;

/// What a non-regular file is, as an error.
fn not_regular(kind: &std::fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file (a {})", describe(kind)),
    )
}

/// A file type in words.
pub fn describe(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "FIFO";
        }
        if kind.is_socket() {
            return "socket";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "device";
        }
    }
    if kind.is_dir() {
        "directory"
    } else if kind.is_symlink() {
        "symbolic link"
    } else if kind.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

fn too_large(size: u64, max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "file is larger than the {} limit ({size} bytes)",
            bytes(max)
        ),
    )
}

/// A byte count in the largest whole binary unit (`16 MiB`), for messages.
pub fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n.is_multiple_of(1 << 30) => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n.is_multiple_of(1 << 20) => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n.is_multiple_of(1 << 10) => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// Moves a file that must not be read again out of the way, as `<name>.bad` (or `.bad.1`,
/// `.bad.2` … when taken), and returns the new path; `None` when it could not be renamed.
pub fn set_aside(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    (0..100u32)
        .map(|n| match n {
            0 => path.with_file_name(format!("{name}.bad")),
            n => path.with_file_name(format!("{name}.bad.{n}")),
        })
        .find(|aside| std::fs::symlink_metadata(aside).is_err())
        .and_then(|aside| std::fs::rename(path, &aside).ok().map(|()| aside))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A regular file is read whole; one past the cap is refused with the cap in the message.
    #[test]
    fn regular_files_read_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read(&path, 5).unwrap(), b"12345");
        let error = read(&path, 4).unwrap_err().to_string();
        assert!(error.contains("larger than the 4 bytes limit"), "{error}");
    }

    /// A FIFO with no writer is refused at once instead of blocking the reader.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let error = read(&path, 1 << 20).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("FIFO"), "{error}");
    }

    /// Directories and devices are not regular files either.
    #[test]
    fn directories_and_devices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let error = read(dir.path(), 1 << 20).unwrap_err().to_string();
        assert!(error.contains("directory"), "{error}");
        let error = read(Path::new("/dev/zero"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(error.contains("device"), "{error}");
    }

    /// Setting aside picks a free `.bad` name.
    #[test]
    fn set_aside_finds_a_free_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.journal");
        std::fs::write(&path, b"a").unwrap();
        assert_eq!(set_aside(&path), Some(dir.path().join("x.journal.bad")));
        std::fs::write(&path, b"b").unwrap();
        assert_eq!(set_aside(&path), Some(dir.path().join("x.journal.bad.1")));
        assert!(!path.exists());
    }

    /// The host's name comes through the bounded reader although procfs reports a size of 0.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_hostname_is_read_from_procfs() {
        let name = hostname().expect("Linux has /proc/sys/kernel/hostname");
        assert!(!name.is_empty() && !name.contains('\n'), "{name:?}");
    }

    /// Sizes in messages use the largest whole unit.
    #[test]
    fn byte_counts_in_words() {
        assert_eq!(bytes(16 << 20), "16 MiB");
        assert_eq!(bytes(1500), "1500 bytes");
        assert_eq!(bytes(2 << 10), "2 KiB");
    }
}
