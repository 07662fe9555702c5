//! Hostile and unlucky data directories, with the real binary: a full disk (a small tmpfs),
//! FIFOs where files belong, a stray sequence number, a data directory inside the rule
//! directory. Nothing there may stop, hang or slow a start, or lose a hit that memory holds.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::process::{Serve, Sluice, mkfifo};
use common::*;

const RULES: &str = r#"
domain: test
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 50, algorithm: sliding_log }
"#;

/// `limit_remaining` after one more call on `user=<who>`.
async fn remaining_after_hit(server: &Sluice, who: &str) -> u32 {
    let mut client = connect(server.grpc_addr).await;
    let response = call(&mut client, one_descriptor("test", &[("user", who)])).await;
    assert_eq!(response.overall_code, OK, "{}", server.log());
    response.statuses[0].limit_remaining
}

/// `n` calls on `user=<who>`.
async fn hits(server: &Sluice, who: &str, n: usize) {
    for _ in 0..n {
        remaining_after_hit(server, who).await;
    }
}

async fn metric(server: &Sluice, series: &str) -> f64 {
    let (status, body) = http(server.http_addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    sample(&body, series)
}

/// Waits (generously) until `series` satisfies `ok`.
async fn wait_metric(server: &Sluice, series: &str, what: &str, ok: impl Fn(f64) -> bool) {
    let reached = within(Duration::from_secs(30), async || {
        ok(metric(server, series).await)
    })
    .await;
    assert!(reached, "not within 30 s: {what}\n{}", server.log());
}

/// Waits until two more journal flushes have run: everything admitted before is on disk.
async fn two_flushes(server: &Sluice) {
    let start = metric(server, "sluice_persist_flushes_total").await;
    wait_metric(server, "sluice_persist_flushes_total", "two flushes", |n| {
        n >= start + 2.0
    })
    .await;
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(mounted.success(), "mount a tmpfs (needs root)");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a filler file until the disk is full.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.path().join("filler")).expect("filler");
        let chunk = vec![0xa5u8; 4096];
        while filler.write_all(&chunk).is_ok() {}
        let _ = filler.flush();
    }

    fn free(&self) {
        std::fs::remove_file(self.path().join("filler")).expect("remove the filler");
    }
}

