//! The HTTP port under idle and slow clients, with the real binary under a 1,024 file
//! descriptor limit: thousands of connections that send nothing, or never finish their
//! headers or body, cannot starve gRPC or `/healthcheck`, and are closed by the server.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::process::{Serve, Sluice, poll};
use common::*;

const RULES: &str = "domain: test\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";

/// Sets the open-file limit of process `pid` (soft and hard) with util-linux `prlimit`.
fn limit_open_files(pid: u32, n: u64) {
    let set = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={n}:{n}")])
        .status()
        .expect("run prlimit");
    assert!(set.success(), "prlimit --pid {pid} --nofile={n}");
}

/// Lets this test process itself hold thousands of sockets.
fn raise_own_file_limit() {
    let _ = Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            "--nofile=8192:8192",
        ])
        .status();
}

/// Opens up to `n` connections to `addr` (a server that stops accepting makes some time out):
/// even ones send nothing, odd ones half a request head.
fn hostile_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|i| {
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
            if i % 2 == 1 {
                let _ = stream.write_all(b"GET /healthcheck HTTP/1.1\r\nHost: slow\r\n");
            }
            Some(stream)
        })
        .collect()
}

/// Whether the server has closed `stream` (EOF or reset); false while it is open.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut buf = [0u8; 256];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => closed_by_server(stream),
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// One `/healthcheck` on a fresh connection, with a deadline: the status, or `None`.
fn healthcheck(addr: SocketAddr) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.split_whitespace().nth(1)?.parse().ok()
}

