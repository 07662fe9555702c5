//! Redis dies under load and comes back: every rule's failure_mode answers meanwhile, the open
//! breaker keeps calls from a hung Redis, and decisions return to Redis without a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice::store::{RedisStore, Store, StoreError};

use crate::common::redis::RedisServer;
use crate::common::{
    OK, OVER, ServingStatus, TestServer, call, descriptor, eventually, header, health_client,
    health_status, http, one_descriptor, request, with_override,
};

const RULES: &str = "\
domain: faults
descriptors:
  - key: open
    failure_mode: allow
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: sliding_log }
  - key: closed
    failure_mode: deny
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: sliding_log }
  - key: local
    failure_mode: local
    rate_limit: { unit: minute, requests_per_unit: 8, algorithm: token_bucket }
";

/// Consecutive failed calls that open the breaker (src/store/redis/conn/breaker.rs).
const FAILURES_TO_OPEN: u64 = 3;
/// How long Redis may take to decide again once it is back: a bound on a hang, not on speed
/// (decisions resume within a probe interval, 200 ms, and a reconnect; the time is printed).
const RESUMED: Duration = Duration::from_secs(20);

/// A fresh redis-server, and a server with [`RULES`] on a store on it.
async fn start() -> (RedisServer, TestServer) {
    let redis = RedisServer::start();
    let server = TestServer::start_on(RULES, crate::store(&redis.url()).await).await;
    (redis, server)
}

/// Kill Redis under load: allow passes (degraded), deny denies with Retry-After, local limits
/// locally, every call is answered, health stays up through a short outage; restart Redis and
/// decisions come from Redis again (how soon is printed, not judged).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn kill_and_restart_redis_under_load() {
    let mut redis = RedisServer::start();
    let store = crate::store(&redis.url()).await;
    let server = TestServer::start_adjusted(RULES, store.clone(), |s| {
        s.limiter.expected_replicas = 2;
    })
    .await;
    let mut client = server.client().await;

    // Healthy: Redis counts, nothing is marked degraded.
    for _ in 0..5 {
        let r = call(&mut client, one("closed", "a")).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(header(&r, "x-ratelimit-mode"), None);
    }
    assert_eq!(
        call(&mut client, one("closed", "a")).await.overall_code,
        OVER
    );

    redis.kill();
    degraded_load(&server).await;
    assert!(
        store.circuit_open(),
        "consecutive failures opened the breaker"
    );
    // local: limit 8 shared by 2 expected replicas = 4 here.
    let codes: Vec<i32> = {
        let mut codes = Vec::new();
        for _ in 0..6 {
            codes.push(call(&mut client, one("local", "x")).await.overall_code);
        }
        codes
    };
    assert_eq!(codes, [OK, OK, OK, OK, OVER, OVER]);
    let (status, _) = http(server.http_addr, "GET", "/healthcheck", "").await;
    assert_eq!(status, 200, "a short outage does not flap health");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(
            "sluice_degraded_decisions_total{domain=\"faults\",key1=\"closed\",mode=\"deny\"}"
        ),
        "{metrics}"
    );

    redis.restart();
    let restarted = Instant::now();
    let what = "decisions from Redis after it came back";
    eventually(RESUMED, what, async || {
        let r = call(&mut client, one("open", "after")).await;
        header(&r, "x-ratelimit-mode").is_none()
    })
    .await;
    println!(
        "decisions came back from Redis {:?} after it answered",
        restarted.elapsed()
    );
    // Counting resumed in Redis (the restarted Redis is empty).
    for _ in 0..5 {
        assert_eq!(call(&mut client, one("closed", "b")).await.overall_code, OK);
    }
    assert_eq!(
        call(&mut client, one("closed", "b")).await.overall_code,
        OVER
    );
    server.stop().await;
}

/// A call of one descriptor `key=value` in the test's domain.
fn one(key: &str, value: &str) -> sluice::proto::RateLimitRequest {
    one_descriptor("faults", &[(key, value)])
}

/// Load from several clients while Redis is dead: every call is answered by its rule's
/// failure_mode (the slowest call is printed, not judged).
async fn degraded_load(server: &TestServer) {
    let mut load = Vec::new();
    for worker in 0..4 {
        let mut client = server.client().await;
        load.push(tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            for i in 0..50 {
                let key = ["open", "closed"][(worker + i) % 2];
                let started = Instant::now();
                let r = call(&mut client, one(key, &format!("w{worker}-{i}"))).await;
                slowest = slowest.max(started.elapsed());
                assert_eq!(header(&r, "x-ratelimit-mode"), Some("degraded"), "{key}");
                if key == "open" {
                    assert_eq!(r.overall_code, OK);
                } else {
                    assert_eq!(r.overall_code, OVER);
                    assert_eq!(header(&r, "retry-after"), Some("1"));
                }
            }
            slowest
        }));
    }
    for worker in load {
        let slowest = worker.await.expect("load worker");
        println!("a dead Redis: the slowest call of a worker took {slowest:?}");
    }
}

