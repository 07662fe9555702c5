//! The chart's dashboard and alerts against real Prometheus tools (Debian's `prometheus`
//! package): `promtool check rules` and `promtool test rules` on the alerts, and a real
//! Prometheus scraping two real sluice servers (the embedded store with persistence, and Redis
//! through an outage) under load, where every panel query of the dashboard returns data.

use crate::common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::http1;
use common::process::{Serve, Sluice, poll, repo_path, tool};
use common::redis::{RedisServer, free_port};
use common::{connect, descriptor, request};
use serde_json::Value;

const ALERTS: &str = "helm/sluice/files/alerts.yaml";
const ALERT_TESTS: &str = "tests/prometheus/alerts_test.yaml";
const DASHBOARD: &str = "helm/sluice/files/dashboard.json";

/// What the load hits: a per-user limit, and a nested per-plan one.
const RULES: &str = r#"
domain: dash
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 40 }
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: { unit: second, requests_per_unit: 4 }
"#;

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new(tool("SLUICE_PROMTOOL", "/usr/bin/promtool"))
        .args(args)
        .current_dir(repo_path(""))
        .output()
        .expect("run promtool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The alert rules are valid Prometheus rules.
#[test]
#[ignore = "needs promtool (scripts/test installs Debian's prometheus)"]
fn alert_rules_pass_promtool_check() {
    let (ok, text) = promtool(&["check", "rules", ALERTS]);
    assert!(ok, "{text}");
    assert!(text.contains("SUCCESS: 6 rules found"), "{text}");
}

/// Every alert fires on the series that should fire it and stays quiet otherwise.
#[test]
#[ignore = "needs promtool (scripts/test installs Debian's prometheus)"]
fn alert_rules_pass_their_promtool_tests() {
    let (ok, text) = promtool(&["test", "rules", ALERT_TESTS]);
    assert!(ok, "{text}");
    let rules = std::fs::read_to_string(repo_path(ALERTS)).unwrap();
    let tests = std::fs::read_to_string(repo_path(ALERT_TESTS)).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no promtool test"
        );
    }
}

/// A real Prometheus, scraping every second.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[SocketAddr]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
             scrape_configs:\n  - job_name: sluice\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(tool("SLUICE_PROMETHEUS", "/usr/bin/prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Self {
            child,
            addr,
            _dir: dir,
        };
        poll(Duration::from_secs(60), "prometheus is ready", || {
            let ready = http1::try_get(addr, "/-/ready", &[]).ok()?;
            (ready.status == 200).then_some(())
        });
        prometheus
    }

    /// `GET /api/v1/<path>?query=<expr>&<extra>`: the `data.result` array.
    fn query(&self, path: &str, expr: &str, extra: &str) -> Vec<Value> {
        let url = format!("/api/v1/{path}?query={}{extra}", encode(expr));
        let response = http1::get(self.addr, &url, &[]);
        let body: Value = serde_json::from_str(&response.body)
            .unwrap_or_else(|e| panic!("{expr}: not JSON ({e}): {}", response.body));
        assert_eq!(body["status"], "success", "{expr}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Sends calls to both servers for `seconds`: user u0 far over its limits, u1..u4 near them.
fn load(runtime: &tokio::runtime::Runtime, servers: &[SocketAddr], seconds: u64) {
    runtime.block_on(async {
        let mut clients = Vec::new();
        for addr in servers {
            clients.push(connect(*addr).await);
        }
        let until = Instant::now() + Duration::from_secs(seconds);
        let mut round = 0u64;
        while Instant::now() < until {
            for client in &mut clients {
                let user = format!("u{}", round % 5);
                let calls = if round.is_multiple_of(5) { 4 } else { 1 };
                for _ in 0..calls {
                    let _ = client
                        .should_rate_limit(request(
                            "dash",
                            vec![
                                descriptor(&[("user", &user)]),
                                descriptor(&[("plan", "free"), ("user", &user)]),
                            ],
                        ))
                        .await;
                }
            }
            round += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The dashboard's panel queries with Grafana's variables filled in as a dashboard would.
fn panel_queries() -> Vec<(String, String, bool)> {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path(DASHBOARD)).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        for target in targets {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "30s")
                .replace("$__range", "5m")
                .replace("$job", ".+");
            let instant = target["instant"] == true;
            queries.push((panel["title"].as_str().unwrap().to_owned(), expr, instant));
        }
    }
    queries
}

/// Every panel of the dashboard shows data: Prometheus scrapes a memory-store sluice (with
/// persistence and a counter bound) and a Redis-store sluice under load, through a Redis
/// outage (store errors, the breaker, degraded decisions) and a refused rule change.
#[test]
#[ignore = "needs prometheus and redis-server (scripts/test installs them)"]
fn every_dashboard_panel_returns_data_from_a_loaded_sluice() {
    let mut redis = RedisServer::start();
    let memory = Serve::new()
        .rules(RULES)
        .args(["--max-counters", "1000"])
        .start();
    let shared = Sluice::start(
        RULES,
        &[
            "--store",
            "redis",
            "--redis-url",
            &redis.url(),
            "--redis-timeout",
            "50ms",
        ],
    );
    let prometheus = Prometheus::start(&[memory.http_addr, shared.http_addr]);
    let started = unix_now();
    poll(Duration::from_secs(60), "both targets are up", || {
        let up = prometheus.query("query", "sum(up{job=\"sluice\"})", "");
        (up.first()?["value"][1] == "2").then_some(())
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let servers = [memory.grpc_addr, shared.grpc_addr];
    load(&runtime, &servers, 5);
    // A Redis outage: calls to the shared server are answered by failure_mode meanwhile.
    redis.kill();
    load(&runtime, &servers, 4);
    redis.restart();
    // A rule change that does not load, then one that does.
    let bad = memory.rules_dir().join("bad.yaml");
    std::fs::write(
        &bad,
        "domain: dash2\ndescriptors: [ { key: k, rate_limit: { unit: fortnight } } ]\n",
    )
    .unwrap();
    load(&runtime, &servers, 3);
    std::fs::remove_file(&bad).unwrap();
    load(&runtime, &servers, 4);

    let process_metrics = http1::get(memory.http_addr, "/metrics", &[])
        .body
        .contains("process_cpu_seconds_total");
    let mut empty = Vec::new();
    for (title, expr, instant) in panel_queries() {
        if !process_metrics && expr.contains("process_") {
            // The process_* collector comes with issue 11a; until then this panel is checked
            // only for being a valid query.
            eprintln!("note: no process_* metrics yet; {title}: {expr}");
            prometheus.query("query", &expr, "");
            continue;
        }
        let found = poll(Duration::from_secs(30), &format!("{title}: {expr}"), || {
            let result = if instant {
                prometheus.query("query", &expr, "")
            } else {
                let range = format!("&start={started}&end={}&step=1", unix_now());
                prometheus.query("query_range", &expr, &range)
            };
            Some(result)
        });
        if found.is_empty() {
            empty.push(format!("{title}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}",
        empty.join("\n")
    );
}