/// A small disk of `size` and a server whose data directory is on it.
fn server_on_a_small_disk(size: &str) -> (SmallDisk, Sluice) {
    let disk = SmallDisk::mount(size);
    let server = Serve::new()
        .rules(RULES)
        .data_dir(disk.path().join("data"))
        .start();
    (disk, server)
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Hits new keys until a journal write fails (the journal's last page takes a few records
/// after the disk is full).
async fn until_writes_fail(server: &Sluice) {
    for i in 0..100_000 {
        hits(server, &format!("filler-{i}"), 1).await;
        if i % 50 == 0 && metric(server, "sluice_persist_failing").await == 1.0 {
            return;
        }
    }
    panic!("journal writes never failed\n{}", server.log());
}

/// Counts hits while the disk is full, frees it, and checks the files caught up: one
/// warning (not one per flush), no "File exists", `sluice_persist_failing` back to 0.
async fn fill_count_and_free(server: &Sluice, disk: &SmallDisk) {
    hits(server, "a", 5).await;
    two_flushes(server).await;
    disk.fill();
    hits(server, "a", 10).await;
    for who in ["b", "c", "d"] {
        hits(server, who, 1).await;
    }
    until_writes_fail(server).await;
    // Three failed snapshot retries (one a second), each logged no more than the first.
    wait_metric(server, "sluice_persist_errors_total", "3 failures", |n| {
        n >= 3.0
    })
    .await;
    let log = server.log();
    let warnings = log.matches("counting goes on in memory").count();
    assert_eq!(warnings, 1, "one warning while the disk is full:\n{log}");
    assert!(!log.contains("File exists"), "{log}");
    disk.free();
    wait_metric(server, "sluice_persist_failing", "writes resume", |v| {
        v == 0.0
    })
    .await;
    hits(server, "a", 5).await;
    two_flushes(server).await;
}

/// Issue 13: with the disk full, a later SIGKILL restart handed out every hit since the disk
/// filled. Now, once space returns, the snapshot holds them and the restart keeps them all.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root (mounts a small tmpfs)"]
async fn a_full_disk_then_sigkill_keeps_every_hit() {
    let (disk, mut server) = server_on_a_small_disk("512k");
    fill_count_and_free(&server, &disk).await;
    server.kill();
    let server = server.restart(&[]);
    assert_eq!(remaining_after_hit(&server, "a").await, 50 - 21);
    assert_eq!(remaining_after_hit(&server, "b").await, 50 - 2);
}

/// As above, with SIGTERM: the last flush after the disk came back loses nothing.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root (mounts a small tmpfs)"]
async fn a_full_disk_then_sigterm_keeps_every_hit() {
    let (disk, mut server) = server_on_a_small_disk("512k");
    fill_count_and_free(&server, &disk).await;
    hits(&server, "c", 3).await;
    assert_eq!(server.stop().code(), Some(0));
    let server = server.restart(&[]);
    assert_eq!(remaining_after_hit(&server, "a").await, 50 - 21);
    assert_eq!(remaining_after_hit(&server, "c").await, 50 - 5);
}

/// SIGTERM while the disk is still full: a clean exit, and an error line saying the changes
/// since the last write are lost (nothing can be written).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root (mounts a small tmpfs)"]
async fn sigterm_on_a_full_disk_exits_and_says_what_is_lost() {
    let (disk, mut server) = server_on_a_small_disk("512k");
    disk.fill();
    hits(&server, "a", 3).await;
    until_writes_fail(&server).await;
    assert_eq!(server.stop().code(), Some(0));
    assert!(
        server.log().contains("are lost with this process"),
        "{}",
        server.log()
    );
}

/// A full disk at start does not stop the start; persistence begins once space returns.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root (mounts a small tmpfs)"]
async fn a_full_disk_at_start_does_not_stop_it() {
    let disk = SmallDisk::mount("256k");
    std::fs::create_dir(disk.path().join("data")).unwrap();
    disk.fill();
    let mut server = Serve::new()
        .rules(RULES)
        .data_dir(disk.path().join("data"))
        .start();
    hits(&server, "a", 4).await;
    disk.free();
    wait_metric(&server, "sluice_persist_failing", "writes resume", |v| {
        v == 0.0
    })
    .await;
    assert_eq!(server.stop().code(), Some(0));
    let server = server.restart(&[]);
    assert_eq!(remaining_after_hit(&server, "a").await, 50 - 5);
}

/// The data files of a directory, by name.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Issue 13: a stray `ffffffffffffffff.journal` made the second start refuse (no sequence
/// number left). It is set aside; both starts work and keep the count.
#[tokio::test(flavor = "multi_thread")]
async fn a_stray_last_sequence_number_is_set_aside() {
    let serve = Serve::new().rules(RULES);
    let mut server = serve.start();
    hits(&server, "a", 2).await;
    assert_eq!(server.stop().code(), Some(0));
    let stray = server.data_dir().join("ffffffffffffffff.journal");
    std::fs::write(&stray, b"not even a sluice file").unwrap();
    let mut server = server.restart(&[]);
    server.await_log("set aside");
    assert!(!stray.exists());
    assert_eq!(remaining_after_hit(&server, "a").await, 50 - 3);
    assert_eq!(server.stop().code(), Some(0));
    let server = server.restart(&[]);
    assert_eq!(remaining_after_hit(&server, "a").await, 50 - 4);
    let aside = names(&server.data_dir());
    assert!(
        aside.contains(&"ffffffffffffffff.journal.bad".to_owned()),
        "{aside:?}"
    );
}

/// Issue 13: a FIFO in place of a journal hung the start. It is set aside with a warning.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_in_place_of_a_journal_is_set_aside() {
    let data = tempfile::tempdir().unwrap();
    mkfifo(&data.path().join("0000000000000001.journal"));
    mkfifo(&data.path().join("0000000000000002.snapshot"));
    let mut server = Serve::new().rules(RULES).data_dir(data.path()).start();
    assert_eq!(remaining_after_hit(&server, "a").await, 49);
    let log = server.log();
    assert_eq!(
        log.matches("not a regular file (a FIFO)").count(),
        2,
        "{log}"
    );
    let names = names(data.path());
    assert!(
        names.contains(&"0000000000000001.journal.bad".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"0000000000000002.snapshot.bad".to_owned()),
        "{names:?}"
    );
    assert_eq!(server.stop().code(), Some(0));
}

/// A FIFO (or a directory) in place of the `LOCK` file is set aside; the start goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_or_directory_in_place_of_the_lock_is_set_aside() {
    for make in [mkfifo as fn(&Path), |p: &Path| {
        std::fs::create_dir(p).unwrap()
    }] {
        let data = tempfile::tempdir().unwrap();
        make(&data.path().join("LOCK"));
        let mut server = Serve::new().rules(RULES).data_dir(data.path()).start();
        assert_eq!(remaining_after_hit(&server, "a").await, 49);
        assert!(data.path().join("LOCK.bad").exists(), "{}", server.log());
        assert_eq!(server.stop().code(), Some(0));
    }
}

