//! Envoy's quota service (RLQS) with real Envoy 1.40 processes (the `rate_limit_quota` filter): several
//! Envoys share one limit, measured by counting what they admit against the stated bound
//! (docs/rlqs.md). Requests are paced by the wall clock; the counts are compared with the
//! bound over the whole run, never a single call's timing.

use crate::common;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::envoy::{Envoy, rlqs_bootstrap, rlqs_bootstrap_with};
use common::http1::{self, Upstream};
use common::process::{Serve, Sluice};

/// 5 requests a second in all, bursts of 10, shared by every Envoy.
const RULES: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10 }
"#;
const RATE: f64 = 5.0;
const BURST: f64 = 10.0;
/// The rules of the reconnect and cut-off tests: 20 a second, a burst of 20.
const TWENTY_A_SECOND: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 20 }
"#;

/// Requests sent to one Envoy at a steady rate, counted by answer.
struct Load {
    admitted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    /// Sends `per_second` requests a second of tenant `tenant` to `envoy` until stopped.
    fn start(envoy: SocketAddr, tenant: &'static str, per_second: f64) -> Self {
        let (admitted, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, r, s) = (admitted.clone(), refused.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let gap = Duration::from_secs_f64(1.0 / per_second);
            let mut next = Instant::now();
            while !s.load(Ordering::SeqCst) {
                match http1::try_get(envoy, "/", &[("x-tenant", tenant)]).map(|r| r.status) {
                    Ok(200) => a.fetch_add(1, Ordering::SeqCst),
                    Ok(_) | Err(_) => r.fetch_add(1, Ordering::SeqCst),
                };
                next += gap;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        Self {
            admitted,
            refused,
            stop,
            thread: Some(thread),
        }
    }

    fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::SeqCst)
    }

    fn sent(&self) -> u64 {
        self.admitted() + self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// sluice on a fixed gRPC port (so it can come back on it) and `n` Envoys asking it.
fn stack(n: usize) -> (Sluice, Upstream, Vec<Envoy>) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let sluice = Serve::new().rules(RULES).grpc_addr(port).start();
    let upstream = Upstream::start();
    let bootstrap = rlqs_bootstrap("quota", sluice.grpc_addr, upstream.addr);
    let envoys = (0..n).map(|_| Envoy::start(&bootstrap)).collect();
    (sluice, upstream, envoys)
}

/// What the limit allows over `seconds`: the burst plus the rate.
fn bound(seconds: f64) -> f64 {
    BURST + RATE * seconds
}

/// Three Envoys asking 3x the limit in all admit, together, between 0.85 and 1.10 of the bound
/// over 30 s.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn three_envoys_share_one_limit() {
    let (_sluice, _upstream, envoys) = stack(3);
    let started = Instant::now();
    let loads: Vec<Load> = envoys
        .iter()
        .map(|e| Load::start(e.listener, "acme", RATE))
        .collect();
    std::thread::sleep(Duration::from_secs(30));
    let admitted: u64 = loads.iter().map(Load::admitted).sum();
    let seconds = started.elapsed().as_secs_f64();
    drop(loads);
    let ratio = admitted as f64 / bound(seconds);
    assert!(
        (0.85..=1.10).contains(&ratio),
        "admitted {admitted} in {seconds:.1} s: {ratio:.2} of the bound {:.0}",
        bound(seconds)
    );
}

/// An Envoy asking 15 % of the limit gets at least 90 % of what it asks while two others ask
/// for far more; when one of those stops, the other reaches 80 % of the freed share within
/// three report intervals.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn a_small_asker_is_served_and_a_freed_share_moves() {
    let (_sluice, _upstream, envoys) = stack(3);
    let small = Load::start(envoys[0].listener, "acme", 0.15 * RATE);
    let big = Load::start(envoys[1].listener, "acme", 2.0 * RATE);
    let leaving = Load::start(envoys[2].listener, "acme", 2.0 * RATE);
    std::thread::sleep(Duration::from_secs(30));
    let served = small.admitted() as f64 / small.sent() as f64;
    eprintln!("the small asker got {served:.3} of its requests");
    assert!(
        served >= 0.90,
        "the small asker got {served:.2} of its requests"
    );
    drop(leaving);
    std::thread::sleep(Duration::from_secs(15));
    let before = big.admitted();
    std::thread::sleep(Duration::from_secs(10));
    let rate = (big.admitted() - before) as f64 / 10.0;
    // The freed share is the leaver's; the big asker held about half of the rest before.
    let expected = RATE - 0.15 * RATE;
    // Counts are whole: 34 of the 34 that 80 % of 4.25/s over 10 s asks must pass, whatever
    // the float product's last bit.
    assert!(
        rate >= 0.8 * expected - 1e-9,
        "the remaining big asker admitted {rate:.2}/s of {expected:.2}/s"
    );
}