/// One gRPC call on a fresh connection, with a deadline: whether it was answered.
async fn grpc_answers(addr: SocketAddr) -> bool {
    let attempt = async {
        let mut client = connect(addr).await;
        client
            .should_rate_limit(one_descriptor("test", &[("user", "probe")]))
            .await
            .is_ok()
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .unwrap_or(false)
}

/// Issue 13: 2,000 idle or slow-header HTTP connections stayed open for good; under a
/// 1,024-fd limit gRPC then refused connections and `/healthcheck` timed out. Now the
/// connection cap evicts the oldest, gRPC and probes are served, and every hostile connection
/// is closed (evicted, or by the header timeout).
#[tokio::test(flavor = "multi_thread")]
async fn idle_and_slow_http_clients_cannot_starve_grpc_or_health() {
    // This test itself holds 2,000 sockets.
    raise_own_file_limit();
    let server: Sluice = Serve::new().rules(RULES).start();
    limit_open_files(server.pid(), 1024);
    let mut hostile = hostile_connections(server.http_addr, 2_000);

    let answered = within(Duration::from_secs(60), async || {
        grpc_answers(server.grpc_addr).await
    })
    .await;
    assert!(answered, "gRPC answers\n{}", server.log());
    let health = poll(Duration::from_secs(60), "/healthcheck answers", || {
        healthcheck(server.http_addr)
    });
    assert_eq!(health, 200);

    let started = Instant::now();
    poll(
        Duration::from_secs(60),
        "every hostile connection closed",
        || {
            hostile.retain_mut(|s| !closed_by_server(s));
            hostile.is_empty().then_some(())
        },
    );
    eprintln!(
        "all 2,000 hostile connections closed {:?} after the probes",
        started.elapsed()
    );
    assert!(grpc_answers(server.grpc_addr).await);
}

/// The number of file descriptors process `pid` holds.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Issue 40 (10): under a 1,024-descriptor limit set before the start, 1,500 POSTs whose body
/// never finishes held a descriptor each (a request in progress was evicted only after its
/// answer, the 408 ten seconds later): the process hit "Too many open files", `/healthcheck`
/// timed out and new gRPC connections waited. Now the caps are fitted under the limit at start
/// (one warning says so), a connection still closing when the HTTP cap is full again is cut,
/// and the server holds far fewer descriptors than its limit: probes and gRPC are answered.
#[tokio::test(flavor = "multi_thread")]
async fn slow_bodies_cannot_exhaust_the_file_limit() {
    // This test itself holds 1,500 sockets.
    raise_own_file_limit();
    let server: Sluice = Serve::new()
        .rules(RULES)
        .wrapped("prlimit", ["--nofile=1024:1024", "--"])
        .start();
    // The log is written by a background thread: the line may follow the ready line.
    let log = poll(Duration::from_secs(10), "the file limit's line", || {
        let log = server.log();
        log.contains("file descriptors:").then_some(log)
    });
    assert!(
        log.contains("file descriptors: the limit is too low for the connection caps")
            && log.contains("--grpc-max-connections lowered from 4096 to 576")
            && log.contains("--http-max-connections from 256 to 192"),
        "{log}"
    );
    let head = "POST /json HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\n\
                Content-Length: 1000\r\n\r\n{\"domain\":";
    let slow: Vec<TcpStream> = (0..1_500)
        .filter_map(|_| {
            let mut stream =
                TcpStream::connect_timeout(&server.http_addr, Duration::from_secs(5)).ok()?;
            let _ = stream.write_all(head.as_bytes());
            Some(stream)
        })
        .collect();
    // A cut connection's descriptor is closed when its task next runs (milliseconds); the 5 s
    // allowed is half the request timeout, after which even an uncapped server would have
    // answered the oldest bodies 408 and closed them.
    let mut held = open_fds(server.pid());
    for _ in 0..50 {
        if held < 512 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        held = open_fds(server.pid());
    }
    assert!(
        held < 512,
        "the server holds {held} descriptors of its 1,024 after {} slow bodies",
        slow.len()
    );
    let health = poll(Duration::from_secs(30), "/healthcheck answers", || {
        healthcheck(server.http_addr)
    });
    assert_eq!(health, 200);
    assert!(grpc_answers(server.grpc_addr).await, "{}", server.log());
    // A cut connection's task ends a moment after it is cut: the gauge follows.
    let (open, evicted) = within_metrics(&server).await;
    assert!(open <= 193.0, "{open} open");
    assert!(evicted >= 1_300.0, "{evicted} evicted");
    eprintln!(
        "{} slow bodies: {held} descriptors held, {open} HTTP connections open, {evicted} evicted",
        slow.len()
    );
}

/// `sluice_http_connections` once it is within the cap (192, and one closing), and
/// `sluice_http_connections_evicted_total`; the last reading after 30 s otherwise.
async fn within_metrics(server: &Sluice) -> (f64, f64) {
    let mut reading = (f64::MAX, 0.0);
    for _ in 0..300 {
        let (_, metrics) = http(server.http_addr, "GET", "/metrics", "").await;
        reading = (
            sample(&metrics, "sluice_http_connections"),
            sample(&metrics, "sluice_http_connections_evicted_total"),
        );
        if reading.0 <= 193.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reading
}

/// A request whose body never arrives is answered 408 (the request timeout), and its
/// connection closed; the server keeps answering others meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_never_arrives_is_answered_408() {
    let server: Sluice = Serve::new().rules(RULES).start();
    let mut stream = TcpStream::connect(server.http_addr).unwrap();
    stream
        .write_all(b"POST /json HTTP/1.1\r\nHost: slow\r\nContent-Length: 100\r\n\r\n{\"dom")
        .unwrap();
    assert_eq!(healthcheck(server.http_addr), Some(200));
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
}

/// `--grpc-max-connections 3`: three clients are served; fifty more connections are each closed
/// as soon as they are accepted and counted, while the three go on being answered; once one of
/// the three goes, a new client gets its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_connections_past_the_cap_are_refused_alone() {
    let server = Serve::new()
        .rules(RULES)
        .args(["--no-persist", "--grpc-max-connections", "3"])
        .start();
    let addr = server.grpc_addr;
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut client = connect(addr).await;
        let who = format!("u{i}");
        let response = call(&mut client, one_descriptor("test", &[("user", &who)])).await;
        assert_eq!(response.overall_code, OK);
        clients.push(client);
    }
    let gauge = async || {
        let metrics = http(server.http_addr, "GET", "/metrics", "").await.1;
        (
            sample(&metrics, "sluice_grpc_connections"),
            sample(&metrics, "sluice_grpc_connections_refused_total"),
        )
    };
    assert_eq!(gauge().await, (3.0, 0.0));

    let mut refused: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect"))
        .collect();
    poll(
        Duration::from_secs(30),
        "every connection past the cap closed",
        || refused.iter_mut().all(closed_by_server).then_some(()),
    );
    for (i, client) in clients.iter_mut().enumerate() {
        let who = format!("u{i}");
        let response = call(client, one_descriptor("test", &[("user", &who)])).await;
        assert_eq!(response.overall_code, OK, "an established connection kept");
    }
    assert_eq!(gauge().await, (3.0, 50.0));

    drop(clients.pop());
    eventually(
        Duration::from_secs(30),
        "the dropped client's place is free",
        async || gauge().await.0 == 2.0,
    )
    .await;
    let mut newcomer = connect(addr).await;
    let response = call(&mut newcomer, one_descriptor("test", &[("user", "new")])).await;
    assert_eq!(response.overall_code, OK);
    drop(server);
}
