//! Faults on a real network: Redis in its own network namespace behind a veth pair, sluice
//! (three replicas, in this process) on the host side. Loss and partitions are made by the
//! kernel on the veth (`tc`: an htb class whose queue holds nothing, fed at random by a
//! classic-BPF classifier, or a zero-length queue for everything); latency by a relay on the
//! host side that holds each request's bytes for the given time (this kernel has no
//! `sch_netem`). Also a gRPC client in the namespace that vanishes behind a partition, for the
//! server's dead-peer detection. Needs root and iproute2; every test removes what it created.

use crate::common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::process::poll;
use common::*;
use sluice::store::redis::RedisClock;
use sluice::store::{RedisSettings, RedisStore};

const RULES: &str = "\
domain: net
descriptors:
  - key: open
    failure_mode: allow
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
  - key: closed
    failure_mode: deny
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
  - key: exact
    failure_mode: deny
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: sliding_log }
";

/// The default `--redis-timeout`.
const TIMEOUT: Duration = Duration::from_millis(10);
/// The timeout of the partition test: long enough that a loaded machine never makes a call
/// time out on a healthy link, so any refusal after healing would be the connections' fault.
const PARTITION_TIMEOUT: Duration = Duration::from_millis(50);

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("run {program}: {e} (needs iproute2)"));
    assert!(status.success(), "{program} {}", args.join(" "));
}

/// A network namespace joined to the host by a veth pair: `10.232.<n>.1` here,
/// `10.232.<n>.2` there.
pub struct Network {
    ns: String,
    host_if: String,
    ns_if: String,
    redis_ip: String,
}

