//! Start-up: invalid certificate files and half-given flags stop `serve` with a clear error.

use std::sync::Arc;

use sluice::app::{self, AppError, Settings};
use sluice::clock::ManualClock;

use super::*;
use crate::common::process::Serve;

/// Invalid certificate files stop the start with an error that names the file.
#[tokio::test]
async fn invalid_files_stop_the_start() {
    let ca = Ca::new("ca");
    let files = Files::new(&ca.server(), None);
    let other = ca.server();
    files.replace("server.key", &other.key);
    let rules = rules_dir(RULES);
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

/// The binary refuses a certificate without a key, and a client CA without a certificate.
#[test]
fn flags_come_in_pairs() {
    for (args, missing) in [
        (&["--tls-cert", "c.pem"][..], "--tls-key"),
        (&["--tls-key", "k.pem"][..], "--tls-cert"),
        (&["--tls-client-ca", "ca.pem"][..], "--tls-cert"),
    ] {
        // No SLUICE_TLS_* variable of the test's environment reaches the binary (`Serve`).
        let out = Serve::new().rules(RULES).args(args).output();
        assert_eq!(out.code(), Some(2), "{args:?}");
        assert!(out.stderr.contains(missing), "{args:?}: {}", out.stderr);
    }
}

/// The binary exits non-zero, without panicking, when a certificate file is unreadable.
#[test]
fn binary_reports_unreadable_certificate() {
    let out = Serve::new()
        .rules(RULES)
        .args([
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ])
        .output();
    assert_eq!(out.code(), Some(1));
    let stderr = &out.stderr;
    assert!(
        stderr.contains("cannot read /nonexistent/tls.crt") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