/// After a SIGKILL and a restart of sluice, the next 15 s stay within 1.3x the bound: shares
/// already in the Envoys run to their time to live, and the restarted server does not hand the
/// first Envoy that reconnects the whole limit.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn a_restart_keeps_the_bound() {
    let (mut sluice, _upstream, envoys) = stack(3);
    let loads: Vec<Load> = envoys
        .iter()
        .map(|e| Load::start(e.listener, "acme", 2.0 * RATE))
        .collect();
    std::thread::sleep(Duration::from_secs(15));
    sluice.kill();
    let before: u64 = loads.iter().map(Load::admitted).sum();
    let started = Instant::now();
    let _sluice = sluice.restart(&[]);
    std::thread::sleep(Duration::from_secs(15).saturating_sub(started.elapsed()));
    let admitted = loads.iter().map(Load::admitted).sum::<u64>() - before;
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        admitted as f64 <= 1.3 * bound(seconds),
        "admitted {admitted} in the {seconds:.1} s after a restart; bound {:.0}",
        bound(seconds)
    );
}

/// Issue 40, item 2: sluice ends every gRPC connection after about 15 s (then a second of
/// grace), so the Envoy's RLQS stream breaks and reconnects several times; through each
/// reconnect what it admits each second stays within 20 % of its share (the whole limit, 20 a
/// second, offered 30). It used to be refused everything for 5-6 s after every reconnect.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn a_reconnect_keeps_the_envoys_share() {
    const SHARE: f64 = 20.0;
    let rules = TWENTY_A_SECOND;
    let args = [
        "--grpc-max-connection-age",
        "15s",
        "--grpc-max-connection-age-grace",
        "1s",
    ];
    let sluice = Serve::new().rules(rules).args(args).start();
    let upstream = Upstream::start();
    let envoy = Envoy::start(&rlqs_bootstrap("quota", sluice.grpc_addr, upstream.addr));
    let load = Load::start(envoy.listener, "acme", 1.5 * SHARE);
    std::thread::sleep(Duration::from_secs(8));
    // What it admitted in each second of the next 45 (about three reconnects).
    let mut seconds = Vec::new();
    let mut last = load.admitted();
    let started = Instant::now();
    for n in 1..=45u32 {
        std::thread::sleep(
            (started + n * Duration::from_secs(1)).saturating_duration_since(Instant::now()),
        );
        let now = load.admitted();
        seconds.push(now - last);
        last = now;
    }
    let connections = envoy.counter("cluster.sluice.upstream_cx_total");
    drop(load);
    assert!(
        connections >= 3,
        "{connections} connections to sluice: no reconnect to judge"
    );
    // Each two seconds together: a load thread on a busy machine may be late by a request.
    let worst = (seconds.windows(2))
        .map(|w| (w[0] + w[1]) as f64 / 2.0)
        .fold(f64::MAX, f64::min);
    assert!(
        worst >= 0.8 * SHARE,
        "admitted a second, through {connections} connections: {seconds:?}"
    );
    let total: u64 = seconds.iter().sum();
    eprintln!("{connections} connections; admitted each second: {seconds:?}");
    assert!(
        total as f64 <= SHARE * 45.0 + SHARE,
        "admitted {total} in 45 s: {seconds:?}"
    );
}

/// Issue 40, item 14: what Envoy 1.40 does once sluice is gone past an assignment's time to live
/// (10 s), as docs/rlqs.md and examples/envoy/rlqs.yaml say. `reuse_last_assignment` is not
/// implemented: the bucket goes back to `no_assignment_behavior` (here `DENY_ALL`) and admits
/// nothing. A `fallback_rate_limit` token bucket is enforced, for its timeout.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn a_cut_off_envoy_follows_its_expired_assignment_behavior() {
    let rules = TWENTY_A_SECOND;
    let reuse = "{ expired_assignment_behavior_timeout: 60s, reuse_last_assignment: {} }";
    let fallback = "{ expired_assignment_behavior_timeout: 60s, fallback_rate_limit: { \
        token_bucket: { max_tokens: 5, tokens_per_fill: { value: 5 }, fill_interval: 1s } } }";
    let mut admitted = Vec::new();
    for expired in [reuse, fallback] {
        let mut sluice = Serve::new().rules(rules).start();
        let upstream = Upstream::start();
        let bootstrap = rlqs_bootstrap_with("quota", sluice.grpc_addr, upstream.addr, expired);
        let envoy = Envoy::start(&bootstrap);
        let load = Load::start(envoy.listener, "acme", 30.0);
        std::thread::sleep(Duration::from_secs(8));
        sluice.kill();
        // Past the last answer's TTL (and the next report tick), for 10 s.
        std::thread::sleep(Duration::from_secs(12));
        let before = load.admitted();
        std::thread::sleep(Duration::from_secs(10));
        admitted.push((load.admitted() - before) as f64 / 10.0);
    }
    eprintln!("admitted a second once cut off: reuse_last_assignment, fallback {admitted:?}");
    assert!(
        admitted[0] < 1.0,
        "reuse_last_assignment admitted {:.1}/s",
        admitted[0]
    );
    assert!(
        (3.5..=6.5).contains(&admitted[1]),
        "a fallback of 5/s admitted {:.1}/s",
        admitted[1]
    );
}
