//! `sluice bench` against an in-process sluice on port 0: counts add up and match the limits.

use std::sync::Arc;
use std::time::Duration;

use sluice::app::{self, Running, Settings};
use sluice::clock::{ManualClock, SECOND};

use super::{BenchArgs, BenchError, BenchFormat, execute, parse_descriptor};

/// An in-process sluice on loopback port 0 with `rules`, on a manual clock that never moves.
struct TestServer {
    grpc_addr: std::net::SocketAddr,
    running: Running,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start(rules: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("rules.yaml"), rules).expect("write rules");
        let settings = Settings {
            grpc_addr: "127.0.0.1:0".parse().unwrap(),
            http_addr: "127.0.0.1:0".parse().unwrap(),
            watch_rules: false,
            shutdown_grace: Duration::from_secs(5),
            ..Settings::new(vec![dir.path().to_path_buf()])
        };
        let clock = Arc::new(ManualClock::new(1_000_000 * SECOND));
        let running = app::start(settings, clock).await.expect("server starts");
        Self {
            grpc_addr: running.grpc_addr,
            running,
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.running.stop().await.expect("clean stop");
    }
}

/// Ten calls per minute per user, fixed window (the manual clock never moves).
const RULES: &str = "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n    descriptors:\n      - key: path\n        rate_limit: { unit: minute, requests_per_unit: 1000 }\n";

fn args(server: &TestServer, descriptor: &str) -> BenchArgs {
    BenchArgs {
        target: server.grpc_addr.to_string(),
        domain: "bench".into(),
        descriptors: vec![parse_descriptor(descriptor).unwrap()],
        keys: Some(3),
        concurrency: 4,
        connections: 2,
        duration: None,
        calls: Some(60),
        rate: None,
        format: BenchFormat::Json,
        server_pids: Vec::new(),
        count_cpu: None,
        cpu_ticks: None,
        command: Vec::new(),
    }
}

/// Closed loop over 3 keys with a limit of 10 each: 30 OK, 30 OVER_LIMIT, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_counts_match_the_limit() {
    let server = TestServer::start(RULES).await;
    let report = execute(&args(&server, "user=u-")).await.unwrap();
    assert_eq!(
        (report.calls, report.ok, report.over_limit, report.errors),
        (60, 30, 30, 0)
    );
    assert_eq!(report.latency.len(), 60, "one latency per call");
    // Other work is measured on Linux (`None` only for a run shorter than a clock tick).
    assert!(
        report.other_cores.is_none_or(|cores| cores >= 0.0),
        "{:?}",
        report.other_cores
    );
    let doc: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(doc["calls"], 60);
    assert_eq!(doc["over_limit"], 30);
    assert!(doc["calls_per_sec"].as_f64().unwrap() > 0.0);
    for p in ["p50", "p90", "p99", "p999", "max"] {
        assert!(doc["latency_us"][p].as_f64().unwrap() > 0.0, "{p}");
    }
    server.stop().await;
}

/// Open loop at a fixed rate sends exactly the calls asked for; a nested descriptor whose
/// last value gets the key index counts per key too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_sends_every_call() {
    let server = TestServer::start(RULES).await;
    let mut a = args(&server, "user=u,path=/p");
    a.rate = Some(2_000.0);
    a.calls = Some(40);
    a.keys = Some(1);
    let report = execute(&a).await.unwrap();
    assert_eq!(
        (report.calls, report.ok, report.over_limit, report.errors),
        (40, 40, 0, 0)
    );
    server.stop().await;
}

/// Calls to an unknown domain are all OK; errors stay zero; no key spreading needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_domain_is_all_ok() {
    let server = TestServer::start(RULES).await;
    let mut a = args(&server, "user=u");
    a.domain = "elsewhere".into();
    a.keys = None;
    a.calls = Some(25);
    let report = execute(&a).await.unwrap();
    assert_eq!((report.calls, report.ok, report.errors), (25, 25, 0));
    server.stop().await;
}

/// Bad input is an error, not a panic: an empty domain is answered INVALID_ARGUMENT and
/// counted as errors; a closed port fails to connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_counted_and_reported() {
    let server = TestServer::start(RULES).await;
    let mut a = args(&server, "user=u");
    a.domain = String::new();
    a.calls = Some(5);
    let report = execute(&a).await.unwrap();
    assert_eq!((report.calls, report.errors), (5, 5));
    assert!(report.first_error.unwrap().contains("domain"));
    server.stop().await;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    let mut a = args(&TestServer::start(RULES).await, "user=u");
    a.target = closed.to_string();
    assert!(matches!(execute(&a).await, Err(BenchError::Connect { .. })));
}

/// A `--server-pid` that names no process is refused before any call is sent; the server's
/// own pid (here, this process) is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pid_must_name_a_process() {
    let server = TestServer::start(RULES).await;
    let mut a = args(&server, "user=u");
    a.server_pids = vec![std::process::id(), u32::MAX];
    let error = execute(&a).await.unwrap_err();
    assert!(matches!(error, BenchError::ServerPid(u32::MAX)), "{error}");
    assert!(error.to_string().contains("--server-pid 4294967295"));
    a.server_pids = vec![std::process::id()];
    a.calls = Some(5);
    let report = execute(&a).await.unwrap();
    assert_eq!(report.calls, 5);
    server.stop().await;
}

/// `sluice bench`'s flags alone, as the command line gives them.
#[derive(clap::Parser)]
struct BenchLine {
    #[command(flatten)]
    bench: BenchArgs,
}

fn parse_line(line: &[&str]) -> Result<BenchArgs, clap::Error> {
    use clap::Parser;
    BenchLine::try_parse_from(std::iter::once("bench").chain(line.iter().copied()))
        .map(|line| line.bench)
}

/// The accounting modes need no target; a benchmark still does; the two modes exclude each
/// other.
#[test]
fn cpu_modes_parse_without_a_target() {
    let counted = parse_line(&["--count-cpu", "out.json", "--", "sleep", "1"]).unwrap();
    assert_eq!(
        counted.count_cpu.as_deref(),
        Some(std::path::Path::new("out.json"))
    );
    assert_eq!(counted.command, ["sleep", "1"]);
    assert_eq!(
        parse_line(&["--cpu-ticks", "42"]).unwrap().cpu_ticks,
        Some(42)
    );
    assert!(parse_line(&[]).is_err(), "a benchmark needs --target");
    assert!(parse_line(&["--count-cpu", "a", "--cpu-ticks", "1"]).is_err());
}

/// A real run: the command's status comes back and the figures have bench-counted's keys.
#[cfg(target_os = "linux")]
#[test]
fn count_cpu_runs_the_command_and_writes_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("counted.json");
    let command = ["sh", "-c", "exit 3"].map(String::from);
    assert_eq!(super::count_cpu::count(&out, &command).unwrap(), 3);
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for key in ["wall_s", "busy_ticks", "steal_ticks", "load_ticks"] {
        assert!(figures[key].is_number(), "{key} in {figures}");
    }
    assert!(super::count_cpu::count(&out, &[]).is_err(), "no command");
    assert!(super::count_cpu::cpu_ticks(std::process::id()).is_ok());
    assert!(super::count_cpu::cpu_ticks(u32::MAX).is_err());
}
