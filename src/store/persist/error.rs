//! Why the data directory could not be opened ([`PersistError`]).

use std::path::PathBuf;

use super::LOCK_FILE;

/// Why the data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file or the directory could not be created, read or written. The cause is in the
    /// message, not chained as a `source` (an error chain would print it twice).
    #[error("data directory {}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error(
        "data directory {} is in use by another sluice (its {LOCK_FILE} file is locked); give each server its own --data-dir",
        .0.display()
    )]
    Locked(PathBuf),
    /// `--data-dir` names something that is not a directory.
    #[error("--data-dir {}: {what}, not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// What it is instead.
        what: String,
    },
    /// The fingerprint key is damaged and `--strict-data-dir` asks not to set it aside.
    #[error(
        "data directory {}: {error}; --strict-data-dir refuses to start on a damaged key (without it the key and the data files it names are set aside and a new key is made)",
        path.display()
    )]
    DamagedKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        error: std::io::Error,
    },
}
