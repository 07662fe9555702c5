//! envoyproxy/ratelimit's rule layout (its goruntime loader): `RUNTIME_ROOT`,
//! `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY`, `RUNTIME_IGNOREDOTFILES`, `RUNTIME_WATCH_ROOT`,
//! resolved and read the way envoyproxy/ratelimit does, every file taken as a rule file.
//!
//! Files are named as envoyproxy/ratelimit keys them (the path under the walked directory, `/` →
//! `.`, extension kept), so an error reads `config.rules.yaml:3:5: …` as envoyproxy/ratelimit's
//! would.

use std::fs;
use std::path::{Path, PathBuf};

use crate::rules::compile::{LoadOptions, load_sources};
use crate::rules::{ConfigError, ConfigErrors, RuleSet};

/// Where envoyproxy/ratelimit finds its rule files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatLayout {
    /// `RUNTIME_ROOT`.
    pub root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY`.
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY`.
    pub app_directory: String,
    /// `RUNTIME_IGNOREDOTFILES`: skip files and directories whose name starts with `.`.
    pub ignore_dotfiles: bool,
    /// `RUNTIME_WATCH_ROOT`: walk `ROOT/SUBDIRECTORY` and keep the keys under `APPDIRECTORY.`;
    /// otherwise walk `ROOT/SUBDIRECTORY/APPDIRECTORY` and keep every file.
    pub watch_root: bool,
}

impl CompatLayout {
    /// The directory walked, or `None` where envoyproxy/ratelimit uses its "nil loader", which
    /// loads no rules and succeeds: in watch-root mode when the root or the subdirectory is empty,
    /// otherwise when the application directory is empty, or the root and subdirectory both.
    pub fn directory(&self) -> Option<PathBuf> {
        let root_and_sub = self.root.join(&self.subdirectory);
        if self.watch_root {
            let empty = self.root.as_os_str().is_empty() || self.subdirectory.is_empty();
            (!empty).then_some(root_and_sub)
        } else {
            let empty = root_and_sub.as_os_str().is_empty() || self.app_directory.is_empty();
            (!empty).then(|| root_and_sub.join(&self.app_directory))
        }
    }

    /// Whether the walk skips an entry of this name.
    pub fn skips(&self, name: &std::ffi::OsStr) -> bool {
        self.ignore_dotfiles && name.as_encoded_bytes().starts_with(b".")
    }

    /// Reads and compiles the rule files. Files that cannot be read are skipped with a warning
    /// (as envoyproxy/ratelimit's loader does); a directory that does not exist loads no rules.
    pub fn load(&self, options: &LoadOptions) -> Result<RuleSet, ConfigErrors> {
        let mut warnings = Vec::new();
        let mut sources = Vec::new();
        if let Some(dir) = self.directory() {
            self.walk_root(&dir, &mut sources, &mut warnings);
        }
        sources.retain(|(key, _)| self.keeps(key));
        sources.sort();
        let mut set = load_sources(&sources, options)?;
        set.warnings.extend(warnings);
        Ok(set)
    }

    /// Whether a file of this key is a rule file: in watch-root mode only keys starting with
    /// `<APPDIRECTORY>.` (a string test, so a file `config.yaml` beside `config/` counts too).
    fn keeps(&self, key: &Path) -> bool {
        !self.watch_root
            || key
                .to_string_lossy()
                .starts_with(&format!("{}.", self.app_directory))
    }

    /// The walk starts as Go's `filepath.Walk`: the root is looked at without following a
    /// symlink, so a root that is a link to a directory is read as a file, fails, and loads
    /// nothing.
    fn walk_root(&self, dir: &Path, out: &mut Vec<(PathBuf, String)>, warn: &mut Vec<ConfigError>) {
        match fs::symlink_metadata(dir) {
            Err(e) => warn.push(ConfigError::in_file(dir, format!("rules not loaded: {e}"))),
            Ok(meta) if meta.is_dir() => {
                if !dir.file_name().is_some_and(|name| self.skips(name)) {
                    self.walk(dir, dir, out, warn);
                }
            }
            Ok(_) => warn.push(ConfigError::in_file(
                dir,
                "rules not loaded: not a directory (upstream reads a symlinked root as a file)",
            )),
        }
    }

    fn walk(
        &self,
        top: &Path,
        dir: &Path,
        out: &mut Vec<(PathBuf, String)>,
        warn: &mut Vec<ConfigError>,
    ) {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return warn.push(ConfigError::in_file(dir, format!("not read: {e}"))),
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if path.file_name().is_some_and(|name| self.skips(name)) {
                continue;
            }
            // Lstat, as envoyproxy/ratelimit: a linked directory (a ConfigMap's `..data`) is not
            // walked.
            match fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => self.walk(top, &path, out, warn),
                Ok(_) => read_file(top, &path, out, warn),
                Err(e) => warn.push(ConfigError::in_file(&path, format!("not read: {e}"))),
            }
        }
    }
}