impl Network {
    pub fn create() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = (std::process::id() + NEXT.fetch_add(1, Ordering::SeqCst) * 7) % 250;
        let net = Self {
            ns: format!("sluice-t{n}"),
            host_if: format!("slh{n}"),
            ns_if: format!("slr{n}"),
            redis_ip: format!("10.232.{n}.2"),
        };
        let host_ip = format!("10.232.{n}.1/30");
        let redis_ip = format!("{}/30", net.redis_ip);
        run("ip", &["netns", "add", &net.ns]);
        run(
            "ip",
            &[
                "link",
                "add",
                &net.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &net.ns_if,
            ],
        );
        run("ip", &["link", "set", &net.ns_if, "netns", &net.ns]);
        run("ip", &["addr", "add", &host_ip, "dev", &net.host_if]);
        run("ip", &["link", "set", &net.host_if, "up"]);
        net.in_ns(&["ip", "addr", "add", &redis_ip, "dev", &net.ns_if]);
        net.in_ns(&["ip", "link", "set", &net.ns_if, "up"]);
        net.in_ns(&["ip", "link", "set", "lo", "up"]);
        net
    }

    /// The host side's address on the veth: `10.232.<n>.1`.
    fn host_ip(&self) -> String {
        let n = self.redis_ip.trim_end_matches(".2");
        format!("{n}.1")
    }

    fn in_ns(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.ns];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `tc` on both ends of the veth.
    fn tc_both(&self, args: &[&str]) {
        let on = |dev: &str| -> Vec<String> {
            args.iter()
                .map(|a| {
                    if *a == "DEV" {
                        dev.to_owned()
                    } else {
                        (*a).to_owned()
                    }
                })
                .collect()
        };
        let host = on(&self.host_if);
        run("tc", &host.iter().map(String::as_str).collect::<Vec<_>>());
        let ns = on(&self.ns_if);
        let mut inside = vec!["tc"];
        inside.extend(ns.iter().map(String::as_str));
        self.in_ns(&inside);
    }

    /// Drops every packet both ways (a queue of length 0).
    pub fn partition(&self) {
        self.tc_both(&[
            "qdisc", "replace", "dev", "DEV", "root", "pfifo", "limit", "0",
        ]);
    }

    /// Drops `percent` of the packets both ways, at random.
    pub fn lose(&self, percent: u64) {
        let threshold = (u64::from(u32::MAX) * percent / 100).to_string();
        // ld rand; jge threshold -> no match; match -> class 1:20 (a queue of length 0).
        let program = format!("4,32 0 0 4294963256,53 1 0 {threshold},6 0 0 4294967295,6 0 0 0");
        self.tc_both(&[
            "qdisc", "replace", "dev", "DEV", "root", "handle", "1:", "htb", "default", "10",
        ]);
        self.tc_both(&[
            "class", "add", "dev", "DEV", "parent", "1:", "classid", "1:10", "htb", "rate",
            "10gbit",
        ]);
        self.tc_both(&[
            "class", "add", "dev", "DEV", "parent", "1:", "classid", "1:20", "htb", "rate",
            "10gbit",
        ]);
        self.tc_both(&[
            "qdisc", "add", "dev", "DEV", "parent", "1:20", "pfifo", "limit", "0",
        ]);
        self.tc_both(&[
            "filter", "add", "dev", "DEV", "parent", "1:", "protocol", "all", "prio", "1", "bpf",
            "bytecode", &program, "classid", "1:20",
        ]);
    }

    /// Back to a plain link.
    pub fn heal(&self) {
        self.tc_both(&["qdisc", "del", "dev", "DEV", "root"]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// `redis-server` inside the namespace, on `<redis_ip>:6379`.
pub struct NsRedis {
    child: Child,
    /// Where it listens, across the veth.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl NsRedis {
    pub fn start(net: &Network) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.ns,
                "redis-server",
                "--bind",
                &net.redis_ip,
            ])
            .args(["--port", "6379", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server in the namespace (scripts/test installs it)");
        let addr: SocketAddr = format!("{}:6379", net.redis_ip).parse().unwrap();
        poll(
            Duration::from_secs(10),
            "redis answers across the veth",
            || {
                let out = Command::new("redis-cli")
                    .args(["-h", &net.redis_ip, "-p", "6379", "PING"])
                    .output()
                    .ok()?;
                (String::from_utf8_lossy(&out.stdout).trim() == "PONG").then_some(())
            },
        );
        Self {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for NsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A relay on the host side that holds the bytes going to Redis for `delay` (answers come
/// back at once): `delay` more per round trip, as `tc netem delay` on the host side would add.
pub async fn delay_relay(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    common::relay::Relay::start(upstream, delay, Duration::ZERO)
        .await
        .addr
}

/// A Redis store on `addr` with the call timeout `timeout`.
async fn store(addr: SocketAddr, timeout: Duration) -> Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout,
        ..RedisSettings::new(format!("redis://{addr}"))
    };
    Arc::new(RedisStore::connect(settings).await.expect("redis store"))
}

/// Three replicas on Redis at `addr`.
async fn replicas(addr: SocketAddr, timeout: Duration) -> Vec<(TestServer, Arc<RedisStore>)> {
    let mut all = Vec::new();
    for _ in 0..3 {
        let store = store(addr, timeout).await;
        all.push((TestServer::start_on(RULES, store.clone()).await, store));
    }
    all
}

/// How calls went: by Redis, or by each rule's failure mode, and how long each took (as the
/// client saw it: gRPC on loopback included).
struct Tally {
    timeout: Duration,
    by_redis: u32,
    degraded: u32,
    slowest: Duration,
    took: Vec<Duration>,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut took = self.took.clone();
        took.sort();
        let at = |q: f64| took.get(((took.len() as f64 - 1.0) * q) as usize).copied();
        write!(
            f,
            "timeout {:?}: {} by Redis, {} by failure_mode; median {:?}, p99 {:?}, slowest {:?}",
            self.timeout,
            self.by_redis,
            self.degraded,
            at(0.5).unwrap_or_default(),
            at(0.99).unwrap_or_default(),
            self.slowest
        )
    }
}

/// One call on `key` (`open` or `closed`): answered, as the rule's failure mode says when
/// Redis did not decide. How long it took is recorded for the report, not judged (a loaded
/// machine slows every call); the tests judge counts.
async fn checked_call(client: &mut Client, key: &str, value: &str, tally: &mut Tally) {
    let started = Instant::now();
    let response = call(client, one_descriptor("net", &[(key, value)])).await;
    let took = started.elapsed();
    tally.slowest = tally.slowest.max(took);
    tally.took.push(took);
    let degraded = header(&response, "x-ratelimit-mode") == Some("degraded");
    match (key, degraded) {
        (_, false) => assert_eq!(response.overall_code, OK, "{key} by Redis"),
        ("open", true) => assert_eq!(response.overall_code, OK, "allow fails open"),
        (_, true) => assert_eq!(response.overall_code, OVER, "deny fails closed"),
    }
    if degraded {
        tally.degraded += 1;
    } else {
        tally.by_redis += 1;
    }
}

/// `n` calls alternating an `allow` and a `deny` rule on one replica whose store times out
/// after `timeout`.
async fn calls(server: &TestServer, n: usize, tag: &str, timeout: Duration) -> Tally {
    let mut client = server.client().await;
    let mut tally = Tally {
        timeout,
        by_redis: 0,
        degraded: 0,
        slowest: Duration::ZERO,
        took: Vec::with_capacity(n),
    };
    for i in 0..n {
        let key = ["open", "closed"][i % 2];
        checked_call(&mut client, key, &format!("{tag}-{i}"), &mut tally).await;
    }
    tally
}

/// With 5 ms added to every round trip (half the 10 ms timeout), every call is answered, by
/// Redis or by its rule's failure mode, and Redis decides some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and ip netns"]
async fn five_ms_latency_every_call_answered() {
    let net = Network::create();
    let redis = NsRedis::start(&net);
    let relay = delay_relay(redis.addr, Duration::from_millis(5)).await;
    let server = TestServer::start_on(RULES, store(relay, TIMEOUT).await).await;
    let tally = calls(&server, 300, "latency", TIMEOUT).await;
    eprintln!("5 ms latency: {tally:?}");
    assert!(tally.by_redis > 0, "{tally:?}");
    server.stop().await;
}

/// With 10 % of packets lost both ways every call is answered, by Redis or by its rule's
/// failure mode: a lost packet costs a TCP retransmission (200 ms or more), which the 10 ms
/// timeout cuts short, so some calls are answered by failure_mode (a call that waited the
/// retransmission out would be answered by Redis), and Redis decides others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and ip netns"]
async fn ten_percent_loss_waits_cut_short_by_the_timeout() {
    let net = Network::create();
    let redis = NsRedis::start(&net);
    let server = TestServer::start_on(RULES, store(redis.addr, TIMEOUT).await).await;
    net.lose(10);
    // Rounds of calls until Redis decides some: a lost packet while connecting can keep the
    // breaker open through a whole round (each round still checks every call's time).
    let mut tally = calls(&server, 300, "loss", TIMEOUT).await;
    let mut degraded = tally.degraded;
    for _ in 0..10 {
        if tally.by_redis > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        tally = calls(&server, 300, "loss", TIMEOUT).await;
        degraded += tally.degraded;
    }
    eprintln!("10 % loss: {tally:?}; {degraded} by failure_mode in all");
    assert!(tally.by_redis > 0, "{tally:?}");
    assert!(
        degraded > 0,
        "lost packets' waits were cut short: {tally:?}"
    );
    net.heal();
    server.stop().await;
}

/// A partition: every call on every replica is answered by its rule's failure mode, and the
/// breaker opens. After it heals, every replica decides by Redis again, and from then on no
/// call is refused (how long resuming took is reported, not judged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and ip netns"]
async fn a_partition_then_healing_on_three_replicas() {
    let net = Network::create();
    let redis = NsRedis::start(&net);
    let replicas = replicas(redis.addr, PARTITION_TIMEOUT).await;
    for (server, _) in &replicas {
        let before = calls(server, 10, "before", PARTITION_TIMEOUT).await;
        assert_eq!(before.degraded, 0, "{before:?}");
    }
    net.partition();
    for (server, store) in &replicas {
        let during = calls(server, 40, "partition", PARTITION_TIMEOUT).await;
        eprintln!("partition: {during:?}");
        assert_eq!(during.by_redis, 0, "Redis is out of reach: {during:?}");
        assert!(store.circuit_open(), "the breaker opened");
    }
    // Let TCP back its retransmissions off, as a real outage would.
    tokio::time::sleep(Duration::from_secs(3)).await;
    net.heal();
    let healed = Instant::now();
    let mut resumed = Vec::new();
    for (server, _) in &replicas {
        let mut client = server.client().await;
        eventually(
            Duration::from_secs(30),
            "decisions by Redis again after healing",
            async || {
                let r = call(&mut client, one_descriptor("net", &[("closed", "resume")])).await;
                header(&r, "x-ratelimit-mode").is_none()
            },
        )
        .await;
        resumed.push(healed.elapsed());
    }
    eprintln!("resumed by Redis after healing: {resumed:?}");
    for (server, _) in &replicas {
        let after = calls(server, 30, "after", PARTITION_TIMEOUT).await;
        assert_eq!(
            after.degraded, 0,
            "no call refused after healing: {after:?}"
        );
    }
}

/// With 2 ms added to every round trip, three replicas calling concurrently admit exactly
/// the limit (the timeout is long here: exactness, not speed, is under test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and ip netns"]
async fn three_replicas_count_exactly_with_2ms_latency() {
    let net = Network::create();
    let redis = NsRedis::start(&net);
    let relay = delay_relay(redis.addr, Duration::from_millis(2)).await;
    let replicas = replicas(relay, Duration::from_secs(2)).await;
    let mut workers = Vec::new();
    for (server, _) in &replicas {
        for _ in 0..4 {
            let mut client = server.client().await;
            workers.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..60 {
                    let r = call(&mut client, one_descriptor("net", &[("exact", "k")])).await;
                    assert_eq!(header(&r, "x-ratelimit-mode"), None, "answered by Redis");
                    admitted += u32::from(r.overall_code == OK);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for worker in workers {
        admitted += worker.await.expect("worker");
    }
    assert_eq!(admitted, 100, "720 calls on three replicas, limit 100");
}

/// A gRPC peer that vanishes (every packet dropped, no FIN, no RST) loses its connection, and
/// the server its file descriptor: kernel keepalive probes go unanswered and the server side is
/// closed about a minute after the last packet. Without keepalive it would stay for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and ip netns; about a minute"]
async fn a_vanished_grpc_peer_is_closed_by_keepalive() {
    let net = Network::create();
    let host_ip = net.host_ip();
    let store: Arc<dyn sluice::store::Store> = Arc::new(sluice::store::MemoryStore::new());
    let server = TestServer::start_adjusted(RULES, store, |settings| {
        settings.grpc_addr = SocketAddr::new(host_ip.parse().unwrap(), 0);
    })
    .await;
    let port = server.grpc_addr.port();
    // An HTTP/2 client in the namespace: the preface and an empty SETTINGS frame, then silence.
    let client = format!(
        "import socket, time\n\
         s = socket.create_connection(('{host_ip}', {port}))\n\
         s.sendall(b'PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n' + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))\n\
         time.sleep(600)\n"
    );
    let mut peer = Command::new("ip")
        .args(["netns", "exec", &net.ns, "python3", "-c", &client])
        .spawn()
        .expect("python3 in the namespace");
    let server_side = || {
        let out = Command::new("ss")
            .args([
                "-tnH",
                "state",
                "established",
                "(",
                "sport",
                "=",
                &format!(":{port}"),
                ")",
            ])
            .output()
            .expect("ss (iproute2)");
        // The namespace's side of the veth (named for the Redis tests) is the peer's address.
        String::from_utf8_lossy(&out.stdout).contains(&net.redis_ip)
    };
    poll(Duration::from_secs(10), "the peer's connection", || {
        server_side().then_some(())
    });
    net.partition();
    let vanished = Instant::now();
    poll(
        Duration::from_secs(150),
        "the server closing the dead connection",
        || (!server_side()).then_some(()),
    );
    let _ = peer.kill();
    let _ = peer.wait();
    eprintln!("closed {:?} after the peer vanished", vanished.elapsed());
}
