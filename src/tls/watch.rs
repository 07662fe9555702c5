//! Reload on change: watch the directories holding the certificate files (and, for symlinks,
//! those of their targets), wait out a burst of events, then `ServerTls::reload`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ServerTls, TlsError, TlsSettings};

/// How long to collect events after the first one: a writer replaces the certificate and then
/// the key, and the pair should be read once, after both.
const DEBOUNCE: Duration = Duration::from_millis(100);

pub(super) fn spawn(
    tls: ServerTls,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<(), TlsError> {
    // Capacity 1: a pending signal already means "check the files"; more would add nothing.
    let (signal, signals) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Any change in a watched directory may concern our files (a Kubernetes secret swap only
        // renames `..data`), so each one asks for a check; `reload` skips unchanged contents.
        if is_change(&event) {
            let _ = signal.try_send(());
        }
    })
    .map_err(|source| TlsError::Watch {
        path: tls.settings().cert.clone(),
        source,
    })?;
    let mut watched = BTreeSet::new();
    for dir in directories(tls.settings()) {
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|source| TlsError::Watch {
                path: dir.clone(),
                source,
            })?;
        watched.insert(dir);
    }
    tasks.spawn(run(tls, watcher, watched, signals, shutdown));
    Ok(())
}

async fn run(
    tls: ServerTls,
    mut watcher: RecommendedWatcher,
    mut watched: BTreeSet<PathBuf>,
    mut signals: mpsc::Receiver<()>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            signal = signals.recv() => if signal.is_none() { break },
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(DEBOUNCE) => {}
        }
        // The events of the burst are covered by the check below.
        while signals.try_recv().is_ok() {}
        // Small local files: reading them inline is cheaper than a blocking-pool hop.
        tls.reload();
        follow_symlinks(&mut watcher, &mut watched, tls.settings());
    }
    // Dropping the watcher stops its thread.
}

/// Whether an event may mean new contents. Opening and reading are not changes: reacting to them
/// would make each reload (which opens the files) trigger the next one. A watcher error (e.g. a
/// dropped event queue) may hide a change, so it counts as one.
fn is_change(event: &notify::Result<notify::Event>) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match event {
        Ok(event) => match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) => false,
            _ => true,
        },
        Err(_) => true,
    }
}

/// Keeps the watch set equal to the current directories: a symlink may now point elsewhere.
fn follow_symlinks(
    watcher: &mut RecommendedWatcher,
    watched: &mut BTreeSet<PathBuf>,
    settings: &TlsSettings,
) {
    let wanted = directories(settings);
    for gone in watched.difference(&wanted) {
        // The directory may have been deleted already, which also ends its watch.
        let _ = watcher.unwatch(gone);
    }
    watched.retain(|dir| wanted.contains(dir));
    for dir in wanted {
        if watched.contains(&dir) {
            continue;
        }
        match watcher.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                watched.insert(dir);
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch certificate directory")
            }
        }
    }
}

/// The directory of each file as given, and of its canonical path when that differs (a symlink
/// to a file elsewhere changes without any event in the link's directory).
fn directories(settings: &TlsSettings) -> BTreeSet<PathBuf> {
    let mut dirs = BTreeSet::new();
    for file in settings.files() {
        dirs.insert(parent(file));
        if let Ok(real) = std::fs::canonicalize(file) {
            dirs.insert(parent(&real));
        }
    }
    dirs
}

fn parent(file: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare file name lives in the current directory.
    #[test]
    fn parent_of_a_bare_name_is_the_current_directory() {
        assert_eq!(parent(Path::new("tls.crt")), PathBuf::from("."));
        assert_eq!(parent(Path::new("/certs/tls.crt")), PathBuf::from("/certs"));
    }

    /// Opening or reading a file is not a change; writing, creating, renaming and errors are.
    #[test]
    fn only_changes_trigger_a_check() {
        use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
        use notify::{Event, EventKind};
        let kind = |kind| is_change(&Ok(Event::new(kind)));
        assert!(!kind(EventKind::Access(AccessKind::Open(AccessMode::Any))));
        assert!(!kind(EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(kind(EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(kind(EventKind::Create(CreateKind::File)));
        assert!(kind(EventKind::Modify(ModifyKind::Name(RenameMode::To))));
        assert!(is_change(&Err(notify::Error::generic("queue overflow"))));
    }

    /// A symlinked file adds the directory of its target (the Kubernetes `..data` layout).
    #[cfg(unix)]
    #[test]
    fn directories_include_symlink_targets() {
        let dir = tempfile::tempdir().expect("temp dir");
        let real = dir.path().join("..2026_01_01");
        std::fs::create_dir(&real).expect("mkdir");
        std::fs::write(real.join("tls.crt"), "x").expect("write");
        std::os::unix::fs::symlink(&real, dir.path().join("..data")).expect("link");
        std::os::unix::fs::symlink("..data/tls.crt", dir.path().join("tls.crt")).expect("link");
        let settings = TlsSettings {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.crt"),
            client_ca: None,
        };
        let canonical = std::fs::canonicalize(&real).expect("canonical");
        let root = dir.path().to_path_buf();
        assert_eq!(directories(&settings), BTreeSet::from([root, canonical]));
    }
}
