//! Start-up: invalid certificate files and half-given flags stop `serve` with a clear error.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use sluice::app::{self, AppError, Settings};
use sluice::clock::ManualClock;

use super::*;

/// Invalid certificate files stop the start with an error that names the file.
#[tokio::test]
async fn invalid_files_stop_the_start() {
    let ca = Ca::new("ca");
    let files = Files::new(&ca.server(), None);
    let other = ca.server();
    files.replace("server.key", &other.key);
    let rules = tempfile::tempdir().expect("temp dir");
    std::fs::write(rules.path().join("rules.yaml"), RULES).expect("write");
    let settings = Settings {
        grpc_addr: "127.0.0.1:0".parse().expect("addr"),
        http_addr: "127.0.0.1:0".parse().expect("addr"),
        tls: Some(files.settings(false)),
        ..Settings::new(vec![rules.path().to_path_buf()])
    };
    let error = match app::start(settings, Arc::new(ManualClock::new(START))).await {
        Ok(_) => panic!("a mismatched key must not start"),
        Err(e) => e,
    };
    assert!(matches!(error, AppError::Tls(_)), "{error:?}");
    assert!(error.to_string().contains("server.key"), "{error}");
}

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn serve(args: &[&str], config: &Path) -> std::process::Output {
    Command::new(BIN)
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("SLUICE_TLS_CERT")
        .env_remove("SLUICE_TLS_KEY")
        .env_remove("SLUICE_TLS_CLIENT_CA")
        .output()
        .expect("run sluice")
}

/// The binary refuses a certificate without a key, and a client CA without a certificate.
#[test]
fn flags_come_in_pairs() {
    let rules = tempfile::tempdir().expect("temp dir");
    std::fs::write(rules.path().join("rules.yaml"), RULES).expect("write");
    for (args, missing) in [
        (&["--tls-cert", "c.pem"][..], "--tls-key"),
        (&["--tls-key", "k.pem"][..], "--tls-cert"),
        (&["--tls-client-ca", "ca.pem"][..], "--tls-cert"),
    ] {
        let out = serve(args, rules.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(missing), "{args:?}: {stderr}");
    }
}

/// The binary exits non-zero, without panicking, when a certificate file is unreadable.
#[test]
fn binary_reports_unreadable_certificate() {
    let rules = tempfile::tempdir().expect("temp dir");
    std::fs::write(rules.path().join("rules.yaml"), RULES).expect("write");
    let out = serve(
        &[
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ],
        rules.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read /nonexistent/tls.crt") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
