//! Tests that run the real `sluice` binary: `check` exit codes, `serve` ready line and SIGTERM.

use crate::common;

use common::http1;
use common::process::{Serve, check, repo_path, run, temp_dir};

const RULES: &str =
    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5 }\n";

/// `sluice check` exits 0 with a summary for good rules.
#[test]
fn check_accepts_good_rules() {
    let dir = temp_dir(&[("a.yaml", RULES)]);
    let out = check(dir.path());
    assert!(out.stdout_ok().starts_with("ok: "), "{}", out.stdout);
}

/// `sluice check` exits 1 and reports every error as file:line:col: message.
#[test]
fn check_reports_every_error_with_location() {
    let dir = temp_dir(&[(
        "bad.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n  - key: k2\n    ratelimit: {}\n",
    )]);
    let bad = dir.path().join("bad.yaml");
    let out = check(&bad);
    assert_eq!(out.code(), Some(1));
    let stderr = &out.stderr;
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

/// `sluice check` accepts a calendar limit and refuses an unknown time zone at its position,
/// naming it; `sluice explain` describes the limit with its zone.
#[test]
fn check_and_explain_show_calendar_limits() {
    let good = "domain: cal\ndescriptors:\n  - key: k\n    rate_limit: { requests_per_unit: 10, calendar: day, timezone: Europe/Paris }\n";
    let dir = temp_dir(&[("cal.yaml", good)]);
    assert!(check(dir.path()).stdout_ok().starts_with("ok: "));
    let config = dir.path().join("cal.yaml");
    let args = [
        "explain",
        "--config",
        config.to_str().unwrap(),
        "--domain",
        "cal",
        "--descriptor",
        "k=v",
    ];
    let explained = run(args);
    let explained = explained.stdout_ok();
    assert!(
        explained.contains("10 per day (Europe/Paris)"),
        "{explained}"
    );
    let bad = temp_dir(&[("bad.yaml", &good.replace("Europe/Paris", "Europe/Atlantis"))]);
    let out = check(&bad.path().join("bad.yaml"));
    assert_eq!(out.code(), Some(1));
    assert!(
        out.stderr
            .contains(":4:67: unknown time zone 'Europe/Atlantis'"),
        "{}",
        out.stderr
    );
}

/// `sluice serve` prints its ready line with the bound ports, answers /healthcheck, and exits 0
/// on SIGTERM.
#[test]
fn serve_prints_ready_line_and_exits_cleanly_on_sigterm() {
    // `start` returns only once the first line is exactly `sluice ready grpc=<a> http=<a>`.
    let mut server = Serve::new().rules(RULES).start();
    let line = &server.ready_line;
    assert!(line.starts_with("sluice ready grpc=127.0.0.1:"), "{line}");
    assert!(
        line.contains(&format!(" http={}", server.http_addr)),
        "{line}"
    );
    assert_ne!(server.grpc_addr.port(), 0, "{line}");
    assert_ne!(server.http_addr.port(), 0, "{line}");

    let health = http1::get(server.http_addr, "/healthcheck", &[]);
    assert_eq!(health.status, 200, "{health:#?}");
    assert!(health.body.ends_with("OK"), "{health:#?}");

    assert_eq!(server.stop().code(), Some(0), "{}", server.log());
}

/// `sluice serve` with rules that do not load exits non-zero and names the error, once.
#[test]
fn serve_refuses_bad_rules() {
    let out = Serve::new().rules("domain: ''\n").output();
    assert!(!out.status.success());
    let said = out
        .stderr
        .matches("config file cannot have empty domain")
        .count();
    assert_eq!(said, 1, "{}", out.stderr);
}

/// A listener that cannot be bound stops the start, with its cause said once.
#[test]
fn serve_refuses_a_taken_port() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let config = repo_path("config");
    let out = run([
        "serve".as_ref(),
        "--no-persist".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--grpc-addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--http-addr".as_ref(),
        std::ffi::OsStr::new(&addr),
    ]);
    assert!(!out.status.success());
    let said = out.stderr.matches("Address already in use").count();
    assert_eq!(said, 1, "{}", out.stderr);
}

/// `serve` turns transparent huge pages off for itself (its memory would otherwise move in
/// 2 MiB steps), unless `MIMALLOC_ALLOW_THP` leaves the choice to the allocator.
#[test]
fn serve_turns_huge_pages_off_unless_asked() {
    let thp_enabled = |server: &common::process::Sluice| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("THP_enabled:"))
            .map(|v| v.trim().to_owned())
    };
    let server = Serve::new().rules(RULES).start();
    // Kernels before 5.0 do not report the flag; there is nothing to check on them.
    if let Some(flag) = thp_enabled(&server) {
        assert_eq!(flag, "0");
        let asked = Serve::new()
            .rules(RULES)
            .env("MIMALLOC_ALLOW_THP", "1")
            .start();
        assert_eq!(thp_enabled(&asked).as_deref(), Some("1"));
    }
}

/// `scope: global` without a global store: `sluice check` refuses it at its line and column,
/// and so does `sluice serve` (exit 1 before serving); with `--global-redis-url` (or
/// `SLUICE_GLOBAL_REDIS_URL`) `check` accepts it; `serve` with a global store but no
/// `--region` stops naming the flag.
#[test]
fn a_global_scope_needs_a_global_store_and_a_region() {
    let rules = "domain: g\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5, scope: global }\n";
    let dir = temp_dir(&[("g.yaml", rules)]);
    let refused = check(dir.path());
    assert_eq!(refused.code(), Some(1));
    assert!(
        refused
            .stderr
            .contains("g.yaml:4:62: `scope: global` needs a global store"),
        "{}",
        refused.stderr
    );
    let config = dir.path().to_str().unwrap();
    let with_flag = run([
        "check",
        "--config",
        config,
        "--global-redis-url",
        "redis://g:6379",
    ]);
    assert!(with_flag.stdout_ok().starts_with("ok: "));
    let explained = run([
        "explain",
        "--config",
        config,
        "--global-redis-url",
        "redis://g:6379",
        "--domain",
        "g",
        "--descriptor",
        "k=v",
    ]);
    let text = explained.stdout_ok();
    assert!(text.contains("5 per 1s, across regions"), "{text}");
    assert!(
        text.contains("scope: global: each region enforces its portion"),
        "{text}"
    );
    let served = Serve::new().rules(rules).output();
    assert_eq!(served.code(), Some(1), "{}", served.stderr);
    assert!(
        served.stderr.contains("needs a global store"),
        "{}",
        served.stderr
    );
    let no_region = Serve::new()
        .rules(rules)
        .env("SLUICE_GLOBAL_REDIS_URL", "redis://127.0.0.1:1")
        .output();
    assert_eq!(no_region.code(), Some(1), "{}", no_region.stderr);
    assert!(
        no_region.stderr.contains("--region"),
        "{}",
        no_region.stderr
    );
}