/// Ways to damage a key file.
type Damage = fn(&Path);

/// Damages to a key file that leave nothing of the key in it.
const KEY_DAMAGES: [(&str, Damage); 5] = [
    ("truncated", |p| {
        std::fs::write(p, "0123456789abcdef").unwrap()
    }),
    ("empty", |p| std::fs::write(p, "").unwrap()),
    ("binary", |p| {
        std::fs::write(p, [0xff_u8, 0, 0xfe, 7, 0x80]).unwrap()
    }),
    ("a dangling symlink", |p| {
        std::os::unix::fs::symlink("/nonexistent/sluice-key", p).unwrap()
    }),
    ("a symlink to a directory", |p| {
        std::os::unix::fs::symlink("/", p).unwrap()
    }),
];

/// Issue 30: a damaged `FINGERPRINT_KEY` (truncated, empty, binary, a symlink to nowhere or
/// to a directory) stopped every start. With its checksummed copy damaged too (issue 40: the
/// copy alone keeps the key), both are set aside with the data files they named, loudly and
/// counted, and a new key is made: the start goes on (the old counts are lost, as the error
/// says); the next start keeps the new key and its counts.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_fingerprint_key_is_set_aside_with_its_data() {
    for (what, damage) in KEY_DAMAGES {
        let mut server = Serve::new().rules(RULES).start();
        hits(&server, "a", 3).await;
        assert_eq!(server.stop().code(), Some(0));
        for name in ["FINGERPRINT_KEY", "FINGERPRINT_KEY.copy"] {
            let key = server.data_dir().join(name);
            std::fs::remove_file(&key).unwrap();
            damage(&key);
        }
        let mut server = server.restart(&[]);
        let log = server.log();
        assert!(
            log.contains("the fingerprint key is damaged") && log.contains("lost"),
            "{what}: {log}"
        );
        assert_eq!(
            remaining_after_hit(&server, "a").await,
            49,
            "{what}: a fresh start with a new key"
        );
        assert!(
            metric(&server, "sluice_persist_set_aside_files_total").await >= 2.0,
            "{what}: the key and at least one data file"
        );
        let files = names(&server.data_dir());
        assert!(
            files.contains(&"FINGERPRINT_KEY.bad".to_owned()),
            "{what}: {files:?}"
        );
        assert!(
            files
                .iter()
                .any(|f| f.ends_with(".journal.bad") || f.ends_with(".snapshot.bad")),
            "{what}: the data it named is kept aside: {files:?}"
        );
        assert_eq!(server.stop().code(), Some(0));
        let mut server = server.restart(&[]);
        assert_eq!(
            remaining_after_hit(&server, "a").await,
            48,
            "{what}: the new key holds"
        );
        assert_eq!(server.stop().code(), Some(0));
    }
}

