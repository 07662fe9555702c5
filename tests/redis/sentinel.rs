//! Redis Sentinel for real: a master, a replica and three sentinels (tests/common/sentinel.rs),
//! sluice on `redis+sentinel://` with the nodes' and the sentinels' passwords, and a failover
//! under load, by killing the master and by `SENTINEL FAILOVER` of a master the sentinels
//! cannot demote (as when they are cut off from it while clients are not). During the switch
//! every call is answered by its rule's `failure_mode` within the timeout; once sluice counts
//! on the new master no call meets a broken connection, and counting goes on where the replica
//! left it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice::algorithm::Algorithm;
use sluice::clock::SECOND;
use sluice::store::redis::RedisClock;
use sluice::store::{Gate, RedisSettings, RedisStore, Store};

use crate::common::sentinel::{SENTINEL_PASSWORD, SentinelSet};
use crate::common::{
    self, Client, OK, OVER, TestServer, call, connect, eventually, header, limit, one_descriptor,
};

const RULES: &str = "\
domain: sentinel
descriptors:
  - key: open
    failure_mode: allow
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
  - key: closed
    failure_mode: deny
    rate_limit: { unit: hour, requests_per_unit: 1000000000 }
  - key: kept
    failure_mode: deny
    rate_limit: { unit: hour, requests_per_unit: 10, algorithm: sliding_log }
";

/// The call timeout under test.
const TIMEOUT: Duration = Duration::from_millis(100);
/// Calls each load worker must have had answered while the master switched. A worker whose
/// calls waited on the switch itself gets one or two answers in those seconds; one answered
/// within the call timeout gets ten or more a second. A count, not a clock: a loaded machine
/// slows every call alike and cannot fail it.
const ANSWERED_DURING_SWITCH: usize = 3;

/// A store on `set` through its sentinels, with four pooled connections (so a stale one
/// would be met) and the sentinels' password `sentinel_password`.
async fn store(set: &SentinelSet, sentinel_password: &str) -> Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: TIMEOUT,
        connections: 4,
        sentinel_password: Some(sentinel_password.into()),
        // Health is not under test here: a long failover must not turn it.
        unhealthy_after: Duration::from_secs(600),
        ..RedisSettings::new(set.url())
    };
    Arc::new(RedisStore::connect(settings).await.expect("store"))
}

/// What a load worker saw.
#[derive(Debug, Default)]
struct Seen {
    calls: usize,
    degraded: usize,
    slowest: Duration,
}

/// Calls `open` and `closed` (new values each time) until `stop`; checks each answer: from
/// Redis, OK; by failure_mode, OK for `allow` and OVER_LIMIT with Retry-After for `deny`.
async fn load(
    addr: std::net::SocketAddr,
    id: usize,
    stop: Arc<AtomicBool>,
    answered: Arc<Vec<AtomicUsize>>,
) -> Seen {
    let mut client = connect(addr).await;
    let mut seen = Seen::default();
    while !stop.load(Ordering::Relaxed) {
        let key = ["open", "closed"][seen.calls % 2];
        let value = format!("w{id}-{}", seen.calls);
        let started = Instant::now();
        let r = call(&mut client, one_descriptor("sentinel", &[(key, &value)])).await;
        seen.slowest = seen.slowest.max(started.elapsed());
        seen.calls += 1;
        answered[id].fetch_add(1, Ordering::Relaxed);
        match header(&r, "x-ratelimit-mode") {
            None => assert_eq!(r.overall_code, OK, "{key} from redis"),
            Some("degraded") if key == "open" => assert_eq!(r.overall_code, OK),
            Some("degraded") => {
                assert_eq!(r.overall_code, OVER);
                assert_eq!(header(&r, "retry-after"), Some("1"));
            }
            Some(other) => panic!("mode {other}"),
        }
        seen.degraded += usize::from(header(&r, "x-ratelimit-mode").is_some());
    }
    seen
}

