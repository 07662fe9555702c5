//! `sluice counters get|reset` against the real binary's admin listener: a counter read and
//! reset, checked by calls before and after; the audit line in the server's log; refusals
//! (a wrong token, a descriptor no rule limits) as a non-zero exit with the server's message;
//! and `serve` refusing an admin listener without a usable token file.

use std::path::Path;

use crate::common::http1;
use crate::common::process::{Output, Serve, run};
use crate::common::redis::free_port;

const RULES: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: fixed_window, name: per-key }
"#;

const ALICE: &str = "a11ce0000000000000000000000000000000000000000000000000000000000a";
const BOB: &str = "b0b0000000000000000000000000000000000000000000000000000000000b0b";

/// One `/json` call for `api_key=k1`: its HTTP status (200 OK, 429 over the limit).
fn call(http: std::net::SocketAddr) -> u16 {
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}"#;
    http1::post(http, "/json", &[("content-type", "application/json")], body).status
}

/// `sluice counters <action> --admin <url> --token-file <file> [extra] --domain edge ...`.
fn counters(
    action: &str,
    url: &str,
    token_file: &Path,
    extra: &[&str],
    descriptor: &str,
) -> Output {
    let mut args = vec![
        "counters".to_owned(),
        action.to_owned(),
        "--admin".to_owned(),
        url.to_owned(),
        "--token-file".to_owned(),
        token_file.display().to_string(),
        "--domain".to_owned(),
        "edge".to_owned(),
        "--descriptor".to_owned(),
        descriptor.to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    run(args)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_str(out.stdout_ok()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// Limit 3: three calls pass, the fourth is refused; `counters get` shows 3 used; `counters
/// reset` clears it, logged as an audit line naming the token and the client; the next call
/// passes. A wrong token and an unlimited descriptor exit 1 with the server's message and
/// change nothing.
#[test]
fn counters_get_and_reset_through_the_cli() {
    let secrets = tempfile::tempdir().unwrap();
    let server_tokens = secrets.path().join("admin-tokens");
    std::fs::write(&server_tokens, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    let alice = secrets.path().join("alice");
    std::fs::write(&alice, format!("alice:{ALICE}\n")).unwrap();
    let wrong = secrets.path().join("wrong");
    std::fs::write(&wrong, ALICE.replace('a', "c")).unwrap();

    let admin = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{admin}");
    let mut server = Serve::new()
        .rules(RULES)
        .args(["--admin-addr", &admin, "--admin-token-file"])
        .args([&server_tokens])
        .start();
    let calls: Vec<u16> = (0..4).map(|_| call(server.http_addr)).collect();
    assert_eq!(calls, [200, 200, 200, 429]);

    let read = json(&counters("get", &url, &alice, &[], "api_key=k1"));
    let counter = &read["limits"][0]["counters"][0];
    assert_eq!(read["rule"], "edge.api_key", "{read}");
    assert_eq!(
        (&counter["used"], &counter["admits"]),
        (&3.into(), &false.into()),
        "{read}"
    );

    let refused = counters("reset", &url, &wrong, &[], "api_key=k1");
    assert_eq!(refused.code(), Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("the bearer token is not valid") && refused.stderr.contains("401"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        call(server.http_addr),
        429,
        "a refused reset changes nothing"
    );

    let unlimited = counters("get", &url, &alice, &[], "user=u1");
    assert_eq!(unlimited.code(), Some(1), "{unlimited:?}");
    assert!(
        unlimited
            .stderr
            .contains("no rule limits descriptor 'user=u1'")
            && unlimited.stderr.contains("404"),
        "{}",
        unlimited.stderr
    );

    // The server's own file holds two tokens: the client needs to be told which.
    let ambiguous = counters("get", &url, &server_tokens, &[], "api_key=k1");
    assert!(ambiguous.stderr.contains("--token-name"), "{ambiguous:?}");
    let reset = counters(
        "reset",
        &url,
        &server_tokens,
        &["--token-name", "bob"],
        "api_key=k1",
    );
    let reset = json(&reset);
    assert_eq!(reset["counters_cleared"], 1, "{reset}");
    assert_eq!(reset["reset"][0]["name"], "per-key", "{reset}");
    assert_eq!(call(server.http_addr), 200, "fresh after the reset");

    let log = server.await_log("sluice::audit");
    let audit: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sluice::audit"))
        .collect();
    assert_eq!(audit.len(), 1, "{log}");
    for says in [
        "counters reset",
        "token=\"bob\"",
        "peer=127.0.0.1:",
        "domain=edge",
        "descriptor=api_key=k1",
        "counters_cleared=1",
    ] {
        assert!(audit[0].contains(says), "{says}: {}", audit[0]);
    }
    assert!(
        !log.contains(ALICE) && !log.contains(BOB),
        "no token in the log"
    );
    assert_eq!(server.stop().code(), Some(0), "{}", server.log());
}

/// `--admin-addr` without a usable token file stops the start, naming the file; without
/// `--admin-token-file` at all, clap says it is required.
#[test]
fn serve_refuses_an_admin_listener_without_tokens() {
    let secrets = tempfile::tempdir().unwrap();
    let missing = secrets.path().join("no-such-tokens");
    let out = Serve::new()
        .rules(RULES)
        .args(["--admin-addr", "127.0.0.1:0", "--admin-token-file"])
        .args([&missing])
        .output();
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("cannot read admin token file")
            && out.stderr.contains("no-such-tokens"),
        "{}",
        out.stderr
    );
    let out = Serve::new()
        .rules(RULES)
        .args(["--admin-addr", "127.0.0.1:0"])
        .output();
    assert!(!out.status.success());
    assert!(out.stderr.contains("--admin-token-file"), "{}", out.stderr);
}