/// A hung Redis (SIGSTOP: connections stay open, nothing answers): the first calls time out
/// and open the breaker, which then stops calls from going to Redis at all, counted by the
/// script runs Redis finds waiting when it is continued (at most the failures that opened
/// the breaker, of 20 calls); SIGCONT and Redis decides again.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_hung_redis_gets_no_calls_once_the_breaker_opens() {
    let redis = RedisServer::start();
    let store = crate::store_with_timeout(&redis.url(), Duration::from_millis(50)).await;
    let server = TestServer::start_on(RULES, store.clone()).await;
    let mut client = server.client().await;
    let one = |value: &str| one_descriptor("faults", &[("closed", value)]);
    assert_eq!(
        header(&call(&mut client, one("warm")).await, "x-ratelimit-mode"),
        None
    );
    let runs_before = redis.script_runs();
    redis.signal("STOP");
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let r = call(&mut client, one(&i.to_string())).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(
            (r.overall_code, header(&r, "x-ratelimit-mode")),
            (OVER, Some("degraded"))
        );
    }
    println!("a hung Redis: the slowest call took {slowest:?} (timeout 50 ms)");
    assert!(store.circuit_open());
    redis.signal("CONT");
    let sent = redis.script_runs() - runs_before;
    println!("a hung Redis: {sent} of 20 calls were sent to it");
    assert!(
        sent <= FAILURES_TO_OPEN,
        "{sent} of 20 calls went to a hung Redis: the open breaker did not keep them away"
    );
    eventually(RESUMED, "decisions from Redis after SIGCONT", async || {
        header(&call(&mut client, one("again")).await, "x-ratelimit-mode").is_none()
    })
    .await;
    server.stop().await;
}

/// Calls queued behind a run on a hung Redis wait at most their own timeout, not the runs
/// ahead of them as well: no call has a timer of its own; each script run is given up at the
/// earliest deadline among its calls, and a queue's runs go in the order its calls joined.
/// With one run slot, the first call's run hangs until its deadline; the calls that queued
/// 50 ms later then go out together and are answered by the first of their deadlines. A run
/// bounded from when it starts would hold them ~1.95 timeouts. Judged by order, not by a
/// clock: a witness call on a second store, sent half a timeout after the first, is answered
/// (at its own deadline, 1.5 timeouts in) after every queued call (1.05 in; a run bounded
/// from its start would end at 1.95).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn queued_calls_on_a_hung_redis_wait_at_most_the_timeout() {
    let redis = RedisServer::start();
    let timeout = Duration::from_secs(1);
    let store = crate::one_run_slot_store(&redis.url(), timeout).await;
    let witness = crate::one_run_slot_store(&redis.url(), timeout).await;
    let charge = crate::hourly_charge("queued", "t", 1_000);
    for store in [&store, &witness] {
        let answered = store.apply(std::slice::from_ref(&charge), 0).await;
        assert!(answered.expect("redis answers")[0].verdict.admitted);
    }
    redis.signal("STOP");
    let answered = Arc::new(AtomicUsize::new(0));
    let spawn_call = |store: &Arc<RedisStore>| {
        let (store, charge, answered) = (store.clone(), charge.clone(), answered.clone());
        tokio::spawn(async move {
            let outcome = store.apply(std::slice::from_ref(&charge), 0).await;
            (outcome, answered.fetch_add(1, Ordering::SeqCst))
        })
    };
    let first = spawn_call(&store);
    // Lets the first call's run go out (and hang) before the others queue behind it.
    tokio::time::sleep(timeout / 20).await;
    let queued: Vec<_> = (0..20).map(|_| spawn_call(&store)).collect();
    tokio::time::sleep(timeout / 2 - timeout / 20).await;
    let witness = spawn_call(&witness);
    let mut last_queued = 0;
    for call in std::iter::once(first).chain(queued) {
        let (outcome, order) = call.await.expect("call task");
        assert!(
            matches!(outcome, Err(StoreError::Timeout(_))),
            "a call on a hung Redis: {outcome:?}"
        );
        last_queued = last_queued.max(order);
    }
    let (outcome, witnessed) = witness.await.expect("witness task");
    assert!(
        matches!(outcome, Err(StoreError::Timeout(_))),
        "{outcome:?}"
    );
    assert!(
        last_queued < witnessed,
        "a queued call was answered after the witness: it waited the run ahead of it as well"
    );
    redis.signal("CONT");
}

