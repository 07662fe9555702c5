//! Tests that run the real `sluice` binary: `check` exit codes, `serve` ready line and SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `sluice check` exits 0 with a summary for good rules.
#[test]
fn check_accepts_good_rules() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5 }\n",
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));
}

/// `sluice check` exits 1 and reports every error as file:line:col: message.
#[test]
fn check_reports_every_error_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n  - key: k2\n    ratelimit: {}\n",
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    let prefix = format!("{}:", bad.display());
    assert!(lines.iter().all(|l| l.starts_with(&prefix)), "{stderr}");
    assert!(
        stderr.contains(":4:") && stderr.contains("invalid rate limit unit 'fortnight'"),
        "{stderr}"
    );
    assert!(
        stderr.contains(":6:") && stderr.contains("unknown key 'ratelimit'"),
        "{stderr}"
    );
}

/// `sluice serve` prints its ready line with the bound ports, answers /healthcheck, and exits 0
/// on SIGTERM.
#[test]
fn serve_prints_ready_line_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5 }\n",
    );
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&fields[..2], ["sluice", "ready"], "{line}");
    let http = fields[3].strip_prefix("http=").unwrap();
    assert!(fields[2].starts_with("grpc=127.0.0.1:"), "{line}");

    let mut stream = TcpStream::connect(http).unwrap();
    stream
        .write_all(b"GET /healthcheck HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200"),
        "{reply}"
    );
    assert!(reply.ends_with("OK"), "{reply}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// `sluice serve` with rules that do not load exits non-zero and names the error.
#[test]
fn serve_refuses_bad_rules() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", "domain: ''\n");
    let out = Command::new(BIN)
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("config file cannot have empty domain"));
}
