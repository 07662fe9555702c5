//! (f) Two real Envoys (1.40, the `rate_limit_quota` filter) in two regions sharing one
//! `scope: global` RLQS bucket: each Envoy asks sluice in its own region, and together they
//! admit one limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Deployment, pause};
use crate::common::envoy::{Envoy, rlqs_bootstrap};
use crate::common::http1::{self, Upstream};

/// 20 requests a second, bursts of 20, across every region.
const QUOTA_RULES: &str = "\
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 20, scope: global }
";
const RATE: f64 = 20.0;
const BURST: f64 = 20.0;

/// Requests paced to one Envoy from a thread of their own; each admission's time logged.
struct Requests {
    admitted: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
}

impl Requests {
    fn send(envoy: SocketAddr, per_second: f64) -> Self {
        let admitted = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log, halt) = (admitted.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut due = Instant::now();
            while !halt.load(Ordering::SeqCst) {
                let answer = http1::try_get(envoy, "/", &[("x-tenant", "acme")]);
                if answer.is_ok_and(|r| r.status == 200) {
                    log.lock().push(Instant::now());
                }
                due += Duration::from_secs_f64(1.0 / per_second);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        });
        Self { admitted, stop }
    }

    fn between(&self, from: Instant, to: Instant) -> usize {
        (self.admitted.lock().iter())
            .filter(|t| **t >= from && **t < to)
            .count()
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Two Envoys in two regions, each asking 1.5 × the limit (3 × in all), admit together within
/// [0.85, 1.10] × (B + R·T) over 30 s, once the regions' floors have settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoy and redis-server (scripts/test installs them)"]
async fn two_envoys_in_two_regions_share_one_global_bucket() {
    let deployment = Deployment::start(&["a", "b"], &[1, 1], QUOTA_RULES).await;
    let upstream = Upstream::start();
    let envoys: Vec<Envoy> = (deployment.regions.iter())
        .map(|r| Envoy::start(&rlqs_bootstrap("quota", r.grpc()[0], upstream.addr)))
        .collect();
    let loads: Vec<Requests> = (envoys.iter())
        .map(|e| Requests::send(e.listener, 1.5 * RATE))
        .collect();
    pause(20.0).await;
    let from = Instant::now();
    pause(30.0).await;
    let to = Instant::now();
    let each: Vec<usize> = loads.iter().map(|l| l.between(from, to)).collect();
    let combined = each.iter().sum::<usize>() as f64;
    let bound = BURST + RATE * to.duration_since(from).as_secs_f64();
    eprintln!(
        "(f) two Envoys in two regions admitted {each:?} in 30 s: {combined} ({:.3} of B + R·T = {bound:.0})",
        combined / bound
    );
    assert!(
        (0.85 * bound..=1.10 * bound).contains(&combined),
        "{combined}"
    );
    drop(loads);
}
