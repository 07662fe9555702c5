//! Steady load on several sluice replicas while a Redis Cluster changes: clients spread over the
//! replicas call one descriptor in a loop and every answer is sorted (counted by Redis or
//! answered by `failure_mode`, admitted or not, a gRPC error); the slowest answer is kept as a
//! figure to print, never to assert.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice::proto::RateLimitRequest;
use tokio::task::JoinHandle;

use crate::common::{OK, OVER, connect, eventually, header};

/// How every answer of a run went.
#[derive(Debug, Default)]
pub struct Tally {
    /// Admitted by Redis's count.
    pub counted_ok: AtomicU64,
    /// Refused by Redis's count.
    pub counted_over: AtomicU64,
    /// Admitted by `failure_mode` (marked `x-ratelimit-mode: degraded`).
    pub degraded_ok: AtomicU64,
    /// Refused by `failure_mode`.
    pub degraded_over: AtomicU64,
    /// gRPC errors, or codes other than OK and OVER_LIMIT.
    pub errors: AtomicU64,
    /// The slowest answer, in microseconds.
    pub slowest_us: AtomicU64,
    /// When the last answer answered by `failure_mode` came, in microseconds since the load
    /// started (0: none yet).
    pub last_degraded_us: AtomicU64,
}

/// A copy of a [`Tally`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub counted_ok: u64,
    pub counted_over: u64,
    pub degraded_ok: u64,
    pub degraded_over: u64,
    pub errors: u64,
    pub slowest: Duration,
}

impl Counts {
    /// Every answer.
    pub fn answered(&self) -> u64 {
        self.counted_ok + self.counted_over + self.degraded_ok + self.degraded_over + self.errors
    }

    /// Answers answered by `failure_mode`.
    pub fn degraded(&self) -> u64 {
        self.degraded_ok + self.degraded_over
    }

    /// What happened between `earlier` and this (the slowest answer of the whole run).
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            counted_ok: self.counted_ok - earlier.counted_ok,
            counted_over: self.counted_over - earlier.counted_over,
            degraded_ok: self.degraded_ok - earlier.degraded_ok,
            degraded_over: self.degraded_over - earlier.degraded_over,
            errors: self.errors - earlier.errors,
            slowest: self.slowest,
        }
    }
}

impl Tally {
    fn snapshot(&self) -> Counts {
        let get = |a: &AtomicU64| a.load(Ordering::Acquire);
        Counts {
            counted_ok: get(&self.counted_ok),
            counted_over: get(&self.counted_over),
            degraded_ok: get(&self.degraded_ok),
            degraded_over: get(&self.degraded_over),
            errors: get(&self.errors),
            slowest: Duration::from_micros(get(&self.slowest_us)),
        }
    }
}

/// Clients calling in a loop until stopped.
pub struct Load {
    started: Instant,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    /// `per_replica` clients on each of `replicas`, each sending `request` again and again.
    pub async fn start(
        replicas: &[SocketAddr],
        per_replica: usize,
        request: RateLimitRequest,
    ) -> Self {
        let load_started = Instant::now();
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for addr in replicas {
            for _ in 0..per_replica {
                let mut client = connect(*addr).await;
                let (tally, stop, request) = (tally.clone(), stop.clone(), request.clone());
                workers.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Acquire) {
                        let started = Instant::now();
                        let answer = client.should_rate_limit(request.clone()).await;
                        let took = started.elapsed().as_micros() as u64;
                        tally.slowest_us.fetch_max(took, Ordering::AcqRel);
                        let bin = match answer.map(tonic::Response::into_inner) {
                            Ok(r) => {
                                let degraded = header(&r, "x-ratelimit-mode") == Some("degraded");
                                match (r.overall_code, degraded) {
                                    (OK, false) => &tally.counted_ok,
                                    (OVER, false) => &tally.counted_over,
                                    (OK, true) => &tally.degraded_ok,
                                    (OVER, true) => &tally.degraded_over,
                                    _ => &tally.errors,
                                }
                            }
                            Err(_) => &tally.errors,
                        };
                        bin.fetch_add(1, Ordering::AcqRel);
                        if std::ptr::eq(bin, &tally.degraded_ok)
                            || std::ptr::eq(bin, &tally.degraded_over)
                        {
                            let at = load_started.elapsed().as_micros() as u64;
                            tally.last_degraded_us.fetch_max(at, Ordering::AcqRel);
                        }
                    }
                }));
            }
        }
        Self {
            started: load_started,
            tally,
            stop,
            workers,
        }
    }

    /// The answers so far.
    pub fn counts(&self) -> Counts {
        self.tally.snapshot()
    }

    /// When the last answer answered by `failure_mode` came, if one did.
    pub fn last_degraded(&self) -> Option<Instant> {
        match self.tally.last_degraded_us.load(Ordering::Acquire) {
            0 => None,
            us => Some(self.started + Duration::from_micros(us)),
        }
    }

    /// Waits until `more` further calls were answered.
    pub async fn until_more(&self, more: u64) {
        let target = self.counts().answered() + more;
        eventually(
            Duration::from_secs(60),
            &format!("{more} more calls answered"),
            async || self.counts().answered() >= target,
        )
        .await;
    }

    /// Waits until `more` further calls were admitted by Redis's count.
    pub async fn until_admitted(&self, more: u64) {
        let target = self.counts().counted_ok + more;
        eventually(
            Duration::from_secs(60),
            &format!("{more} more calls admitted by redis"),
            async || self.counts().counted_ok >= target,
        )
        .await;
    }

    /// Waits until `more` further calls were refused by Redis's count.
    pub async fn until_refused(&self, more: u64) {
        let target = self.counts().counted_over + more;
        eventually(
            Duration::from_secs(60),
            &format!("{more} more calls refused by redis"),
            async || self.counts().counted_over >= target,
        )
        .await;
    }

    /// Stops every client; returns the answers of the whole run.
    pub async fn stop(self) -> Counts {
        self.stop.store(true, Ordering::Release);
        for worker in self.workers {
            worker.await.expect("load client");
        }
        self.tally.snapshot()
    }
}
