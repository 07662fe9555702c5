//! Signals against the real binary whatever its stdout and stderr are: SIGTERM drains and exits
//! 0 after the log reader is gone or stalls, SIGHUP re-reads the files and loses no count, and a
//! closed stdout does not stop the start.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use common::http1;
use common::process::{Serve, poll};

const RULES: &str = "domain: sig\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";

/// How long a drain may take before the test calls it a hang.
const EXIT_LIMIT: Duration = Duration::from_secs(30);

/// One `/json` call for `k=v`: the remaining hits it reports (proto3 JSON leaves out a 0).
fn remaining(http: SocketAddr) -> u64 {
    let body = r#"{"domain":"sig","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let response = http1::post(http, "/json", &[("Content-Type", "application/json")], body);
    assert_eq!(response.status, 200, "{response:#?}");
    let json: serde_json::Value = serde_json::from_str(&response.body).expect("JSON");
    assert!(json["statuses"][0]["currentLimit"].is_object(), "{json}");
    json["statuses"][0]["limitRemaining"].as_u64().unwrap_or(0)
}

fn signal(child: &Child, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{name} failed");
}

/// Waits for the child to exit; a panic if it does not within the limit (`Reap` then kills it).
fn exited(child: &mut Child, what: &str) -> ExitStatus {
    poll(EXIT_LIMIT, what, || child.try_wait().expect("wait"))
}

/// The addresses of the ready line `stdout` starts with.
fn ready(stdout: impl Read) -> (SocketAddr, SocketAddr, BufReader<impl Read>) {
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line).expect("ready line");
    let field = |name: &str| -> SocketAddr {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    (field("grpc="), field("http="), stdout)
}

/// Kills the child if a test panics before it ends.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `sluice serve … 2>&1 | shipper` and the shipper dies: SIGTERM still drains, persists and
/// exits 0, and a restart restores the counts.
#[test]
fn sigterm_drains_after_the_log_reader_is_gone() {
    let serve = Serve::new()
        .rules(RULES)
        .args(["--persist-interval", "30s"]);
    let mut child = serve
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (_, http, _stdout) = ready(child.stdout.take().unwrap());
    // The log reader goes away: every log write from now on meets a broken pipe.
    drop(child.stderr.take());
    let mut child = Reap(Some(child));
    let before: Vec<u64> = (0..5).map(|_| remaining(http)).collect();
    assert_eq!(before, [9, 8, 7, 6, 5]);
    let running = child.0.as_mut().unwrap();
    signal(running, "TERM");
    let status = exited(running, "exit after SIGTERM with a broken stderr");
    assert_eq!(status.code(), Some(0), "{status:?}");
    child.0 = None;

    let mut restarted = serve.start();
    assert_eq!(
        remaining(restarted.http_addr),
        4,
        "the five hits were persisted at shutdown: {}",
        restarted.log()
    );
    assert_eq!(restarted.stop().code(), Some(0));
}

/// A log reader that stops reading (stderr's pipe full): calls go on being answered and SIGTERM
/// still drains and exits 0; the lines that did not fit are dropped.
#[test]
fn sigterm_drains_while_stderr_is_stalled() {
    let rules = RULES.replace("per_unit: 10 ", "per_unit: 100000 ");
    let serve = Serve::new().rules(&rules).args(["--log-level", "trace"]);
    let mut child = serve
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (_, http, _stdout) = ready(child.stdout.take().unwrap());
    // Held, never read: a pipe holds 64 KiB, and trace-level lines for a few hundred calls are
    // far more than that.
    let _stalled = child.stderr.take();
    let mut child = Reap(Some(child));
    for _ in 0..300 {
        remaining(http);
    }
    let running = child.0.as_mut().unwrap();
    signal(running, "TERM");
    let status = exited(running, "exit after SIGTERM with a stalled stderr");
    assert_eq!(status.code(), Some(0), "{status:?}");
    child.0 = None;
}

/// SIGHUP re-reads the rule files (a new generation, the log says so) and the process goes on
/// with its counts; the hits before it are still there after a SIGTERM and a restart.
#[test]
fn sighup_reloads_the_rules_and_loses_nothing() {
    let mut server = Serve::new()
        .rules(RULES)
        .args(["--persist-interval", "30s"])
        .start();
    let http = server.http_addr;
    for expected in [9, 8, 7, 6, 5] {
        assert_eq!(remaining(http), expected);
    }
    let generation = || {
        let metrics = http1::get(http, "/metrics", &[]).body;
        common::sample(&metrics, "sluice_rules_generation")
    };
    assert_eq!(generation(), 1.0);
    let pid = server.pid().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    poll(EXIT_LIMIT, "a new rule generation after SIGHUP", || {
        (generation() == 2.0).then_some(())
    });
    server.await_log("SIGHUP");
    assert_eq!(remaining(http), 4, "the counts survive the reload");
    assert_eq!(server.stop().code(), Some(0), "{}", server.log());

    let mut restarted = server.restart(&["--persist-interval", "30s"]);
    assert_eq!(
        remaining(restarted.http_addr),
        3,
        "nothing handed out again after the restart"
    );
    assert_eq!(restarted.stop().code(), Some(0));
}

/// `sluice serve … | true`: stdout is a broken pipe before the ready line; the server starts,
/// serves and exits 0 on SIGTERM all the same. The addresses come from its log instead.
#[test]
fn closed_stdout_does_not_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("sluice.log");
    let serve = Serve::new().rules(RULES);
    let mut child = serve
        .command()
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let mut child = Reap(Some(child));
    let http: SocketAddr = poll(EXIT_LIMIT, "the serving log line", || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.lines()
            .find(|l| l.contains("serving"))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("http=")))
            .and_then(|a| a.parse().ok())
    });
    assert_eq!(remaining(http), 9);
    let running = child.0.as_mut().unwrap();
    signal(running, "TERM");
    let status = exited(running, "exit after SIGTERM");
    assert_eq!(
        status.code(),
        Some(0),
        "{status:?}: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    child.0 = None;
}
