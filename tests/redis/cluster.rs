//! Redis Cluster: three nodes created by `redis-cli --cluster create`.

use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::{OK, OVER, TestServer, call, descriptor, one_descriptor, request};

const RULES: &str = "\
domain: cluster
descriptors:
  - key: user
    rate_limits:
      - { unit: minute, requests_per_unit: 3, algorithm: sliding_log }
      - { unit: hour, requests_per_unit: 100, algorithm: token_bucket }
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding_window }
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: fixed_window }
";

/// Exact limits on a cluster; counters spread over the nodes; one family (a descriptor's
/// limits and the descriptors nested under its first entry) is all-or-nothing; families in
/// different slots are decided per slot group.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn cluster_decides_per_slot_group() {
    let cluster = RedisCluster::start();
    let store = crate::store(&cluster.url()).await;
    let server = TestServer::start_on(RULES, store).await;
    let mut client = server.client().await;

    // One family: [user] (two limits) and [user, path] share a slot, so a denial of the
    // nested path limit charges neither of the user limits.
    let both = |path: &str| {
        request(
            "cluster",
            vec![
                descriptor(&[("user", "u1")]),
                descriptor(&[("user", "u1"), ("path", path)]),
            ],
        )
    };
    assert_eq!(call(&mut client, both("/a")).await.overall_code, OK);
    assert_eq!(call(&mut client, both("/a")).await.overall_code, OK);
    let r = call(&mut client, both("/a")).await;
    assert_eq!((r.overall_code, r.statuses[1].code), (OVER, OVER));
    let user_only = one_descriptor("cluster", &[("user", "u1")]);
    let r = call(&mut client, user_only.clone()).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].limit_remaining),
        (OK, 0),
        "3rd user call"
    );
    assert_eq!(call(&mut client, user_only).await.overall_code, OVER);

    // Many families: counted exactly, spread over every node.
    for t in 0..30 {
        let tenant = one_descriptor("cluster", &[("tenant", &format!("t{t}"))]);
        for _ in 0..4 {
            assert_eq!(call(&mut client, tenant.clone()).await.overall_code, OK);
        }
        assert_eq!(call(&mut client, tenant).await.overall_code, OVER);
    }
    for node in &cluster.nodes {
        let keys = node.dbsize();
        assert!(keys > 0, "node {} holds no counter", node.port);
    }

    // Two families in one call (different slots): each slot group decides on its own.
    let mixed = request(
        "cluster",
        vec![
            descriptor(&[("tenant", "t0")]),
            descriptor(&[("user", "u2")]),
        ],
    );
    let r = call(&mut client, mixed).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OVER, OVER, OK)
    );
    // The user's slot group was not blocked, so it was charged (README: per slot group).
    let r = call(&mut client, one_descriptor("cluster", &[("user", "u2")])).await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
    server.stop().await;
}

/// Script runs on all nodes so far.
fn script_runs(cluster: &RedisCluster) -> u64 {
    cluster.nodes.iter().map(RedisServer::script_runs).sum()
}

/// Concurrent calls on one family share script runs on a cluster too (one batcher per slot),
/// and are counted exactly: of 400 calls on a limit of 300, exactly 300 are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn concurrent_calls_on_one_slot_share_script_runs() {
    use sluice::store::Store;

    let cluster = RedisCluster::start();
    let store = crate::store(&cluster.url()).await;
    let charge = crate::hourly_charge("cluster", "hot", 300);
    // The first call warms the connection (and loads the script).
    assert!(
        store.apply(std::slice::from_ref(&charge), 0).await.unwrap()[0]
            .verdict
            .admitted
    );
    let before = script_runs(&cluster);
    let calls = (0..399).map(|_| {
        let (store, charge) = (store.clone(), charge.clone());
        tokio::spawn(async move {
            let outcomes = store.apply(std::slice::from_ref(&charge), 0).await;
            outcomes.expect("redis answers")[0].verdict.admitted
        })
    });
    let mut admitted = 1;
    for call in futures_util::future::join_all(calls.collect::<Vec<_>>()).await {
        admitted += u64::from(call.expect("task"));
    }
    assert_eq!(admitted, 300);
    let runs = script_runs(&cluster) - before;
    assert!(runs < 200, "399 calls took {runs} script runs");
}
