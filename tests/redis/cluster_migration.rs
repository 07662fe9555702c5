//! A Redis Cluster slot migrated by hand under steady load from three sluice replicas: the
//! clients meet `TRYAGAIN` while a family's keys are split, `ASK` while they sit on the
//! importing node, `MOVED` once it serves the slot. With a healthy cluster no call may be
//! answered by its `failure_mode`: every one is OK or OVER_LIMIT by Redis's count, and the
//! count is exact.

use crate::cluster_load::{Counts, Load};
use crate::common::process::poll;
use crate::common::redis::RedisCluster;
use crate::common::{OK, TestServer, call, one_descriptor};

/// One family of two keys (a hash tag: one slot), the rule fails closed: a call refused
/// because of the migration would show as a degraded OVER_LIMIT.
const RULES: &str = "\
domain: moving
descriptors:
  - key: user
    failure_mode: deny
    rate_limits:
      - { unit: hour, requests_per_unit: 600, algorithm: fixed_window }
      - { unit: hour, requests_per_unit: 100000, algorithm: token_bucket }
";

/// The fixed window's limit.
const LIMIT: u64 = 600;

/// Move the slot of a hot family from one master to another while twelve clients on three
/// replicas call it: every call counted by Redis (none by `failure_mode`, no gRPC error), and
/// exactly the limit admitted across the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_slot_migrated_under_load_refuses_no_call() {
    let cluster = RedisCluster::start_with_replicas();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let store = crate::store(&cluster.url()).await;
        servers.push(TestServer::start_on(RULES, store).await);
    }
    let request = one_descriptor("moving", &[("user", "hot")]);
    let mut client = servers[0].client().await;
    assert_eq!(call(&mut client, request.clone()).await.overall_code, OK);

    // The family's two keys, on the master serving their slot.
    let view = cluster.view();
    let masters: Vec<usize> = view
        .iter()
        .filter(|n| n.is_live_master())
        .map(|n| cluster.index_of(n.port))
        .collect();
    let from = *masters
        .iter()
        .find(|&&m| !cluster.keys_on(m).is_empty())
        .expect("a master holds the family's keys");
    let keys = cluster.keys_on(from);
    assert_eq!(keys.len(), 2, "two limits, two keys");
    let slot = cluster.slot_of(&keys[0]);
    assert_eq!(cluster.slot_of(&keys[1]), slot, "one family, one slot");
    let to = *masters
        .iter()
        .find(|&&m| m != from)
        .expect("another master");

    let addrs: Vec<_> = servers.iter().map(|s| s.grpc_addr).collect();
    let load = Load::start(&addrs, 4, request).await;
    load.until_more(100).await;
    let mut phases: Vec<(&str, Counts)> = vec![("before", load.counts())];

    // MIGRATING/IMPORTING: the source still holds both keys and answers.
    tokio::task::block_in_place(|| cluster.begin_migration(slot, from, to));
    load.until_more(100).await;
    phases.push(("migrating", load.counts()));

    // One key moved: the family is split, a script on it gets TRYAGAIN until the other follows.
    let tried_again = cluster.errors_sent(from, "TRYAGAIN") + cluster.errors_sent(to, "TRYAGAIN");
    tokio::task::block_in_place(|| {
        assert_eq!(cluster.move_keys(slot, from, to, 1), 1);
        poll(
            std::time::Duration::from_secs(5),
            "a call met TRYAGAIN",
            || {
                let now =
                    cluster.errors_sent(from, "TRYAGAIN") + cluster.errors_sent(to, "TRYAGAIN");
                (now > tried_again).then_some(())
            },
        );
        while cluster.move_keys(slot, from, to, 1000) > 0 {}
    });
    phases.push(("keys split", load.counts()));

    // Every key on the target, the slot still the source's: ASK, then ASKING on the target.
    let asked = cluster.errors_sent(from, "ASK");
    load.until_more(200).await;
    assert!(cluster.errors_sent(from, "ASK") > asked, "calls met ASK");
    phases.push(("ask", load.counts()));

    // The target serves the slot: MOVED once per client, then straight to the target.
    let moved = cluster.errors_sent(from, "MOVED");
    tokio::task::block_in_place(|| cluster.finish_migration(slot, from, to));
    load.until_more(200).await;
    assert!(
        cluster.errors_sent(from, "MOVED") > moved,
        "calls met MOVED"
    );
    let answered = load.counts().answered();
    if answered < 2 * LIMIT {
        load.until_more(2 * LIMIT - answered).await;
    }
    phases.push(("moved", load.counts()));
    let total = load.stop().await;

    let mut previous = Counts::default();
    for (phase, counts) in &phases {
        println!("{phase}: {:?}", counts.since(&previous));
        previous = *counts;
    }
    println!(
        "redirects sent: TRYAGAIN {}, ASK {}, MOVED {}; slowest answer {:?}",
        cluster.errors_sent(from, "TRYAGAIN") + cluster.errors_sent(to, "TRYAGAIN"),
        cluster.errors_sent(from, "ASK"),
        cluster.errors_sent(from, "MOVED"),
        total.slowest
    );
    assert_eq!(
        (total.degraded(), total.errors),
        (0, 0),
        "no call refused because of the migration: {total:?}"
    );
    // The warm-up call, then the load: exactly the limit admitted across the replicas.
    assert_eq!(total.counted_ok + 1, LIMIT, "{total:?}");
    assert!(cluster.keys_on(from).is_empty(), "every key moved");
    for server in servers {
        server.stop().await;
    }
}