/// Reads one file (following a symlink) under its envoyproxy/ratelimit key. Only regular files are
/// read: a FIFO or a device would block or never end, and a linked directory fails as
/// envoyproxy/ratelimit's does.
fn read_file(
    top: &Path,
    path: &Path,
    out: &mut Vec<(PathBuf, String)>,
    warn: &mut Vec<ConfigError>,
) {
    let key = compat_key(top, path);
    // Regular files only, opened without blocking, at most a rule file's size (crate::files).
    let text =
        crate::files::read_to_string(path, crate::rules::MAX_FILE_BYTES).map_err(|e| e.to_string());
    match text {
        Ok(text) => out.push((key, text)),
        Err(e) => warn.push(ConfigError::in_file(&key, format!("not read: {e}"))),
    }
}

/// The path of `path` under `top` with `/` replaced by `.`: `config/a/b.yaml` → `config.a.b.yaml`.
fn compat_key(top: &Path, path: &Path) -> PathBuf {
    let relative = path.strip_prefix(top).unwrap_or(path);
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    PathBuf::from(parts.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";

    fn layout(root: &Path, sub: &str, watch_root: bool, dots: bool) -> CompatLayout {
        CompatLayout {
            root: root.to_path_buf(),
            subdirectory: sub.into(),
            app_directory: "config".into(),
            ignore_dotfiles: dots,
            watch_root,
        }
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn domains(set: &RuleSet) -> Vec<String> {
        let mut names: Vec<String> = set.domains.keys().cloned().collect();
        names.sort();
        names
    }

    /// The nil-loader cases load zero domains successfully, as envoyproxy/ratelimit's table says.
    #[test]
    fn nil_loader_cases_load_nothing() {
        let root = Path::new("/srv/runtime_data/current");
        assert_eq!(layout(root, "", true, false).directory(), None);
        assert_eq!(layout(Path::new(""), "sub", true, false).directory(), None);
        assert_eq!(layout(Path::new(""), "", false, false).directory(), None);
        let mut no_app = layout(root, "ratelimit", false, false);
        no_app.app_directory.clear();
        assert_eq!(no_app.directory(), None);
        let set = layout(root, "", true, false)
            .load(&LoadOptions::default())
            .unwrap();
        assert!(set.domains.is_empty());
        assert_eq!(
            layout(root, "ratelimit", false, false).directory(),
            Some(root.join("ratelimit/config"))
        );
    }

    /// Watch-root mode keeps keys under `config.` (and a file `config.yaml` beside the directory);
    /// every file counts whatever its extension; errors name the envoyproxy/ratelimit key.
    #[test]
    fn watch_root_mode_reads_config_keys() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ratelimit");
        write(&sub.join("config/nested/rules.conf"), RULES);
        write(
            &sub.join("config.yaml"),
            &RULES.replace("domain: d", "domain: e"),
        );
        write(&sub.join("other/x.yaml"), "not: [valid");
        let l = layout(dir.path(), "ratelimit", true, false);
        let set = l.load(&LoadOptions::default()).unwrap();
        assert_eq!(domains(&set), ["d", "e"]);
        write(&sub.join("config/bad.yaml"), "domain: d\ndescriptors: 3\n");
        let errors = l.load(&LoadOptions::default()).unwrap_err().to_string();
        assert!(errors.starts_with("config.bad.yaml:"), "{errors}");
    }

    /// A Kubernetes ConfigMap mount: without RUNTIME_IGNOREDOTFILES the timestamped copy is read
    /// too (a duplicate domain, as envoyproxy/ratelimit); with it, only the linked file.
    #[test]
    fn configmap_mount_needs_ignoredotfiles() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ratelimit/config");
        write(&config.join("..2024_01_01/config.yaml"), RULES);
        std::os::unix::fs::symlink("..2024_01_01", config.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/config.yaml", config.join("config.yaml")).unwrap();
        let errors = layout(dir.path(), "ratelimit", false, false)
            .load(&LoadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(errors.contains("duplicate domain 'd'"), "{errors}");
        let set = layout(dir.path(), "ratelimit", false, true)
            .load(&LoadOptions::default())
            .unwrap();
        assert_eq!(domains(&set), ["d"]);
        assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    }

    /// A missing directory loads nothing (with a warning); a symlinked walk root is not followed,
    /// as Go's filepath.Walk does not follow it.
    #[test]
    fn missing_or_linked_root_loads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let set = layout(dir.path(), "absent", false, false)
            .load(&LoadOptions::default())
            .unwrap();
        assert!(set.domains.is_empty());
        assert_eq!(set.warnings.len(), 1);
        write(&dir.path().join("real/config/a.yaml"), RULES);
        fs::create_dir(dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink("../real/config", dir.path().join("linked/config")).unwrap();
        let linked = layout(dir.path(), "linked", false, false)
            .load(&LoadOptions::default())
            .unwrap();
        assert!(linked.domains.is_empty());
    }
}
