//! Redis Sentinel for real: a master, a replica and three sentinels (tests/common/sentinel.rs),
//! sluice on `redis+sentinel://` with the nodes' and the sentinels' passwords, and a failover
//! under load, by killing the master and by `SENTINEL FAILOVER` of a master the sentinels
//! cannot demote (as when they are cut off from it while clients are not). Judged by counts
//! and order, never by a clock: every call returns, answered by Redis or by its rule's
//! `failure_mode`; once sluice counts on the new master, a worker's first call answered by Redis
//! is followed only by calls answered by Redis; and counting goes on where the replica left it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

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
/// Load workers.
const WORKERS: usize = 4;
/// Calls each worker must have answered once sluice counts on the new master, before the
/// load stops: enough to show the order of what follows the switch.
const CALLS_AFTER_SWITCH: usize = 20;
/// How long a worker may take to answer its last call once told to stop: a bound on a hang
/// (a call that never returns), not on speed.
const HANG: Duration = Duration::from_secs(30);

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

/// What a load worker saw: for each call in order, whether its rule's failure_mode decided
/// it (true) or Redis (false).
#[derive(Debug, Default)]
struct Seen {
    degraded: Vec<bool>,
}

impl Seen {
    /// Calls answered by failure_mode.
    fn degraded(&self) -> usize {
        self.degraded.iter().filter(|d| **d).count()
    }

    /// Runs of consecutive calls answered by failure_mode.
    fn degraded_runs(&self) -> usize {
        self.degraded.windows(2).filter(|w| w[1] && !w[0]).count()
            + usize::from(self.degraded.first() == Some(&true))
    }
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
        let n = seen.degraded.len();
        let key = ["open", "closed"][n % 2];
        let value = format!("w{id}-{n}");
        let r = call(&mut client, one_descriptor("sentinel", &[(key, &value)])).await;
        match header(&r, "x-ratelimit-mode") {
            None => assert_eq!(r.overall_code, OK, "{key} from redis"),
            Some("degraded") if key == "open" => assert_eq!(r.overall_code, OK),
            Some("degraded") => {
                assert_eq!(r.overall_code, OVER);
                assert_eq!(header(&r, "retry-after"), Some("1"));
            }
            Some(other) => panic!("mode {other}"),
        }
        seen.degraded.push(header(&r, "x-ratelimit-mode").is_some());
        answered[id].fetch_add(1, Ordering::Relaxed);
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
    let before_switch = load.counts();
    let new = switch_master(&mut set, switch, old).await;
    wait_counting_on(&set, &mut client, new).await;
    if let Switch::FailoverCommand = switch {
        let role = set.node(old).cli(&["ROLE"]);
        assert!(
            role.starts_with("master"),
            "the old master is still one: {role}"
        );
    }
    let mut probes = 0;
    eventually(Duration::from_secs(20), "Redis decides again", async || {
        probes += 1;
        let r = call(
            &mut client,
            one_descriptor("sentinel", &[("open", &format!("probe-{probes}"))]),
        )
        .await;
        header(&r, "x-ratelimit-mode").is_none()
    })
    .await;
    let counting_on_new = load.counts();
    println!(
        "{switch:?}: calls answered per worker from the switch until Redis decided again: {:?}",
        since(&counting_on_new, &before_switch)
    );
    load.wait_answered_since(&counting_on_new, CALLS_AFTER_SWITCH)
        .await;
    let seen = load.stop(switch).await;
    for (id, seen) in seen.iter().enumerate() {
        let after = &seen.degraded[counting_on_new[id]..];
        let first_by_redis = after.iter().position(|d| !d).unwrap_or_else(|| {
            panic!("worker {id}: no call answered by Redis after the switch: {after:?}")
        });
        assert!(
            after[first_by_redis..].iter().all(|d| !d),
            "worker {id}: a call answered by failure_mode after one decided by the new master \
             (call {}): {after:?}",
            counting_on_new[id] + first_by_redis
        );
        if let Switch::KillMaster = switch {
            assert!(
                seen.degraded[before_switch[id]..].iter().any(|d| *d),
                "worker {id}: no call answered by failure_mode while no master was reachable: \
                 its calls waited the switch out"
            );
        }
    }
    counting_goes_on(&set, &mut client, new).await;
    server.stop().await;
}

/// Per worker, `now` minus `before`.
fn since(now: &[usize], before: &[usize]) -> Vec<usize> {
    now.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// The descriptor counted before, during and after the switch.
fn kept() -> sluice::proto::RateLimitRequest {
    one_descriptor("sentinel", &[("kept", "k")])
}

/// Load workers and what each had answered.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<Vec<AtomicUsize>>,
    workers: Vec<tokio::task::JoinHandle<Seen>>,
}

impl Load {
    /// Starts the workers against `addr` and waits until each is running.
    async fn start(addr: std::net::SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered: Arc<Vec<AtomicUsize>> =
            Arc::new((0..WORKERS).map(|_| AtomicUsize::new(0)).collect());
        let workers = (0..WORKERS)
            .map(|id| tokio::spawn(load(addr, id, stop.clone(), answered.clone())))
            .collect();
        let started = Load {
            stop,
            answered,
            workers,
        };
        started.wait_answered_since(&[0; WORKERS], 10).await;
        started
    }

    /// Calls answered so far, per worker.
    fn counts(&self) -> Vec<usize> {
        self.answered
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    /// Waits until every worker has answered `n` calls more than `before` (a worker whose
    /// call never returns fails it).
    async fn wait_answered_since(&self, before: &[usize], n: usize) {
        eventually(HANG, "every worker's calls are answered", async || {
            since(&self.counts(), before).iter().all(|d| *d >= n)
        })
        .await;
    }

    /// Stops the workers; what each saw. Every call returned.
    async fn stop(self, switch: Switch) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for worker in self.workers {
            let seen = tokio::time::timeout(HANG, worker)
                .await
                .expect("the worker's last call returned")
                .expect("every call was answered as its rule says");
            all.push(seen);
        }
        let calls: usize = all.iter().map(|s| s.degraded.len()).sum();
        let degraded: Vec<usize> = all.iter().map(Seen::degraded).collect();
        let runs: Vec<usize> = all.iter().map(Seen::degraded_runs).collect();
        println!(
            "{switch:?}: {calls} calls under load; answered by failure_mode per worker {degraded:?}, \
             in runs {runs:?}"
        );
        all
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
async fn wait_counting_on(set: &SentinelSet, client: &mut Client, new: u16) {
    let before = set.node(new).dbsize();
    let mut tries = 0;
    eventually(
        Duration::from_secs(20),
        "calls count on the new master",
        async || {
            tries += 1;
            call(
                &mut *client,
                one_descriptor("sentinel", &[("open", &format!("moved-{tries}"))]),
            )
            .await;
            let now: u64 = set.node(new).cli(&["DBSIZE"]).trim().parse().unwrap_or(0);
            now > before
        },
    )
    .await;
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