/// Issue 40 (12): garbage appended to `FINGERPRINT_KEY` alone set the key and every data file
/// aside, and every counter got a free window. Now any damage to that file alone (garbage
/// appended, truncated, empty, binary, a symlink to nowhere or to a directory, deleted) loses
/// nothing: the key comes from its checksummed copy, every count is restored, and the file is
/// set aside and written again. An older sluice's directory (no copy yet) with garbage
/// appended keeps its key too.
#[tokio::test(flavor = "multi_thread")]
async fn one_damaged_key_file_loses_no_count() {
    // "garbage appended" is written below, from the original.
    let none: Damage = |_| {};
    let damages = [("garbage appended", none)]
        .into_iter()
        .chain(KEY_DAMAGES)
        .chain([("deleted", none)]);
    for (what, damage) in damages {
        let key = std::cell::RefCell::new((std::path::PathBuf::new(), Vec::new()));
        let mut server = kept_after(|data| {
            let path = data.join("FINGERPRINT_KEY");
            let original = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            damage(&path);
            if what == "garbage appended" {
                let mut damaged = original.clone();
                damaged.extend_from_slice(b"\n\x1b[31mgarbage\x00\xff\n");
                std::fs::write(&path, damaged).unwrap();
            }
            *key.borrow_mut() = (path, original);
        })
        .await;
        let (path, original) = key.into_inner();
        let log = server.log();
        assert!(!log.contains("they are lost"), "{what}: {log}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            original,
            "{what}: written again"
        );
        assert_eq!(server.stop().code(), Some(0));
        let mut server = server.restart(&[]);
        assert_eq!(remaining_after_hit(&server, "a").await, 45, "{what}");
        assert_eq!(server.stop().code(), Some(0));
    }
    // A directory an older sluice wrote: the key file alone, garbage appended.
    let mut server = kept_after(|data| {
        std::fs::remove_file(data.join("FINGERPRINT_KEY.copy")).unwrap();
        let mut damaged = std::fs::read(data.join("FINGERPRINT_KEY")).unwrap();
        damaged.extend_from_slice(b" appended by a careless script\n");
        std::fs::write(data.join("FINGERPRINT_KEY"), damaged).unwrap();
    })
    .await;
    assert!(server.data_dir().join("FINGERPRINT_KEY.copy").exists());
    assert_eq!(server.stop().code(), Some(0));
}

/// Three hits on a server, `damage` done to its stopped data directory, and a restart that
/// must still find them (46 of 50 left after one more); the restarted server.
async fn kept_after(damage: impl FnOnce(&Path)) -> Sluice {
    let mut server = Serve::new().rules(RULES).start();
    hits(&server, "a", 3).await;
    assert_eq!(server.stop().code(), Some(0));
    damage(&server.data_dir());
    let server = server.restart(&[]);
    let left = remaining_after_hit(&server, "a").await;
    assert_eq!(left, 46, "every count kept\n{}", server.log());
    server
}

/// With `--strict-data-dir` a damaged key refuses the start instead, saying why and what the
/// flag does; nothing is moved.
#[tokio::test(flavor = "multi_thread")]
async fn strict_data_dir_refuses_a_damaged_key() {
    let data = tempfile::tempdir().unwrap();
    let key = data.path().join("FINGERPRINT_KEY");
    std::fs::write(&key, "damaged").unwrap();
    let out = Serve::new()
        .rules(RULES)
        .data_dir(data.path())
        .args(["--strict-data-dir"])
        .output();
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("FINGERPRINT_KEY"), "{}", out.stderr);
    assert!(
        out.stderr.contains("--strict-data-dir refuses"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&key).unwrap(), "damaged");
}

/// A `--data-dir` that is a regular file or a dangling symlink is refused with a message that
/// says so (it used to be `File exists (os error 17)`).
#[test]
fn a_data_dir_that_is_no_directory_is_named_precisely() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data-file");
    std::fs::write(&file, "x").unwrap();
    let dangling = dir.path().join("data-link");
    std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).unwrap();
    for (path, said) in [
        (&file, "it is a regular file, not a directory".to_owned()),
        (
            &dangling,
            format!(
                "it is a symbolic link to {}, which does not exist",
                dir.path().join("gone").display()
            ),
        ),
    ] {
        let out = Serve::new().rules(RULES).data_dir(path).output();
        assert_eq!(out.code(), Some(1), "{}", out.stderr);
        assert!(out.stderr.contains(&said), "{}", out.stderr);
        assert!(!out.stderr.contains("os error 17"), "{}", out.stderr);
    }
}

