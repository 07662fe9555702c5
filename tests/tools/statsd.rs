//! The statsd sink of the real binary: its lines read by a UDP socket of the test (a mock
//! receiver: it only collects datagrams), by a TCP listener, and by Etsy's real statsd daemon
//! (npm `statsd`, which scripts/test installs into tests/statsd), whose counters are compared
//! with the names envoyproxy/ratelimit sends.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::process::{Serve, Sluice, poll, repo_path, tool};
use common::redis::free_port;

/// A limit of 2 per minute on `api_key`, nested `path` under `plan`.
const RULES: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: plan
    value: free
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 5 }
"#;

/// Runs `future` to its end on a runtime of its own.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(future)
}

/// Three gRPC calls of `api_key=k1` (the third over the limit) and one of `plan=free, path=/a`.
fn calls(sluice: &Sluice) {
    block_on(async {
        let mut client = common::connect(sluice.grpc_addr).await;
        let one = || common::one_descriptor("edge", &[("api_key", "k1")]);
        let nested = common::one_descriptor("edge", &[("plan", "free"), ("path", "/a")]);
        for (call, code) in [(one(), 1), (one(), 1), (one(), 2), (nested, 1)] {
            let answer = common::call(&mut client, call).await;
            assert_eq!(answer.overall_code, code, "{answer:?}");
        }
    });
}