/// How the master goes away.
#[derive(Debug, Clone, Copy)]
enum Switch {
    /// SIGKILL: the sentinels notice after a second and promote the replica.
    KillMaster,
    /// `SENTINEL FAILOVER` while the sentinels cannot demote the old master (its `SLAVEOF`
    /// and `REPLICAOF` are renamed away): it stays up, a master, and keeps its clients'
    /// connections, so only the sentinels' announcement can move sluice to the new one.
    FailoverCommand,
}

async fn failover_under_load(switch: Switch) {
    let mut set = match switch {
        Switch::KillMaster => SentinelSet::start(),
        Switch::FailoverCommand => SentinelSet::start_with(&[
            "--rename-command",
            "SLAVEOF",
            "",
            "--rename-command",
            "REPLICAOF",
            "",
        ]),
    };
    let old = set.master_port();
    let server = TestServer::start_on(RULES, store(&set, SENTINEL_PASSWORD).await).await;
    let mut client = server.client().await;
    // Counted on the master before the switch, and replicated.
    for _ in 0..4 {
        let r = call(&mut client, kept()).await;
        assert_eq!((r.overall_code, header(&r, "x-ratelimit-mode")), (OK, None));
    }
    set.wait_replicated();

    let load = Load::start(server.grpc_addr).await;
    let switched_at = Instant::now();
    let before_switch = load.counts();
    let new = switch_master(&mut set, switch, old).await;
    wait_counting_on(&set, &mut client, new, switch).await;
    if let Switch::FailoverCommand = switch {
        let role = set.node(old).cli(&["ROLE"]);
        assert!(
            role.starts_with("master"),
            "the old master is still one: {role}"
        );
    }
    eventually(Duration::from_secs(20), "Redis decides again", async || {
        let r = call(
            &mut client,
            one_descriptor("sentinel", &[("open", "probe")]),
        )
        .await;
        header(&r, "x-ratelimit-mode").is_none()
    })
    .await;
    println!(
        "{switch:?}: decisions from the new master {:?} after the switch began",
        switched_at.elapsed()
    );
    load.check_answered_since(&before_switch, switch);
    let degraded = load.stop(switch).await;
    if let Switch::KillMaster = switch {
        assert!(degraded > 0, "calls went on while no master was reachable");
    }
    counting_goes_on(&set, &mut client, new).await;
    server.stop().await;
}

/// The descriptor counted before, during and after the switch.
fn kept() -> sluice::proto::RateLimitRequest {
    one_descriptor("sentinel", &[("kept", "k")])
}

/// Four load workers and what each had answered.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<Vec<AtomicUsize>>,
    workers: Vec<tokio::task::JoinHandle<Seen>>,
}

impl Load {
    /// Starts the workers against `addr` and waits until they are running.
    async fn start(addr: std::net::SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered: Arc<Vec<AtomicUsize>> =
            Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
        let workers = (0..4)
            .map(|id| tokio::spawn(load(addr, id, stop.clone(), answered.clone())))
            .collect();
        let started = Load {
            stop,
            answered,
            workers,
        };
        eventually(Duration::from_secs(10), "load is running", async || {
            started.counts().iter().sum::<usize>() >= 40
        })
        .await;
        started
    }