/// A file named like a snapshot that this sluice did not write (another program's, or a newer
/// format's) is set aside at start, and one dropped in while serving is set aside by the next
/// compaction: neither is ever deleted.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_files_named_like_data_files_are_set_aside_not_deleted() {
    let data = tempfile::tempdir().unwrap();
    let foreign = data.path().join("0000000000000001.snapshot");
    std::fs::write(&foreign, b"somebody else's precious file").unwrap();
    let newer = data.path().join("0000000000000002.snapshot");
    std::fs::write(&newer, b"SLUICES\x09 a newer format").unwrap();
    let mut server = Serve::new().rules(RULES).data_dir(data.path()).start();
    hits(&server, "a", 2).await;
    let files = names(data.path());
    for aside in [
        "0000000000000001.snapshot.bad",
        "0000000000000002.snapshot.bad",
    ] {
        assert!(
            files.contains(&aside.to_owned()),
            "{files:?}\n{}",
            server.log()
        );
    }
    assert_eq!(
        std::fs::read(data.path().join("0000000000000001.snapshot.bad")).unwrap(),
        b"somebody else's precious file"
    );
    // Dropped in while serving, below the next snapshot's number: the restart's compaction
    // (a start with data files compacts soon) must not delete it.
    assert_eq!(server.stop().code(), Some(0));
    let dropped = data.path().join("0000000000000003.snapshot");
    std::fs::write(&dropped, b"dropped in later").unwrap();
    let mut server = server.restart(&[]);
    wait_metric(
        &server,
        "sluice_persist_snapshots_total",
        "a compaction",
        |n| n >= 1.0,
    )
    .await;
    let files = names(data.path());
    assert!(
        files.contains(&"0000000000000003.snapshot.bad".to_owned()),
        "{files:?}"
    );
    assert_eq!(remaining_after_hit(&server, "a").await, 47);
    assert_eq!(server.stop().code(), Some(0));
}

/// A zero-filled data file (sparse, 1 GiB, with a valid header) does not make the start read
/// a gigabyte of empty frames.
#[tokio::test(flavor = "multi_thread")]
async fn a_sparse_data_file_is_not_read_to_its_end() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("0000000000000001.journal");
    let file = std::fs::File::create(&path).unwrap();
    use std::io::Write;
    (&file).write_all(b"SLUICEJ\x01").unwrap();
    file.set_len(1 << 30).unwrap();
    let mut server = Serve::new().rules(RULES).data_dir(data.path()).start();
    server.await_log("empty frame");
    assert_eq!(server.stop().code(), Some(0));
}

/// Issue 13 (fixed by the duration grammar): a `--shutdown-delay` past the clock's range
/// panicked. It is refused at start with a message naming the value.
#[test]
fn a_shutdown_delay_out_of_range_is_refused() {
    let out = Serve::new()
        .rules(RULES)
        .args(["--shutdown-delay", "18446744073709551615s"])
        .output();
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("18446744073709551615s"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

/// Appends a line to `file` every 10 ms until `stop` is set.
fn keep_logging(file: PathBuf, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    std::thread::spawn(move || {
        use std::io::Write;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .unwrap();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            writeln!(out, "a log line").unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

/// Issue 13 (fixed by the shared watcher): a log written in the rule directory reloaded ~6
/// times a second, and the server's own data directory inside the rule directory postponed
/// every rule edit while traffic went on. With both, under traffic, nothing reloads until the
/// rules change, and then the edit applies.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_and_the_data_dir_inside_the_rule_dir_neither_reload_nor_delay() {
    let rules = tempfile::tempdir().unwrap();
    std::fs::write(rules.path().join("rules.yaml"), RULES).unwrap();
    let server = Serve::new()
        .config(rules.path())
        .data_dir(rules.path().join("data"))
        .args(["--persist-interval", "5ms"])
        .start();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    keep_logging(rules.path().join("sluice.log"), stop.clone());
    let loads = "ratelimit_service_config_load_success";
    // Traffic keeps the journal inside the rule directory growing.
    for i in 0..200 {
        hits(&server, &format!("u{}", i % 40), 1).await;
    }
    assert_eq!(
        metric(&server, loads).await,
        1.0,
        "no reload for the log or the journal"
    );
    std::fs::write(rules.path().join("rules.yaml"), RULES.replace("50", "60")).unwrap();
    let mut reloaded = false;
    for i in 0..2_000 {
        hits(&server, &format!("v{}", i % 40), 1).await;
        if metric(&server, loads).await >= 2.0 {
            reloaded = true;
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(reloaded, "the edit applied under traffic\n{}", server.log());
    assert_eq!(remaining_after_hit(&server, "new").await, 59);
}