/// Every datagram waiting on `socket`, split into lines.
fn drain(socket: &UdpSocket) -> Vec<String> {
    socket.set_nonblocking(true).unwrap();
    let mut lines = Vec::new();
    let mut buf = [0u8; 65_536];
    while let Ok(n) = socket.recv(&mut buf) {
        assert!(n <= 1432, "a datagram of {n} bytes");
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

/// The lines a stopped server sent over UDP with `format` and the tag `env=test`.
fn udp_lines(format: &str) -> Vec<String> {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = receiver.local_addr().unwrap().to_string();
    let mut sluice = Serve::new()
        .rules(RULES)
        .args(["--statsd-addr", &addr, "--statsd-format", format])
        .args(["--statsd-tags", "env=test", "--statsd-flush-interval", "1h"])
        .start();
    calls(&sluice);
    // The last flush runs at shutdown, so the calls' counts are all in the socket once it exits.
    assert!(sluice.stop().success());
    drain(&receiver)
}

/// Plain statsd: upstream's names, the tag as gostats' `.__env=test` suffix, counts as the
/// calls made them, the response time as `|ms`.
#[test]
fn plain_statsd_lines_carry_upstream_names() {
    let lines = udp_lines("statsd");
    for expected in [
        "ratelimit.service.rate_limit.edge.api_key.total_hits.__env=test:3|c",
        "ratelimit.service.rate_limit.edge.api_key.within_limit.__env=test:2|c",
        "ratelimit.service.rate_limit.edge.api_key.over_limit.__env=test:1|c",
        "ratelimit.service.rate_limit.edge.api_key.near_limit.__env=test:1|c",
        "ratelimit.service.rate_limit.edge.plan_free.path.total_hits.__env=test:1|c",
        "ratelimit.service.config_load_success.__env=test:1|c",
    ] {
        assert!(
            lines.iter().any(|l| l == expected),
            "{expected} in {lines:#?}"
        );
    }
    assert!(
        !lines.iter().any(|l| l.contains("shadow_mode")),
        "a counter that stayed 0 is not sent: {lines:#?}"
    );
}

/// DogStatsD: the same names, the tag as `|#env:test`.
#[test]
fn dogstatsd_lines_carry_tags() {
    let lines = udp_lines("dogstatsd");
    assert!(
        lines
            .iter()
            .any(|l| l == "ratelimit.service.rate_limit.edge.api_key.total_hits:3|c|#env:test"),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with("ratelimit_server.ShouldRateLimit.response_time:")
                && l.contains("|ms")
                && l.ends_with("|#env:test")
        ),
        "{lines:#?}"
    );
}

/// A server sending its stats every 10 ms to a port nothing listens on, with `extra` flags;
/// the port.
fn to_a_closed_port(extra: &[&str]) -> (Sluice, u16) {
    let port = free_port();
    let sluice = Serve::new()
        .rules(RULES)
        .args(["--statsd-addr", &format!("127.0.0.1:{port}")])
        .args(["--statsd-flush-interval", "10ms"])
        .args(extra)
        .start();
    (sluice, port)
}

/// No receiver: the server starts, answers and stops as usual; the failed sends are counted.
#[test]
fn an_absent_receiver_costs_calls_nothing() {
    let (mut sluice, _) = to_a_closed_port(&["--statsd-protocol", "tcp"]);
    calls(&sluice);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    poll(Duration::from_secs(30), "a counted send error", || {
        let (_, metrics) = runtime.block_on(common::http(sluice.http_addr, "GET", "/metrics", ""));
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_statsd_send_errors_total ") && !l.ends_with(" 0"))
            .then_some(())
    });
    assert!(sluice.stop().success());
    assert_eq!(
        sluice.log().matches("statsd receiver unreachable").count(),
        1,
        "logged once per outage: {}",
        sluice.log()
    );
}

/// One gRPC call that no rule limits (its answer is not looked at).
fn one_call(sluice: &Sluice) {
    block_on(async {
        let mut client = common::connect(sluice.grpc_addr).await;
        common::call(
            &mut client,
            common::one_descriptor("edge", &[("user", "u")]),
        )
        .await;
    });
}

/// `sluice_statsd_send_errors_total` of a running server.
fn send_errors(sluice: &Sluice) -> u64 {
    let metric = scrape(sluice).lines().find_map(|l| {
        l.strip_prefix("sluice_statsd_send_errors_total ")?
            .parse()
            .ok()
    });
    metric.expect("sluice_statsd_send_errors_total")
}

/// Issue 40 (15): over UDP to a closed port every other send is refused (the port-unreachable
/// of the last datagram comes back on the next send), and the log said "unreachable" and
/// "reachable again" by turns, 503 lines in 12 s at a 10 ms flush. Now: one line when the
/// outage starts, none while it lasts (40 failed sends), one when a receiver listens on the
/// port and gets the stats.
#[test]
fn udp_to_a_closed_port_is_one_outage_with_one_line_each_way() {
    let (mut sluice, port) = to_a_closed_port(&[]);
    // Each call changes the response-time stat, so each flush after one sends a datagram.
    poll(Duration::from_secs(120), "40 failed sends", || {
        one_call(&sluice);
        std::thread::sleep(Duration::from_millis(15));
        (send_errors(&sluice) >= 40).then_some(())
    });
    let count = |sluice: &Sluice, what: &str| sluice.log().matches(what).count();
    assert_eq!(
        count(&sluice, "statsd receiver unreachable"),
        1,
        "{}",
        sluice.log()
    );
    assert_eq!(count(&sluice, "reachable again"), 0, "{}", sluice.log());

    let receiver = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    poll(Duration::from_secs(60), "the stats received", || {
        one_call(&sluice);
        let mut buf = [0u8; 2048];
        receiver.recv(&mut buf).ok()
    });
    poll(Duration::from_secs(30), "the recovery logged", || {
        one_call(&sluice);
        (count(&sluice, "reachable again") > 0).then_some(())
    });
    assert!(sluice.stop().success());
    assert_eq!(
        count(&sluice, "statsd receiver unreachable"),
        1,
        "{}",
        sluice.log()
    );
    assert_eq!(count(&sluice, "reachable again"), 1, "{}", sluice.log());
}

/// Etsy's statsd, listening on UDP and TCP, with a management port to read its counters.
struct StatsdDaemon {
    child: Child,
    port: u16,
    mgmt: u16,
    _dir: tempfile::TempDir,
}

impl StatsdDaemon {
    fn start() -> Self {
        let daemon = tool(
            "SLUICE_STATSD_DAEMON",
            "tests/statsd/node_modules/statsd/bin/statsd",
        );
        // Both taken at once: two calls of `free_port` may return the same port.
        let (port, mgmt) = {
            let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            (
                a.local_addr().unwrap().port(),
                b.local_addr().unwrap().port(),
            )
        };
        // Flushing once an hour keeps every count in the daemon until the test reads it.
        let config = format!(
            r#"{{ mgmt_address: "127.0.0.1", mgmt_port: {mgmt}, flushInterval: 3600000,
                 backends: ["./backends/console"],
                 servers: [{{ server: "./servers/udp", address: "127.0.0.1", port: {port} }},
                           {{ server: "./servers/tcp", address: "127.0.0.1", port: {port} }}] }}"#
        );
        let dir = common::process::temp_dir(&[("config.js", &config)]);
        let child = Command::new("node")
            .arg(&daemon)
            .arg(dir.path().join("config.js"))
            .current_dir(repo_path("tests/statsd/node_modules/statsd"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run node");
        let daemon = Self {
            child,
            port,
            mgmt,
            _dir: dir,
        };
        poll(Duration::from_secs(30), "statsd's management port", || {
            daemon.ask("health").ok().filter(|a| a.contains("up"))
        });
        daemon
    }

    /// The answer of the management command `command`, up to its `END`.
    fn ask(&self, command: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.mgmt))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(format!("{command}\n").as_bytes())?;
        let mut answer = String::new();
        for line in BufReader::new(stream.try_clone()?).lines() {
            let line = line?;
            if line == "END" || line.starts_with("health:") {
                answer.push_str(&line);
                break;
            }
            answer.push_str(&line);
            answer.push('\n');
        }
        let _ = stream.write_all(b"quit\n");
        let _ = stream.read(&mut [0; 1]);
        Ok(answer)
    }

    /// The daemon's count of `name` (from `util.inspect` of its counters).
    fn counter(&self, counters: &str, name: &str) -> Option<u64> {
        counters.lines().find_map(|line| {
            let line = line.trim().trim_start_matches('{').trim();
            let rest = line
                .strip_prefix(&format!("'{name}': "))
                .or_else(|| line.strip_prefix(&format!("{name}: ")))?;
            rest.trim_end_matches([',', '}', ' ']).parse().ok()
        })
    }
}

