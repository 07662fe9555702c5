//! One debounced file watcher for rule reload and TLS reload: input paths in, "changed" out.
//!
//! [`Changes::start`] takes the input paths (files or directories) and [`Changes::changed`]
//! resolves once the inputs changed and then stayed quiet for the caller's debounce. What counts:
//!
//! - **Which files.** A file input is that file and every symlink on the way to it. A directory
//!   input is what its reader reads from it, as the caller's [`DirectoryRule`] says (for rules:
//!   `*.yaml`/`*.yml` files, found recursively, skipping every entry whose name starts with
//!   `.`), following symlinks (plus any new subdirectory, which may hold such files). Events on other files — a log beside a rule file,
//!   a data directory with journals inside the rule directory — are ignored: they neither
//!   trigger a change nor postpone the debounce.
//! - **Which events.** Opening, reading and closing without writing are not changes (each reload
//!   reads the files; counting that would make it trigger the next one). Creating, writing,
//!   closing after a write, renaming, deleting and metadata changes are. A watcher error or a
//!   dropped event queue may hide a change, so it counts as one.
//! - **Symlink swaps.** The directory of every link on the way to an input and of its target is
//!   watched, and the watch set is recomputed after each change, so a Kubernetes ConfigMap or
//!   Secret swap (the `..data` link renamed over to a new directory) is a change, and the files
//!   behind the new link are watched from then on.
//! - **A path that cannot be watched** (missing, not readable, out of inotify watches): a warning
//!   naming it, once until it can be watched again, and its nearest watchable ancestor is watched
//!   instead, so that the path appearing is a change and is then watched itself. Only a watcher
//!   that cannot start at all is an error.

mod scan;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) use scan::DirectoryRule;
use scan::{Relevant, Scan};

/// Debounced changes of a set of input paths; see the module documentation for what counts.
pub(crate) struct Changes {
    signals: mpsc::Receiver<()>,
    /// A signal was taken but not yet reported (a `changed` future was dropped while settling).
    settling: bool,
    debounce: Duration,
    shutdown: CancellationToken,
    watching: Arc<Mutex<Watching>>,
}

/// The notify watcher and what it watches; recomputed after each change.
struct Watching {
    watcher: RecommendedWatcher,
    inputs: Vec<PathBuf>,
    rule: DirectoryRule,
    watched: BTreeSet<PathBuf>,
    /// Paths already warned about as unwatchable, so a failing path warns once, not per change.
    warned: HashSet<PathBuf>,
    /// What the event callback (on notify's thread) judges events against.
    relevant: Arc<ArcSwap<Relevant>>,
}

impl Changes {
    /// Starts watching `inputs` (relative paths are taken from the current directory); `rule`
    /// says which entries of a directory input are inputs. Changes are reported after
    /// `debounce` without further relevant events; `shutdown` ends them.
    pub(crate) fn start(
        inputs: Vec<PathBuf>,
        rule: DirectoryRule,
        debounce: Duration,
        shutdown: CancellationToken,
    ) -> notify::Result<Self> {
        // Capacity 1: a pending signal already means "something changed"; more would add nothing.
        let (signal, signals) = mpsc::channel(1);
        let relevant = Arc::new(ArcSwap::from_pointee(Relevant::default()));
        let judge = relevant.clone();
        let watcher = notify::recommended_watcher(move |event| {
            if is_change(&event, &judge.load()) {
                let _ = signal.try_send(());
            }
        })?;
        // Event paths are absolute (the watched directories are), so the inputs must be too.
        let inputs = inputs
            .into_iter()
            .map(|path| std::path::absolute(&path).unwrap_or(path))
            .collect();
        let mut watching = Watching {
            watcher,
            inputs,
            rule,
            watched: BTreeSet::new(),
            warned: HashSet::new(),
            relevant,
        };
        watching.refresh();
        Ok(Self {
            signals,
            settling: false,
            debounce,
            shutdown,
            watching: Arc::new(Mutex::new(watching)),
        })
    }

    /// Waits for the inputs to change and settle; `false` once shutdown is cancelled.
    ///
    /// The watch set is brought up to date before this returns, so whatever the caller reads
    /// next is what is watched; a change during that read is reported by the next call.
    pub(crate) async fn changed(&mut self) -> bool {
        if !self.settling {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return false,
                signal = self.signals.recv() => if signal.is_none() { return false },
            }
            self.settling = true;
        }
        // A burst of events (an editor's save, a secret swap) settles into one change.
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return false,
                signal = tokio::time::timeout(self.debounce, self.signals.recv()) => match signal {
                    Ok(Some(())) => continue,
                    Ok(None) => return false,
                    Err(_) => break,
                },
            }
        }
        let watching = self.watching.clone();
        // Walking the inputs reads directories: keep it off the runtime's workers.
        let refreshed = tokio::task::spawn_blocking(move || watching.lock().refresh()).await;
        self.settling = false;
        refreshed.is_ok()
    }
}

impl Watching {
    /// Looks at the inputs again: watches the directories they now need, drops the others.
    fn refresh(&mut self) {
        let scan = Scan::of(&self.inputs, self.rule);
        let mut watched = BTreeSet::new();
        let mut pending = Vec::new();
        for dir in &scan.dirs {
            match self.watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.warned.remove(dir);
                    watched.insert(dir.clone());
                }
                Err(error) => {
                    pending.push(dir.clone());
                    let ancestor = self.watch_ancestor(dir, &mut watched);
                    if self.warned.insert(dir.clone()) {
                        warn_unwatchable(dir, &error, ancestor.as_deref());
                    }
                }
            }
        }
        for gone in self.watched.difference(&watched) {
            // The directory may have been deleted already, which also ended its watch.
            let _ = self.watcher.unwatch(gone);
        }
        self.watched = watched;
        self.relevant.store(Arc::new(scan.relevant(pending)));
    }

    /// Watches the nearest ancestor of `dir` that can be watched, so `dir` appearing is seen.
    fn watch_ancestor(&mut self, dir: &Path, watched: &mut BTreeSet<PathBuf>) -> Option<PathBuf> {
        let ancestor = dir.ancestors().skip(1).find(|ancestor| {
            watched.contains(*ancestor)
                || self
                    .watcher
                    .watch(ancestor, RecursiveMode::NonRecursive)
                    .is_ok()
        })?;
        watched.insert(ancestor.to_path_buf());
        Some(ancestor.to_path_buf())
    }
}

fn warn_unwatchable(dir: &Path, error: &notify::Error, ancestor: Option<&Path>) {
    match ancestor {
        Some(ancestor) => tracing::warn!(
            path = %dir.display(),
            %error,
            watching = %ancestor.display(),
            "cannot watch this path; watching its nearest ancestor until it can be"
        ),
        None => tracing::warn!(
            path = %dir.display(),
            %error,
            "cannot watch this path nor any ancestor; its changes are missed until the next one"
        ),
    }
}

/// Whether a watcher event is a change of the inputs.
fn is_change(event: &notify::Result<notify::Event>, relevant: &Relevant) -> bool {
    let Ok(event) = event else {
        return true;
    };
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        _ => {}
    }
    // A dropped queue (inotify overflow) names no path and may hide any change.
    if event.need_rescan() || event.paths.is_empty() {
        return true;
    }
    // Only these can bring a new directory in; a write to a journal cannot.
    let may_add_dir = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Modify(ModifyKind::Name(_) | ModifyKind::Any)
            | EventKind::Any
            | EventKind::Other
    );
    event
        .paths
        .iter()
        .any(|path| relevant.concerns(path, may_add_dir))
}
