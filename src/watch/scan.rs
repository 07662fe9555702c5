//! What the inputs are right now: the files behind them, their symlink chains, the directories.

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Symlinks followed on one path before giving up (Linux's own limit is 40).
pub(super) const MAX_LINKS: usize = 40;

/// Which entries of a directory input are inputs: the reader of the inputs says (the rule
/// loader reads `*.yaml`/`*.yml` and skips dot entries).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectoryRule {
    /// Entries (files or directories) the reader skips, by name.
    pub skip: fn(&std::ffi::OsStr) -> bool,
    /// Files the reader reads.
    pub reads: fn(&Path) -> bool,
}

impl Default for DirectoryRule {
    /// Every entry.
    fn default() -> Self {
        Self {
            skip: |_| false,
            reads: |_| true,
        }
    }
}

/// One look at the inputs. Every path in it has a symlink-free parent, the form in which
/// notify names events in a watched (symlink-free) directory.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// The directories to watch: those holding an input file or a link towards one, and every
    /// directory a directory input is read from.
    pub(super) dirs: BTreeSet<PathBuf>,
    /// Paths whose change is a change of the inputs: input files, the links on their way,
    /// and the directories read.
    entries: HashSet<PathBuf>,
    /// Directories read for a directory input: a new input file or subdirectory there counts.
    walked: HashSet<PathBuf>,
    rule: DirectoryRule,
}

/// What the event callback judges events against.
#[derive(Debug, Default)]
pub(super) struct Relevant {
    entries: HashSet<PathBuf>,
    walked: HashSet<PathBuf>,
    /// Directories that could not be watched (an ancestor is watched instead).
    pending: Vec<PathBuf>,
    rule: DirectoryRule,
}

impl Scan {
    /// Looks at each input: a directory is read as `rule` says its reader reads it, anything
    /// else (a file, or a path that does not exist yet) stands for itself.
    pub(super) fn of(inputs: &[PathBuf], rule: DirectoryRule) -> Self {
        let mut scan = Scan {
            rule,
            ..Scan::default()
        };
        let mut seen = HashSet::new();
        for input in inputs {
            let real = scan.follow_input(input);
            if real.is_dir() {
                scan.walk(&real, &mut seen);
            }
        }
        scan
    }

    /// As [`Scan::follow`] for an input, except that a directory input's own parent is not
    /// watched: the directory's watch reports its own deletion or move, which is all its parent
    /// could add, and a parent watched for it would wake the watcher for every write beside it
    /// (a log next to the rule directory). The parents of links on the way are watched, since
    /// a link swapped is seen only there; a file input's or a missing input's parent too (a
    /// file renamed into place, a directory created later).
    fn follow_input(&mut self, path: &Path) -> PathBuf {
        let (real, links) = resolve(path);
        for link in links {
            self.dirs.insert(parent(&link));
            self.entries.insert(link);
        }
        if !real.is_dir() {
            self.dirs.insert(parent(&real));
        }
        self.entries.insert(real.clone());
        real
    }

    /// What to judge events against, given the directories that could not be watched.
    pub(super) fn relevant(self, pending: Vec<PathBuf>) -> Relevant {
        Relevant {
            entries: self.entries,
            walked: self.walked,
            pending,
            rule: self.rule,
        }
    }

    /// Records `path`, the links on its way and its target, and the directories holding them;
    /// returns the target.
    fn follow(&mut self, path: &Path) -> PathBuf {
        let (real, links) = resolve(path);
        for entry in links.into_iter().chain([real.clone()]) {
            self.dirs.insert(parent(&entry));
            self.entries.insert(entry);
        }
        real
    }

    /// Reads `dir` as its reader does: skipped entries are left out, symlinks are followed,
    /// subdirectories are read, the files the reader reads are inputs.
    fn walk(&mut self, dir: &Path, seen: &mut HashSet<PathBuf>) {
        if !seen.insert(dir.to_path_buf()) {
            return;
        }
        self.dirs.insert(dir.to_path_buf());
        self.walked.insert(dir.to_path_buf());
        // An unreadable directory is the loader's error to report; it is still watched.
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if (self.rule.skip)(&entry.file_name()) {
                continue;
            }
            let path = entry.path();
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => {
                    let real = self.follow(&path);
                    self.walk(&real, seen);
                }
                Ok(_) if (self.rule.reads)(&path) => {
                    self.follow(&path);
                }
                _ => {}
            }
        }
    }
}

impl Relevant {
    /// Whether an event on `path` concerns the inputs. `may_add_dir`: the event may have
    /// brought a new directory (creation, rename), which is worth a stat to find out.
    pub(super) fn concerns(&self, path: &Path, may_add_dir: bool) -> bool {
        if self.entries.contains(path) || self.pending.iter().any(|p| p.starts_with(path)) {
            return true;
        }
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        self.walked.contains(dir)
            && !(self.rule.skip)(name)
            && ((self.rule.reads)(path) || (may_add_dir && path.is_dir()))
    }
}

/// The directory holding `path` (`.` for a bare name).
pub(super) fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Follows every symlink in `path`, in any component: returns where it leads and each link
/// passed, each with its parent resolved. A missing component is kept as written (the path may
/// appear later); a loop stops after [`MAX_LINKS`] links.
pub(super) fn resolve(path: &Path) -> (PathBuf, Vec<PathBuf>) {
    let mut links = Vec::new();
    let mut real = PathBuf::new();
    // The components still to walk, last first.
    let mut rest: Vec<OsString> = components(path);
    while let Some(part) = rest.pop() {
        if part == ".." {
            real.pop();
            continue;
        }
        if part == "." {
            continue;
        }
        let next = real.join(&part);
        match std::fs::read_link(&next) {
            Ok(target) if links.len() < MAX_LINKS => {
                if target.is_absolute() {
                    real = PathBuf::new();
                }
                rest.extend(components(&target));
                links.push(next);
            }
            _ => real = next,
        }
    }
    (real, links)
}

/// The components of `path`, last first (so `pop` yields them in order).
fn components(path: &Path) -> Vec<OsString> {
    let mut parts: Vec<OsString> = path.components().map(|c| c.as_os_str().into()).collect();
    parts.reverse();
    parts
}