/// A call whose only limit is a request-side override has no rule to say how to fail: it
/// fails with UNAVAILABLE (never UNKNOWN) so Envoy's failure_mode_deny decides.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn override_only_call_fails_unavailable() {
    let (mut redis, server) = start().await;
    let mut client = server.client().await;
    redis.kill();
    let d = with_override(descriptor(&[("free", "x")]), 3, 2);
    let status = client
        .should_rate_limit(request("faults", vec![d]))
        .await
        .expect_err("no rule had a say");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    server.stop().await;
}

/// Two servers on one Redis: one with the defaults, one that asks health to include the store
/// (`--health-checks-store`).
async fn two_servers() -> (RedisServer, TestServer, TestServer) {
    let redis = RedisServer::start();
    let default = TestServer::start_on(RULES, crate::store(&redis.url()).await).await;
    let checking = TestServer::start_adjusted(RULES, crate::store(&redis.url()).await, |s| {
        s.health.store = true;
    })
    .await;
    (redis, default, checking)
}

/// Opens both servers' breakers: calls while Redis is dead.
async fn fail_calls(servers: [&TestServer; 2]) {
    for server in servers {
        let mut client = server.client().await;
        for i in 0..5 {
            call(
                &mut client,
                one_descriptor("faults", &[("open", &i.to_string())]),
            )
            .await;
        }
    }
}

/// Regression (probes defeated the rules' failure modes): through a sustained Redis outage —
/// long enough for a server that checks the store to report it — `/healthcheck` stays 200 and
/// gRPC health SERVING by default, because each rule's failure_mode still answers every call.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn health_stays_up_through_a_store_outage() {
    let (mut redis, default, checking) = two_servers().await;
    redis.kill();
    fail_calls([&default, &checking]).await;
    let within = Duration::from_secs(10);
    eventually(
        within,
        "the checking server reports the outage",
        async || http(checking.http_addr, "GET", "/healthcheck", "").await.0 == 503,
    )
    .await;
    // The default server's store has failed as long: its health must not have moved.
    let (status, body) = http(default.http_addr, "GET", "/healthcheck", "").await;
    assert_eq!((status, body.as_str()), (200, "OK"));
    let mut health = health_client(default.grpc_addr).await;
    assert_eq!(health_status(&mut health, "").await, ServingStatus::Serving);
    assert_eq!(
        health_status(&mut health, "ratelimit").await,
        ServingStatus::Serving
    );
    let mut client = default.client().await;
    let degraded = call(&mut client, one_descriptor("faults", &[("open", "x")])).await;
    assert_eq!(degraded.overall_code, OK, "failure_mode: allow answers");
    default.stop().await;
    checking.stop().await;
}

/// With `--health-checks-store`, health turns 503 (HTTP) and NOT_SERVING (gRPC) once the
/// breaker has stayed open for a while, and recovers when Redis answers again.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn health_can_report_a_sustained_outage() {
    let (mut redis, default, server) = two_servers().await;
    redis.kill();
    fail_calls([&default, &server]).await;
    let health_is = async |code| http(server.http_addr, "GET", "/healthcheck", "").await.0 == code;
    let within = Duration::from_secs(15);
    eventually(within, "health reports the outage", async || {
        health_is(503).await
    })
    .await;
    let mut health = health_client(server.grpc_addr).await;
    eventually(within, "gRPC health reports the outage", async || {
        health_status(&mut health, "").await == ServingStatus::NotServing
    })
    .await;
    redis.restart();
    eventually(within, "health recovers", async || health_is(200).await).await;
    default.stop().await;
    server.stop().await;
}

/// Once a counter is full, further calls are answered locally until its retry time: Redis
/// sees no more script calls for it.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn full_counters_are_answered_locally() {
    let (redis, server) = start().await;
    let mut client = server.client().await;
    let one = one_descriptor("faults", &[("closed", "cached")]);
    for _ in 0..5 {
        assert_eq!(call(&mut client, one.clone()).await.overall_code, OK);
    }
    let first = call(&mut client, one.clone()).await;
    assert_eq!(first.overall_code, OVER);
    let before = redis.script_runs();
    for _ in 0..50 {
        let r = call(&mut client, one.clone()).await;
        assert_eq!(r.overall_code, OVER);
        assert!(header(&r, "retry-after").is_some());
    }
    let after = redis.script_runs();
    assert_eq!(after, before, "denials came from the local cache");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("sluice_local_cache_hits_total{backend=\"redis\"} 50"),
        "{metrics}"
    );
    server.stop().await;
}
