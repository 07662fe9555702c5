//! A circuit breaker: after consecutive failures calls stop waiting on Redis; a background
//! probe closes it again as soon as Redis answers.
//!
//! Closed: calls go to Redis; `FAILURES_TO_OPEN` consecutive failures open the breaker.
//! Open: calls fail at once (each rule's `failure_mode` answers them) and the store's probe task
//! pings every pooled connection every probe interval (`probe.rs`; replacing those that broke); the
//! first round in which all of them answer closes the breaker (only the probe closes it), so
//! decisions resume within a probe interval (plus a reconnect) of Redis coming back, without
//! a restart, and no call meets a connection that broke during the outage.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Consecutive failed calls that open the breaker.
pub(super) const FAILURES_TO_OPEN: u32 = 3;

/// A state change worth one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerChange {
    /// The breaker opened.
    Opened,
    /// The breaker closed.
    Closed,
}

/// The breaker (lock-free: two atomics).
#[derive(Debug)]
pub struct Breaker {
    epoch: Instant,
    failures: AtomicU32,
    /// Nanoseconds since `epoch` (plus one) at which the breaker opened; 0 while closed.
    opened_at: AtomicU64,
    unhealthy_after: Duration,
}

impl Breaker {
    /// A closed breaker that reports unhealthy once open for `unhealthy_after`.
    pub fn new(unhealthy_after: Duration) -> Self {
        Self {
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            opened_at: AtomicU64::new(0),
            unhealthy_after,
        }
    }

    /// Whether calls should skip Redis.
    pub fn is_open(&self) -> bool {
        self.opened_at.load(Ordering::Acquire) != 0
    }

    /// How long the breaker has been open (`None` while closed).
    pub fn open_for(&self) -> Option<Duration> {
        match self.opened_at.load(Ordering::Acquire) {
            0 => None,
            at => Some(self.elapsed().saturating_sub(Duration::from_nanos(at - 1))),
        }
    }

    /// Records a successful call: resets the failure count. It does not close an open
    /// breaker: a call sent before it opened may finish late, and only the probe says Redis
    /// keeps up again (so an overloaded Redis gets at least a probe interval of relief).
    pub fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Release);
        }
    }

    /// Records a successful probe; returns `Closed` if that closed the breaker.
    pub fn probe_succeeded(&self) -> Option<BreakerChange> {
        self.failures.store(0, Ordering::Release);
        (self.opened_at.swap(0, Ordering::AcqRel) != 0).then_some(BreakerChange::Closed)
    }

    /// Records a failed call; returns `Opened` if that opened the breaker.
    pub fn failure(&self) -> Option<BreakerChange> {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures < FAILURES_TO_OPEN {
            return None;
        }
        let now = self.elapsed().as_nanos() as u64 + 1;
        self.opened_at
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| BreakerChange::Opened)
    }

    /// Whether health should report the store unhealthy: open for `unhealthy_after` or more.
    pub fn unhealthy(&self) -> bool {
        self.open_for().is_some_and(|d| d >= self.unhealthy_after)
    }

    fn elapsed(&self) -> Duration {
        self.epoch.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A breaker that reports unhealthy after ten seconds open (the tests stay below it).
    fn breaker() -> Breaker {
        Breaker::new(Duration::from_secs(10))
    }

    /// Consecutive failures open it once; a success in between resets the count.
    #[test]
    fn opens_after_consecutive_failures() {
        let b = breaker();
        assert_eq!((b.failure(), b.failure()), (None, None));
        b.success();
        assert_eq!((b.failure(), b.failure()), (None, None));
        assert_eq!(b.failure(), Some(BreakerChange::Opened));
        assert_eq!(b.failure(), None, "already open: no second log line");
        assert!(b.is_open() && !b.unhealthy());
    }

    /// A late successful call leaves it open; a successful probe closes it.
    #[test]
    fn probe_closes() {
        let b = breaker();
        for _ in 0..FAILURES_TO_OPEN {
            b.failure();
        }
        b.success();
        assert!(b.is_open());
        assert_eq!(b.probe_succeeded(), Some(BreakerChange::Closed));
        assert!(!b.is_open() && b.open_for().is_none());
    }
}