impl Drop for StatsdDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real statsd daemon receives, over TCP as envoyproxy/ratelimit sends by default, the
/// names envoyproxy/ratelimit's statsd sink sends, with the counts of the calls.
#[test]
#[ignore = "needs npm statsd (scripts/test installs it)"]
fn a_real_statsd_daemon_counts_upstream_names() {
    let daemon = StatsdDaemon::start();
    let mut sluice = Serve::new()
        .rules(RULES)
        .args(["--statsd-addr", &format!("127.0.0.1:{}", daemon.port)])
        .args(["--statsd-protocol", "tcp", "--statsd-flush-interval", "1h"])
        .start();
    calls(&sluice);
    assert!(sluice.stop().success());
    // envoyproxy/ratelimit's names for these calls (its statsd sink, gostats, without tags).
    let expected = [
        ("ratelimit.service.rate_limit.edge.api_key.total_hits", 3),
        ("ratelimit.service.rate_limit.edge.api_key.within_limit", 2),
        ("ratelimit.service.rate_limit.edge.api_key.over_limit", 1),
        ("ratelimit.service.rate_limit.edge.api_key.near_limit", 1),
        (
            "ratelimit.service.rate_limit.edge.plan_free.path.total_hits",
            1,
        ),
        (
            "ratelimit.service.rate_limit.edge.plan_free.path.within_limit",
            1,
        ),
        ("ratelimit.service.config_load_success", 1),
        ("ratelimit_server.ShouldRateLimit.total_requests", 4),
    ];
    let counters = poll(Duration::from_secs(30), "the counts in statsd", || {
        let counters = daemon.ask("counters").ok()?;
        expected
            .iter()
            .all(|(name, n)| daemon.counter(&counters, name) == Some(*n))
            .then_some(counters)
    });
    assert_eq!(
        daemon.counter(&counters, "statsd.bad_lines_seen"),
        Some(0),
        "{counters}"
    );
    assert!(
        !counters.contains("shadow_mode"),
        "nothing sent for counters at 0: {counters}"
    );
}

/// The `ratelimit` personality's DogStatsD variables, as a Datadog deployment sets them: the
/// mogrifier turns the per-rule names into one name with `domain` and `descriptor` tags, after
/// EXTRA_TAGS.
#[test]
fn the_personality_sends_mogrified_dogstatsd() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = receiver.local_addr().unwrap().port().to_string();
    let mut sluice = Serve::new()
        .rules(RULES)
        .args(["--upstream-env", "--store", "memory"])
        .env("USE_STATSD", "false")
        .env("USE_DOG_STATSD", "true")
        .env("STATSD_HOST", "127.0.0.1")
        .env("STATSD_PORT", &port)
        .env("EXTRA_TAGS", "env:test")
        .env("USE_DOG_STATSD_MOGRIFIERS", "RULE")
        .env(
            "DOG_STATSD_MOGRIFIER_RULE_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([^.]+)$",
        )
        .env(
            "DOG_STATSD_MOGRIFIER_RULE_NAME",
            "ratelimit.service.rate_limit.$3",
        )
        .env("DOG_STATSD_MOGRIFIER_RULE_TAGS", "domain:$1,descriptor:$2")
        .start();
    calls(&sluice);
    assert!(sluice.stop().success());
    let lines = drain(&receiver);
    for expected in [
        "ratelimit.service.rate_limit.total_hits:3|c|#env:test,domain:edge,descriptor:api_key",
        "ratelimit.service.rate_limit.total_hits:1|c|#env:test,domain:edge,descriptor:plan_free.path",
        "ratelimit.service.config_load_success:1|c|#env:test",
    ] {
        assert!(
            lines.iter().any(|l| l == expected),
            "{expected} in {lines:#?}"
        );
    }
}

/// `/metrics` of a server, as text.
fn scrape(sluice: &Sluice) -> String {
    let (status, text) = block_on(common::http(sluice.http_addr, "GET", "/metrics", ""));
    assert_eq!(status, 200, "{text}");
    text
}

