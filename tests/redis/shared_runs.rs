//! Calls that arrive together share one script run from the first: a call finding a free run
//! slot lets the calls already ready to run queue behind it (one pass through the scheduler)
//! and leads their batch, instead of going out alone while they wait for the next run.

use std::time::Duration;

use sluice::store::Store;

use crate::common::redis::RedisServer;

/// 40 calls spawned at once on a store with one run slot (one connection, one run in flight)
/// go out as one script run: the first call leads it. Before leading, the first call went out
/// alone and the other 39 waited for it, so two runs. The runtime is single-threaded and polls
/// its I/O driver only after 1,000 tasks, so the calls' readiness is the same on every run of
/// the test: all 40 are ready before the first resumes.
#[test]
#[ignore = "needs redis-server (scripts/test installs it)"]
fn calls_ready_together_share_the_first_run() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .event_interval(1_000)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let redis = RedisServer::start();
        let store = crate::one_run_slot_store(&redis.url(), Duration::from_secs(5)).await;
        let charge = crate::hourly_charge("shared", "hot", 30);
        // The first call opens the connection and loads the script.
        let first = store.apply(std::slice::from_ref(&charge), 0).await;
        assert!(first.expect("redis answers")[0].verdict.admitted);
        let before = redis.script_runs();
        let calls: Vec<_> = (0..40)
            .map(|_| {
                let (store, charge) = (store.clone(), charge.clone());
                tokio::spawn(async move {
                    let outcomes = store.apply(std::slice::from_ref(&charge), 0).await;
                    outcomes.expect("redis answers")[0].verdict.admitted
                })
            })
            .collect();
        let mut admitted = 1;
        for call in calls {
            admitted += u64::from(call.await.expect("task"));
        }
        // Decided one after the other in the run, exactly: 29 of the 40 fit.
        assert_eq!(admitted, 30);
        let runs = redis.script_runs() - before;
        assert_eq!(runs, 1, "40 calls ready together took {runs} script runs");
    });
}