    /// Calls answered so far, per worker.
    fn counts(&self) -> Vec<usize> {
        self.answered
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    /// Every worker had calls answered since `before`: none waited on the switch.
    fn check_answered_since(&self, before: &[usize], switch: Switch) {
        let during: Vec<usize> = self
            .counts()
            .iter()
            .zip(before)
            .map(|(a, b)| a - b)
            .collect();
        println!("{switch:?}: calls answered per worker while the master switched: {during:?}");
        for (id, answered) in during.iter().enumerate() {
            assert!(
                *answered >= ANSWERED_DURING_SWITCH,
                "worker {id} had {answered} calls answered while the master switched: calls waited on it"
            );
        }
    }

    /// Stops the workers; the calls decided by failure_mode.
    async fn stop(self, switch: Switch) -> usize {
        let calls_during = self.counts().iter().sum::<usize>();
        self.stop.store(true, Ordering::Relaxed);
        let mut degraded = 0;
        for worker in self.workers {
            let seen = worker.await.expect("every call was answered");
            println!(
                "{switch:?}: the slowest call of a worker took {:?}",
                seen.slowest
            );
            degraded += seen.degraded;
        }
        println!("{switch:?}: {calls_during} calls under load, {degraded} decided by failure_mode");
        degraded
    }
}

/// Takes the master at `old` away as `switch` says; the port of the master the sentinels
/// then name.
async fn switch_master(set: &mut SentinelSet, switch: Switch, old: u16) -> u16 {
    match switch {
        Switch::KillMaster => {
            let master = set
                .nodes
                .iter_mut()
                .find(|n| n.port == old)
                .expect("master");
            master.kill();
        }
        Switch::FailoverCommand => {
            let reply = set.sentinels[0].cli(&["SENTINEL", "FAILOVER", "mymaster"]);
            assert_eq!(reply.trim(), "OK");
        }
    }
    eventually(
        Duration::from_secs(30),
        "the sentinels name a new master",
        async || set.master_port() != old,
    )
    .await;
    set.master_port()
}

/// Waits until calls write to the master at `new`.
async fn wait_counting_on(set: &SentinelSet, client: &mut Client, new: u16, switch: Switch) {
    let named_at = Instant::now();
    let before = set.node(new).dbsize();
    eventually(
        Duration::from_secs(20),
        "calls count on the new master",
        async || {
            let value = format!("moved-{}", named_at.elapsed().as_nanos());
            call(
                &mut *client,
                one_descriptor("sentinel", &[("open", &value)]),
            )
            .await;
            let now: u64 = set.node(new).cli(&["DBSIZE"]).trim().parse().unwrap_or(0);
            now > before
        },
    )
    .await;
    println!(
        "{switch:?}: counting on the new master {:?} after the sentinels named it",
        named_at.elapsed()
    );
}

/// After the switch no call meets a broken connection, and `kept` counts on from the
/// replicated 4 of 10, on the new master.
async fn counting_goes_on(set: &SentinelSet, client: &mut Client, new: u16) {
    for i in 0..100 {
        let r = call(
            client,
            one_descriptor("sentinel", &[("open", &format!("after-{i}"))]),
        )
        .await;
        assert_eq!(
            (r.overall_code, header(&r, "x-ratelimit-mode")),
            (OK, None),
            "call {i} after the new master answered"
        );
    }
    for _ in 0..6 {
        let r = call(client, kept()).await;
        assert_eq!((r.overall_code, header(&r, "x-ratelimit-mode")), (OK, None));
    }
    let r = call(client, kept()).await;
    assert_eq!(
        (r.overall_code, header(&r, "x-ratelimit-mode")),
        (OVER, None)
    );
    let keys = set.node(new).dbsize();
    assert!(
        keys > 100,
        "the counters live on the new master ({keys} keys)"
    );
}

/// The master is killed under load; the sentinels promote the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-sentinel (scripts/test installs them)"]
async fn master_killed_under_load() {
    failover_under_load(Switch::KillMaster).await;
}

/// `SENTINEL FAILOVER` under load, the old master staying up with connections to it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-sentinel (scripts/test installs them)"]
async fn sentinel_failover_under_load() {
    failover_under_load(Switch::FailoverCommand).await;
}

/// The sentinels' password is checked: with a wrong one no master is found, and calls fail
/// (the rules' failure_mode would decide); the nodes' password comes from the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and redis-sentinel (scripts/test installs them)"]
async fn sentinel_password_is_required() {
    let set = SentinelSet::start();
    let charge = common::charge(
        "sentinel",
        ("k", "v"),
        limit(Algorithm::FixedWindow, 5, 60 * SECOND),
        1,
        Gate::Enforced,
    );
    let now = 1_767_225_600 * SECOND;
    let wrong = store(&set, "not-the-password").await;
    assert!(
        wrong
            .apply(std::slice::from_ref(&charge), now)
            .await
            .is_err()
    );
    let right = store(&set, SENTINEL_PASSWORD).await;
    let o = right
        .apply(std::slice::from_ref(&charge), now)
        .await
        .expect("through the sentinels");
    assert!(o[0].verdict.admitted);
    assert_eq!(set.node(set.master_port()).cli(&["DBSIZE"]).trim(), "1");
}