/// Envoy Gateway's environment for metrics (USE_PROMETHEUS with its mapping file): `/metrics`
/// carries the families its dashboard reads, made by its mapping from the statsd names, with
/// the response time in milliseconds as its mapping leaves it.
#[test]
fn envoy_gateways_mapping_makes_its_dashboard_names() {
    let mapping = repo_path("tests/fixtures/envoy-gateway/statsd_conf.yaml");
    let sluice = Serve::new()
        .rules(RULES)
        .args(["--upstream-env", "--store", "memory"])
        .env("USE_STATSD", "false")
        .env("USE_PROMETHEUS", "true")
        .env("PROMETHEUS_ADDR", "127.0.0.1:0")
        .env("PROMETHEUS_MAPPER_YAML", &mapping)
        .start();
    calls(&sluice);
    let text = scrape(&sluice);
    for line in [
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="api_key"} 3"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="edge",key1="api_key"} 1"#,
        r#"ratelimit_service_rate_limit_near_limit{domain="edge",key1="api_key"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="edge",key1="plan_free",key2="path"} 1"#,
        r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 4"#,
        r#"ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="+Inf"} 4"#,
        r#"ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 4"#,
        "ratelimit_service_config_load_success 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert_eq!(
        text.matches("# TYPE ratelimit_service_rate_limit_total_hits ")
            .count(),
        1,
        "one family, the mapping's"
    );
    // Milliseconds: the bucket bounds run from 0.01 to 100.
    assert!(
        text.contains(r#"ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="100"}"#),
        "{text}"
    );
    assert!(text.contains("process_resident_memory_bytes"), "{text}");
}

/// The start with `mapping` as the mapping file, which must fail: the file's path and stderr.
fn refused_mapping(mapping: &str) -> (String, String) {
    let dir = common::process::temp_dir(&[("mapping.yaml", mapping)]);
    let file = dir.path().join("mapping.yaml");
    let out = Serve::new()
        .rules(RULES)
        .args(["--prometheus-mapper".as_ref(), file.as_os_str()])
        .output();
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    (file.display().to_string(), out.stderr)
}

/// A broken mapping stops the start with the file, line and column of the mistake.
#[test]
fn an_invalid_mapping_stops_the_start_at_its_position() {
    let (file, stderr) =
        refused_mapping("mappings:\n  - match: ratelimit.*\n    name: x\n    lables: { a: b }\n");
    let expected = format!("{file}:4:5: unknown key \"lables\"");
    assert!(stderr.contains(&expected), "{expected} in {stderr}");
}

/// `promtool check metrics` on `text`: whether it parsed (lint findings aside: exit 3), and
/// what it said.
fn promtool_parses(text: &str) -> (bool, String) {
    let mut child = Command::new(tool("SLUICE_PROMTOOL", "/usr/bin/promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (
        out.status.code() != Some(1) && !said.contains("error while linting"),
        said,
    )
}

/// Issue 40 (9): a mapping family named like a built-in one gave `/metrics` two `# TYPE` lines
/// for it and Prometheus refused the whole scrape. A written name that clashes (sluice's own
/// family, a process family) stops the start at its line and column; one made from a capture
/// is left out of `/metrics`, which promtool parses, with one warning.
#[test]
#[ignore = "needs promtool (scripts/test installs Debian's prometheus)"]
fn mapping_names_that_clash_are_refused_or_left_out_and_the_scrape_parses() {
    for (name, family) in [
        ("sluice_rlqs_streams", "sluice_rlqs_streams"),
        ("process_open_fds", "process_open_fds"),
    ] {
        let text = format!("mappings:\n  - match: ratelimit.service.*\n    name: {name}\n");
        let (file, stderr) = refused_mapping(&text);
        let at = format!("{file}:3:11: name {name:?} clashes with the family {family}");
        assert!(stderr.contains(&at), "{at} in {stderr}");
    }
    // `$1` is empty: the name is only known once a stat is mapped.
    let dir = common::process::temp_dir(&[(
        "mapping.yaml",
        "mappings:\n  - match: '^ratelimit\\.service\\.config_load_success()$'\n    \
         match_type: regex\n    name: process_open_fds$1\n",
    )]);
    let file = dir.path().join("mapping.yaml");
    let sluice = Serve::new()
        .rules(RULES)
        .args(["--prometheus-mapper".as_ref(), file.as_os_str()])
        .start();
    calls(&sluice);
    let text = scrape(&sluice);
    assert_eq!(
        text.matches("# TYPE process_open_fds ").count(),
        1,
        "{text}"
    );
    let (parsed, said) = promtool_parses(&text);
    assert!(parsed, "promtool: {said}\n{text}");
    poll(Duration::from_secs(10), "the warning", || {
        sluice
            .log()
            .contains("a statsd mapping made a family /metrics already has")
            .then_some(())
    });
    scrape(&sluice);
    assert_eq!(
        sluice
            .log()
            .matches("a statsd mapping made a family")
            .count(),
        1,
        "{}",
        sluice.log()
    );
}
