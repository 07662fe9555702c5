//! `sluice bench` as a command: flag and connection errors (its counting is tested in the
//! binary's own unit tests, `src/bench/tests.rs`).

use crate::common;

use common::process::run;

/// The binary rejects malformed flags (exit 2) and an unreachable target (exit 1) with a message.
#[test]
fn binary_rejects_bad_flags() {
    let bench = |args: &[&str]| run(["bench"].iter().chain(args));
    let base = ["--target", "127.0.0.1:1", "--domain", "d"];
    for extra in [
        &["--descriptor", "novalue"][..],
        &["--descriptor", "=v"],
        &[],
        &["--descriptor", "k=v", "--rate", "-5"],
        &["--descriptor", "k=v", "--calls", "3", "--duration", "1s"],
        &["--descriptor", "k=v", "--concurrency", "0"],
        &["--descriptor", "k=v", "--server-pid", "redis"],
        &["--descriptor", "k=v", "--server-pid", "-1"],
    ] {
        let out = bench(&[&base[..], extra].concat());
        assert_eq!(out.code(), Some(2), "{extra:?}");
    }
    let out = bench(&[&base[..], &["--descriptor", "k=v", "--calls", "1"]].concat());
    assert_eq!(out.code(), Some(1));
    assert!(
        out.stderr.contains("cannot connect to 127.0.0.1:1"),
        "{}",
        out.stderr
    );
    // A --server-pid that names no process is refused before connecting.
    let out = bench(
        &[
            &base[..],
            &["--descriptor", "k=v", "--server-pid", "4294967295"],
        ]
        .concat(),
    );
    assert_eq!(out.code(), Some(1));
    assert!(
        out.stderr
            .contains("--server-pid 4294967295: no such process"),
        "{}",
        out.stderr
    );
}
