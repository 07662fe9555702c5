//! Rule files from the paths given on the command line: a file as named, a directory walked
//! for `*.yaml`/`*.yml`, every failure to read recorded as a [`ConfigError`].
//!
//! Only regular files are read (a FIFO named `*.yaml` in a rule directory is skipped with a
//! warning, never opened in a way that could block), each at most [`MAX_FILE_BYTES`], and all
//! of one load at most [`MAX_LOAD_BYTES`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::files;
use crate::rules::ConfigError;

/// The largest rule file read (envoyproxy/ratelimit's largest example is a few KB; 7,000
/// descriptors take about 540 KB).
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;
/// The most bytes of rule files one load reads, all files together.
pub(crate) const MAX_LOAD_BYTES: u64 = 128 << 20;

/// The rule files read so far, and what went wrong.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// `(path, text)` in load order.
    pub files: Vec<(PathBuf, String)>,
    /// Failures to read.
    pub errors: Vec<ConfigError>,
    /// Files skipped because they are not regular files.
    pub warnings: Vec<ConfigError>,
    /// Bytes read, for [`MAX_LOAD_BYTES`].
    bytes: u64,
}

impl Collected {
    /// Reads `path` (a file, or a directory's rule files).
    pub(super) fn collect(&mut self, path: &Path) {
        match std::fs::metadata(path) {
            Err(e) => self.errors.push(ConfigError::in_file(
                path,
                format!("cannot read config path: {e}"),
            )),
            Ok(meta) if meta.is_dir() => {
                let mut files = Vec::new();
                let mut walk = DirWalk {
                    files: &mut files,
                    seen: HashSet::new(),
                    collected: self,
                };
                walk.dir(path);
                files.sort();
                for file in files {
                    self.read(&file);
                }
            }
            Ok(_) => self.read(path),
        }
    }

    fn read(&mut self, path: &Path) {
        let left = MAX_LOAD_BYTES.saturating_sub(self.bytes);
        let read = files::read_to_string(path, MAX_FILE_BYTES.min(left));
        match read {
            Ok(text) => {
                self.bytes += text.len() as u64;
                self.files.push((path.to_path_buf(), text));
            }
            Err(e) if left < MAX_FILE_BYTES && e.kind() == std::io::ErrorKind::InvalidData => {
                self.errors.push(ConfigError::in_file(
                    path,
                    format!(
                        "cannot read config file: the rule files of one load may take {} in all",
                        files::bytes(MAX_LOAD_BYTES)
                    ),
                ))
            }
            Err(e) => self.errors.push(ConfigError::in_file(
                path,
                format!("cannot read config file: {e}"),
            )),
        }
    }
}

/// A directory walk: the rule files found so far and the directories already walked, so a
/// symlink loop is walked once instead of forever.
struct DirWalk<'a> {
    files: &'a mut Vec<PathBuf>,
    seen: HashSet<PathBuf>,
    collected: &'a mut Collected,
}

impl DirWalk<'_> {
    /// Finds the rule files under `dir`.
    fn dir(&mut self, dir: &Path) {
        if !self
            .seen
            .insert(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()))
        {
            return;
        }
        let errors = &mut self.collected.errors;
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                errors.push(ConfigError::in_file(
                    dir,
                    format!("cannot read config directory: {e}"),
                ));
                return;
            }
        };
        for entry in entries {
            match entry {
                Ok(entry) => self.entry(&entry),
                Err(e) => self.collected.errors.push(ConfigError::in_file(
                    dir,
                    format!("cannot read config directory: {e}"),
                )),
            }
        }
    }

    fn entry(&mut self, entry: &std::fs::DirEntry) {
        if is_skipped(&entry.file_name()) {
            return;
        }
        let path = entry.path();
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => self.dir(&path),
            Ok(meta) if is_rule_file(&path) && meta.is_file() => self.files.push(path),
            // A FIFO, socket or device named like a rule file: reading it could block or
            // never end, and it cannot hold rules.
            Ok(meta) if is_rule_file(&path) => self.collected.warnings.push(ConfigError::in_file(
                &path,
                format!(
                    "skipped: not a regular file (a {})",
                    files::describe(&meta.file_type())
                ),
            )),
            Ok(_) => {}
            Err(e) => self.collected.errors.push(ConfigError::in_file(
                &path,
                format!("cannot read config path: {e}"),
            )),
        }
    }
}

/// Whether a directory walk skips an entry of this name: dot entries (so the `..data` and
/// `..<timestamp>` entries of a Kubernetes ConfigMap mount are not read twice).
pub(crate) fn is_skipped(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// Whether a file found in a rule directory is a rule file (`*.yaml`, `*.yml`).
pub(crate) fn is_rule_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}
