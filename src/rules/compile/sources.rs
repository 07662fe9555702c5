//! Rule files from the paths given on the command line: a file as named, a directory walked
//! for `*.yaml`/`*.yml`, every failure to read recorded as a [`ConfigError`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::rules::ConfigError;

/// Reads `path` (a file, or a directory's rule files) into `out`.
pub(super) fn collect(
    path: &Path,
    out: &mut Vec<(PathBuf, String)>,
    errors: &mut Vec<ConfigError>,
) {
    match std::fs::metadata(path) {
        Err(e) => errors.push(ConfigError::in_file(
            path,
            format!("cannot read config path: {e}"),
        )),
        Ok(meta) if meta.is_dir() => {
            let mut files = Vec::new();
            walk(path, &mut files, &mut HashSet::new(), errors);
            files.sort();
            for file in files {
                read(&file, out, errors);
            }
        }
        Ok(_) => read(path, out, errors),
    }
}

fn read(path: &Path, out: &mut Vec<(PathBuf, String)>, errors: &mut Vec<ConfigError>) {
    match std::fs::read_to_string(path) {
        Ok(text) => out.push((path.to_path_buf(), text)),
        Err(e) => errors.push(ConfigError::in_file(
            path,
            format!("cannot read config file: {e}"),
        )),
    }
}

/// Finds rule files under `dir`. `seen` holds the directories already walked, so a symlink
/// loop is walked once instead of forever.
fn walk(
    dir: &Path,
    files: &mut Vec<PathBuf>,
    seen: &mut HashSet<PathBuf>,
    errors: &mut Vec<ConfigError>,
) {
    if !seen.insert(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())) {
        return;
    }
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
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                errors.push(ConfigError::in_file(
                    dir,
                    format!("cannot read config directory: {e}"),
                ));
                continue;
            }
        };
        if is_skipped(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => walk(&path, files, seen, errors),
            Ok(_) if is_rule_file(&path) => files.push(path),
            Ok(_) => {}
            Err(e) => errors.push(ConfigError::in_file(
                &path,
                format!("cannot read config path: {e}"),
            )),
        }
    }
}

/// Whether a directory walk skips an entry of this name: dot entries (so the `..data` and
/// `..<timestamp>` entries of a Kubernetes ConfigMap mount are not read twice).
pub fn is_skipped(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// Whether a file found in a rule directory is a rule file (`*.yaml`, `*.yml`).
pub fn is_rule_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}
