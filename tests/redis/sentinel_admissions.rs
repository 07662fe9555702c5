//! Admissions across a Sentinel failover: three sluice replicas on `redis+sentinel://` spend one
//! budget (a fixed window of [`LIMIT`], `failure_mode: deny`) under steady load; the master is
//! SIGKILLed halfway and the sentinels promote the replica. Admissions may pass the limit only
//! by what asynchronous replication loses: hits the old master counted (and answered) that had
//! not reached the replica when it died. Counts only, no clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sluice::store::redis::RedisClock;
use sluice::store::{RedisSettings, RedisStore};

use crate::common::redis::RedisServer;
use crate::common::sentinel::{SENTINEL_PASSWORD, SentinelSet};
use crate::common::{OK, OVER, TestServer, call, connect, eventually, header, one_descriptor};

/// The budget: a day, so no window ends during the test (unless it runs across midnight UTC).
const RULES: &str = "\
domain: budget
descriptors:
  - key: spend
    failure_mode: deny
    rate_limit: { unit: day, requests_per_unit: 400, algorithm: fixed_window }
";
const LIMIT: usize = 400;
const REPLICAS: usize = 3;
const WORKERS_PER_REPLICA: usize = 2;
const WORKERS: usize = REPLICAS * WORKERS_PER_REPLICA;
/// Calls every worker makes once the new master holds the whole budget: none may be admitted.
const CALLS_AFTER_SPENT: usize = 20;

/// A replica's store, through the sentinels.
async fn store(set: &SentinelSet) -> Arc<RedisStore> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: Duration::from_millis(100),
        connections: 4,
        sentinel_password: Some(SENTINEL_PASSWORD.into()),
        unhealthy_after: Duration::from_secs(600),
        ..RedisSettings::new(set.url())
    };
    Arc::new(RedisStore::connect(settings).await.expect("store"))
}

/// The budget's count on `node` (its only key: the fixed window's `n`), 0 before any hit.
fn counted(node: &RedisServer) -> usize {
    let script = "local k = redis.call('KEYS', '*')[1] \
                  if not k then return 0 end \
                  return tonumber(redis.call('HGET', k, 'n') or 0)";
    let reply = node.cli(&["EVAL_RO", script, "0"]);
    reply
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the count on port {}: {reply}", node.port))
}

/// What every worker saw, added up.
#[derive(Default)]
struct Totals {
    /// Calls answered, per worker.
    answered: Vec<AtomicUsize>,
    /// Calls admitted by Redis (OK, not by failure_mode).
    admitted: AtomicUsize,
    /// Calls refused by failure_mode while no master was reachable.
    degraded: AtomicUsize,
}

/// Calls `spend` until `stop`; every answer is OK from Redis, OVER from Redis, or OVER by
/// `failure_mode: deny`.
async fn worker(addr: std::net::SocketAddr, id: usize, totals: Arc<Totals>, stop: Arc<AtomicBool>) {
    let mut client = connect(addr).await;
    while !stop.load(Ordering::Relaxed) {
        let r = call(
            &mut client,
            one_descriptor("budget", &[("spend", "shared")]),
        )
        .await;
        match (r.overall_code, header(&r, "x-ratelimit-mode")) {
            (OK, None) => {
                totals.admitted.fetch_add(1, Ordering::SeqCst);
            }
            (OVER, None) => {}
            (OVER, Some("degraded")) => {
                totals.degraded.fetch_add(1, Ordering::Relaxed);
            }
            other => panic!("worker {id}: {other:?}"),
        }
        totals.answered[id].fetch_add(1, Ordering::SeqCst);
    }
}

/// Per-worker answers so far.
fn answered(totals: &Totals) -> Vec<usize> {
    totals
        .answered
        .iter()
        .map(|n| n.load(Ordering::SeqCst))
        .collect()
}

/// The master is SIGKILLed while three replicas spend one budget: admissions stay within the
/// limit plus the hits the replica had not received, and the new master never admits past
/// the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server and redis-sentinel (scripts/test installs them)"]
async fn admissions_across_a_master_kill_on_three_replicas() {
    let mut set = SentinelSet::start();
    let old = set.master_port();
    let mut servers = Vec::new();
    for _ in 0..REPLICAS {
        servers.push(TestServer::start_on(RULES, store(&set).await).await);
    }
    let totals = Arc::new(Totals {
        answered: (0..WORKERS).map(|_| AtomicUsize::new(0)).collect(),
        ..Totals::default()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| {
            let addr = servers[id % REPLICAS].grpc_addr;
            tokio::spawn(worker(addr, id, totals.clone(), stop.clone()))
        })
        .collect();
    eventually(
        Duration::from_secs(60),
        "half the budget spent",
        async || totals.admitted.load(Ordering::SeqCst) >= LIMIT / 2,
    )
    .await;

    set.nodes
        .iter_mut()
        .find(|n| n.port == old)
        .expect("master")
        .kill();
    // Every admission the old master decided was answered by now, but for the one call each
    // worker may have had in flight.
    let admitted_at_kill = totals.admitted.load(Ordering::SeqCst);
    let replica = set.nodes.iter().find(|n| n.port != old).expect("replica");
    let replicated = counted(replica);
    let role = replica.cli(&["ROLE"]);
    assert!(
        role.starts_with("slave"),
        "read before the promotion: {role}"
    );

    eventually(
        Duration::from_secs(30),
        "the sentinels name a new master",
        async || set.master_port() != old,
    )
    .await;
    let new = set.master_port();
    eventually(
        Duration::from_secs(60),
        "the new master holds the whole budget",
        async || counted(set.node(new)) >= LIMIT,
    )
    .await;
    let spent = answered(&totals);
    let admitted_when_spent = totals.admitted.load(Ordering::SeqCst);
    eventually(
        Duration::from_secs(60),
        "every worker calls on a spent budget",
        async || {
            answered(&totals)
                .iter()
                .zip(&spent)
                .all(|(now, then)| now - then >= CALLS_AFTER_SPENT)
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("every call returns")
            .expect("every call answered as its rule says");
    }

    let admitted = totals.admitted.load(Ordering::SeqCst);
    let on_new_master = counted(set.node(new));
    let degraded = totals.degraded.load(Ordering::SeqCst);
    // Hits the old master counted that the replica never had: at most those answered by the
    // kill, plus one call in flight per worker, less what the replica held.
    let unreplicated_bound = (admitted_at_kill + WORKERS).saturating_sub(replicated);
    println!(
        "sentinel failover, {REPLICAS} replicas, limit {LIMIT}: {admitted} admitted \
         ({} over the limit); {admitted_at_kill} admitted by the kill, the replica held \
         {replicated}; the new master counted {on_new_master}; {degraded} calls refused by \
         failure_mode during the switch; lost by replication (admitted less counted on the new \
         master): {}",
        admitted.saturating_sub(LIMIT),
        admitted.saturating_sub(on_new_master)
    );
    assert_eq!(
        on_new_master, LIMIT,
        "the new master never admits past the limit"
    );
    assert!(
        admitted <= LIMIT + unreplicated_bound,
        "{admitted} admitted: more than the limit {LIMIT} plus {unreplicated_bound} hits that \
         replication could have lost"
    );
    assert!(
        admitted <= admitted_when_spent + WORKERS,
        "calls admitted after the new master held the whole budget"
    );
    for server in servers {
        server.stop().await;
    }
}
