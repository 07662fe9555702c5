//! The watcher on real files with the real notify backend: what is and is not a change.

use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use notify::event::{AccessKind, AccessMode, CreateKind, Flag, ModifyKind, RenameMode};
use notify::{Event, EventKind};

use super::scan::{parent, resolve};
use super::*;

const DEBOUNCE: Duration = Duration::from_millis(50);
/// Directory inputs read as the rule loader reads them (the rule reloader's rule).
const RULES: DirectoryRule = DirectoryRule {
    skip: crate::rules::is_skipped,
    reads: crate::rules::is_rule_file,
};
/// How long an expected change may take to show (generous: CI machines are slow).
const DEADLINE: Duration = Duration::from_secs(10);
/// How long to look for a change that must not come.
const QUIET: Duration = Duration::from_secs(1);

/// Counts the changes reported for some inputs, from a task.
struct Counter {
    count: Arc<AtomicUsize>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Counter {
    fn start(inputs: &[&Path]) -> Self {
        let shutdown = CancellationToken::new();
        let inputs = inputs.iter().map(|p| p.to_path_buf()).collect();
        let mut changes = Changes::start(inputs, RULES, DEBOUNCE, shutdown.clone()).expect("watch");
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        let task = tokio::spawn(async move {
            while changes.changed().await {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        Self {
            count,
            shutdown,
            task,
        }
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` changes were reported.
    async fn reaches(&self, n: usize, what: &str) {
        let deadline = Instant::now() + DEADLINE;
        while self.count() < n {
            assert!(Instant::now() < deadline, "no change seen: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Repeats `edit` until a change beyond those seen so far is reported.
    async fn reacts_to(&self, what: &str, mut edit: impl FnMut()) {
        let before = self.count();
        let deadline = Instant::now() + DEADLINE;
        while self.count() == before {
            assert!(Instant::now() < deadline, "no change seen: {what}");
            edit();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sees no change for [`QUIET`].
    async fn stays_quiet(&self, what: &str) {
        let before = self.count();
        tokio::time::sleep(QUIET).await;
        assert_eq!(self.count(), before, "unexpected change: {what}");
    }

    /// Sees no change while `writer` writes, nor after it stops (when a change that its
    /// writes only postponed would show).
    async fn ignores(&self, writer: Writer, what: &str) {
        self.stays_quiet(what).await;
        drop(writer);
        self.stays_quiet(what).await;
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A thread appending a line to a file every 20 ms until dropped; `rotate` also starts a new
/// file (`path.N`) every 10 lines, as a journal does.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    fn start(path: PathBuf, rotate: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            for line in 0.. {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let file = match rotate {
                    true => path.with_extension(format!("{}", line / 10)),
                    false => path.clone(),
                };
                let mut file = fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .expect("open");
                writeln!(file, "line {line}").expect("append");
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn rules(limit: u32) -> String {
    format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: hour, requests_per_unit: {limit} }}\n"
    )
}

fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

/// A ConfigMap/Secret layout in `root`: `..<version>/<file>`, `..data` → it, `<file>` → `..data/<file>`.
fn configmap_version(root: &Path, version: &str, file: &str, contents: &str) {
    fs::create_dir(root.join(version)).expect("mkdir");
    fs::write(root.join(version).join(file), contents).expect("write");
}

/// Swaps `..data` to `version` the way the kubelet does: a new link renamed over the old one.
fn configmap_swap(root: &Path, version: &str, old: &str) {
    symlink(version, &root.join("..data_tmp"));
    fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
    fs::remove_dir_all(root.join(old)).expect("remove the old version");
}

/// A log appended every 20 ms in the rule directory is no change and does not postpone a
/// rule edit's change.
#[tokio::test]
async fn log_in_rule_directory_is_no_change() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("rules.yaml"), rules(1)).expect("write");
    let watch = Counter::start(&[dir.path()]);
    let log = dir.path().join("sluice.log");
    watch
        .ignores(
            Writer::start(log.clone(), false),
            "a log in the rule directory",
        )
        .await;
    let _log = Writer::start(log, false);
    fs::write(dir.path().join("rules.yaml"), rules(2)).expect("write");
    watch.reaches(1, "a rule edit while the log grows").await;
}

/// A data directory with a growing journal inside the rule directory does not delay a rule edit.
#[tokio::test]
async fn journal_in_rule_directory_does_not_delay_an_edit() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("rules.yaml"), rules(1)).expect("write");
    fs::create_dir(dir.path().join("data")).expect("mkdir");
    let watch = Counter::start(&[dir.path()]);
    let journal = dir.path().join("data/journal");
    watch
        .ignores(
            Writer::start(journal.clone(), true),
            "a journal in the rule directory",
        )
        .await;
    let _journal = Writer::start(journal, true);
    fs::write(dir.path().join("rules.yaml"), rules(2)).expect("write");
    watch
        .reaches(1, "a rule edit while the journal grows")
        .await;
}

/// In a directory input, new rule files, new subdirectories and deletions are changes; dot
/// entries and other names are not.
#[tokio::test]
async fn directory_input_counts_what_the_loader_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let watch = Counter::start(&[dir.path()]);
    fs::write(dir.path().join("notes.txt"), "x").expect("write");
    fs::create_dir(dir.path().join(".git")).expect("mkdir");
    fs::write(dir.path().join(".git/rules.yaml"), "x").expect("write");
    watch.stays_quiet("files the loader does not read").await;
    fs::write(dir.path().join("a.yml"), rules(1)).expect("write");
    watch.reaches(1, "a new .yml file").await;
    fs::create_dir(dir.path().join("team")).expect("mkdir");
    watch.reaches(2, "a new subdirectory").await;
    let nested = dir.path().join("team/b.yaml");
    watch
        .reacts_to("a rule file in the new subdirectory", || {
            fs::write(&nested, rules(1)).expect("write")
        })
        .await;
    let before = watch.count();
    fs::remove_file(dir.path().join("a.yml")).expect("remove");
    watch.reaches(before + 1, "a deleted rule file").await;
}

/// Beside a single rule file, other files (even rule-like ones) are no change; the file is.
#[tokio::test]
async fn file_beside_a_rule_file_is_no_change() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rules.yaml");
    fs::write(&file, rules(1)).expect("write");
    let watch = Counter::start(&[&file]);
    fs::write(dir.path().join("other.yaml"), rules(2)).expect("write");
    let log = Writer::start(dir.path().join("sluice.log"), false);
    watch.ignores(log, "files beside the input").await;
    fs::write(&file, rules(2)).expect("write");
    watch.reaches(1, "the input itself").await;
}

/// Reading an input (open, close without writing) is no change.
#[tokio::test]
async fn reading_is_no_change() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tls.crt");
    fs::write(&file, "cert").expect("write");
    let watch = Counter::start(&[dir.path(), &file]);
    for _ in 0..20 {
        fs::read(&file).expect("read");
        fs::read_dir(dir.path()).expect("list").for_each(drop);
    }
    watch.stays_quiet("reading the inputs").await;
}

/// A ConfigMap/Secret `..data` swap is a change, for a directory input and for file inputs,
/// and the files behind the new link are watched from then on.
#[tokio::test]
async fn configmap_swap_is_a_change_and_the_watch_follows() {
    for as_files in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        configmap_version(root, "..v1", "rules.yaml", &rules(1));
        symlink("..v1", &root.join("..data"));
        symlink("..data/rules.yaml", &root.join("rules.yaml"));
        let input = if as_files {
            root.join("rules.yaml")
        } else {
            root.to_path_buf()
        };
        let watch = Counter::start(&[&input]);

        configmap_version(root, "..v2", "rules.yaml", &rules(2));
        watch
            .stays_quiet("a version staged but not swapped in")
            .await;
        configmap_swap(root, "..v2", "..v1");
        watch.reaches(1, "the ..data swap").await;
        // Not how the kubelet updates, but it shows the new target directory is watched.
        let behind = root.join("..v2/rules.yaml");
        watch
            .reacts_to("an edit behind the new link", || {
                fs::write(&behind, rules(3)).expect("write")
            })
            .await;
    }
}

/// A missing input directory is watched through its nearest existing ancestor: its
/// appearance is a change, and then the directory itself is watched.
#[tokio::test]
async fn missing_directory_is_picked_up_when_it_appears() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("not/yet");
    let watch = Counter::start(&[&missing]);
    made_and_watched(&watch, &missing, 1).await;
}

/// Makes `dir` with a rule file, waits for that change (the `n`th seen), then for an edit in
/// it to be one.
async fn made_and_watched(watch: &Counter, dir: &Path, n: usize) {
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(dir.join("rules.yaml"), rules(1)).expect("write");
    watch.reaches(n, "the directory appearing").await;
    watch
        .reacts_to("an edit in the directory that appeared", || {
            fs::write(dir.join("rules.yaml"), rules(2)).expect("write")
        })
        .await;
}

/// A directory input deleted is a change (its own watch reports it), and made again it is
/// picked up and watched, although its parent is not watched while it exists.
#[tokio::test]
async fn a_directory_input_deleted_and_made_again_is_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rules_dir = dir.path().join("rules");
    fs::create_dir(&rules_dir).expect("mkdir");
    fs::write(rules_dir.join("rules.yaml"), rules(1)).expect("write");
    let scan = Scan::of(std::slice::from_ref(&rules_dir), RULES);
    let (real, _) = resolve(&rules_dir);
    assert!(!scan.dirs.contains(&parent(&real)), "{:?}", scan.dirs);
    let watch = Counter::start(&[&rules_dir]);
    fs::remove_dir_all(&rules_dir).expect("rm");
    watch.reaches(1, "the directory deleted").await;
    made_and_watched(&watch, &rules_dir, 2).await;
}

/// Cancelling the token ends the changes.
#[tokio::test]
async fn shutdown_ends_the_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut watch = Counter::start(&[dir.path()]);
    watch.shutdown.cancel();
    tokio::time::timeout(DEADLINE, &mut watch.task)
        .await
        .expect("the changes end")
        .expect("no panic");
}

/// Open and close-without-write are no change; close-after-write, creation and renames of an
/// input are; so are watcher errors and a dropped queue, which name no input.
#[test]
fn which_events_are_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tls.crt");
    fs::write(&file, "x").expect("write");
    let scan = Scan::of(std::slice::from_ref(&file), RULES);
    let relevant = scan.relevant(Vec::new());
    let (real, _) = resolve(&file);
    let on = |kind, path: &Path| is_change(&Ok(Event::new(kind).add_path(path.into())), &relevant);
    assert!(!on(
        EventKind::Access(AccessKind::Open(AccessMode::Any)),
        &real
    ));
    assert!(!on(
        EventKind::Access(AccessKind::Close(AccessMode::Read)),
        &real
    ));
    assert!(on(
        EventKind::Access(AccessKind::Close(AccessMode::Write)),
        &real
    ));
    assert!(on(EventKind::Create(CreateKind::File), &real));
    assert!(on(
        EventKind::Modify(ModifyKind::Name(RenameMode::To)),
        &real
    ));
    assert!(!on(
        EventKind::Create(CreateKind::File),
        &real.with_extension("log")
    ));
    let overflow = Event::new(EventKind::Other).set_flag(Flag::Rescan);
    assert!(is_change(&Ok(overflow), &relevant));
    assert!(is_change(
        &Err(notify::Error::generic("queue overflow")),
        &relevant
    ));
}

/// Links are followed in every component, and each link passed is reported.
#[test]
fn resolve_follows_links_in_every_component() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = fs::canonicalize(dir.path()).expect("canonical");
    configmap_version(&root, "..v1", "tls.crt", "x");
    symlink("..v1", &root.join("..data"));
    symlink("..data/tls.crt", &root.join("tls.crt"));
    let (real, links) = resolve(&root.join("tls.crt"));
    assert_eq!(real, root.join("..v1/tls.crt"));
    assert_eq!(links, [root.join("tls.crt"), root.join("..data")]);
    // A missing path stands for itself; a loop ends.
    assert_eq!(resolve(&root.join("none/x")).0, root.join("none/x"));
    symlink("loop", &root.join("loop"));
    assert_eq!(resolve(&root.join("loop")).1.len(), scan::MAX_LINKS);
}

/// A bare file name lives in the current directory.
#[test]
fn parent_of_a_bare_name_is_the_current_directory() {
    assert_eq!(parent(Path::new("tls.crt")), PathBuf::from("."));
    assert_eq!(parent(Path::new("/certs/tls.crt")), PathBuf::from("/certs"));
}
