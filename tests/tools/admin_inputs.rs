//! What reaches the real binary's admin listener from outside and what it does with it: a
//! descriptor written to forge a log line, in both log formats; a token file others could
//! write or read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::common::process::{Serve, Sluice, poll};
use crate::common::redis::free_port;

/// Any `api_key` value, three an hour.
const RULES: &str = "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n";

const TOKEN: &str = "a11ce0000000000000000000000000000000000000000000000000000000000a";

/// A token file of mode `mode` holding `alice:TOKEN`.
fn token_file(dir: &Path, mode: u32) -> std::path::PathBuf {
    let path = dir.join("admin-tokens");
    std::fs::write(&path, format!("alice:{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// `sluice serve` with its admin listener on a free port; returns it with the admin address.
fn serve(tokens: &Path, extra: &[&str]) -> (Sluice, SocketAddr) {
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let server = Serve::new()
        .rules(RULES)
        .args(["--admin-addr", &admin.to_string(), "--admin-token-file"])
        .args([tokens])
        .args(extra)
        .start();
    (server, admin)
}

/// `DELETE /counters?<query>` with the token; the status.
fn reset(admin: SocketAddr, query: &str) -> u16 {
    let mut stream = TcpStream::connect(admin).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "DELETE /counters?{query} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Issue 40 (7): a descriptor value holding a newline, a whole forged audit line and ANSI
/// escapes wrote that forged `sluice::audit` line, and the raw ESC byte, into the text log;
/// and a 1,000-byte value (the most a descriptor value may hold is 1 KiB) made a line that long in either format. Now, in text and in JSON,
/// the reset gives exactly one audit line, no control byte reaches the log, and the value is
/// cut to its bound.
#[test]
fn a_descriptor_cannot_forge_an_audit_line_in_either_log_format() {
    let forged = format!(
        "k1\n2026-12-03T00:00:00.000000Z  INFO sluice::audit: counters reset token=\"root\" \
         domain=edge descriptor=api_key=everyone\u{1b}[2J\u{1b}[31m{}",
        "x".repeat(800)
    );
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("domain", "edge")
        .append_pair("descriptor", &format!("api_key={forged}"))
        .finish();
    for format in ["text", "json"] {
        let secrets = tempfile::tempdir().unwrap();
        let tokens = token_file(secrets.path(), 0o600);
        let (mut server, admin) = serve(&tokens, &["--log-format", format]);
        assert_eq!(reset(admin, &query), 200, "{format}\n{}", server.log());
        // Written by the log's own thread, maybe a moment after the answer.
        let log = poll(Duration::from_secs(10), "the audit line", || {
            Some(server.log()).filter(|log| log.contains("counters reset"))
        });
        let audit: Vec<&str> = (log.lines().filter(|l| l.contains("sluice::audit"))).collect();
        assert_eq!(audit.len(), 1, "{format}: one audit line\n{log}");
        assert!(
            !log.chars().any(|c| c.is_control() && c != '\n'),
            "{format}: a control character reached the log\n{log:?}"
        );
        assert!(
            audit[0].len() < 1_000 && audit[0].contains("more bytes)"),
            "{format}: the value is cut ({} bytes)\n{}",
            audit[0].len(),
            audit[0]
        );
        if format == "json" {
            for line in log.lines() {
                let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
                assert!(parsed.is_ok(), "a JSON line: {line}");
            }
        } else {
            assert!(
                audit[0].contains(r#"descriptor="api_key=k1\n2026"#),
                "{}",
                audit[0]
            );
        }
        assert_eq!(server.stop().code(), Some(0));
    }
}

/// Issue 40 (16): a token file every user could write (0666) was accepted without a word. Now
/// a file others may write stops the start, naming the file, its mode and the fix; a file
/// every user may read (0644, a Kubernetes Secret's default) starts with one warning, not one
/// per reload.
#[test]
fn a_token_file_others_may_write_is_refused_and_one_they_may_read_warned_once() {
    let secrets = tempfile::tempdir().unwrap();
    for mode in [0o666, 0o620] {
        let tokens = token_file(secrets.path(), mode);
        let out = Serve::new()
            .rules(RULES)
            .args(["--admin-addr", "127.0.0.1:0", "--admin-token-file"])
            .args([&tokens])
            .output();
        assert_eq!(out.code(), Some(1), "{mode:o}: {}", out.stderr);
        let says = format!(
            "may be written by {}",
            ["its group", "every user"][usize::from(mode == 0o666)]
        );
        assert!(
            out.stderr.contains(&says)
                && out.stderr.contains(&format!("mode {mode:04o}"))
                && out.stderr.contains("admin-tokens"),
            "{mode:o}: {}",
            out.stderr
        );
    }
    let tokens = token_file(secrets.path(), 0o644);
    let (mut server, admin) = serve(&tokens, &[]);
    for _ in 0..2 {
        assert!(
            std::process::Command::new("kill")
                .args(["-HUP", &server.pid().to_string()])
                .status()
                .unwrap()
                .success()
        );
        poll(Duration::from_secs(10), "the tokens reloaded", || {
            (server.log().matches("admin tokens reloaded").count() >= 1).then_some(())
        });
    }
    poll(Duration::from_secs(10), "two reloads", || {
        (server.log().matches("admin tokens reloaded").count() >= 2).then_some(())
    });
    assert_eq!(
        server
            .log()
            .matches("admin token file is readable by every user")
            .count(),
        1,
        "{}",
        server.log()
    );
    assert_eq!(reset(admin, "domain=edge&descriptor=api_key%3Dk1"), 200);
    assert_eq!(server.stop().code(), Some(0));
}
