//! Time as a value: the `Clock` trait, the system clock, and a manual clock for tests.
//!
//! Time is read once per call at the top (the limiter) and passed down as [`Nanos`];
//! nothing below reads a clock, so algorithms and stores are deterministic under test.
//! Durations written as text (flags, environment) share one grammar: [`duration`].

pub mod duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (or a length of time in nanoseconds).
pub type Nanos = u64;

/// Nanoseconds in one millisecond.
pub const MILLI: Nanos = 1_000_000;
/// Nanoseconds in one second.
pub const SECOND: Nanos = 1_000_000_000;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time in nanoseconds since the Unix epoch.
    fn now(&self) -> Nanos;
}

/// The real wall clock. Wall time (not monotonic) because windows are epoch-aligned,
/// as envoyproxy/ratelimit's are, and must agree across restarts and replicas.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as Nanos)
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A manual clock reading `start` nanoseconds since the epoch.
    pub fn new(start: Nanos) -> Self {
        Self(Arc::new(AtomicU64::new(start)))
    }

    /// Sets the time.
    pub fn set(&self, now: Nanos) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_nanos() as Nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clones of a manual clock share one time.
    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new(5);
        let b = a.clone();
        a.advance(Duration::from_nanos(10));
        assert_eq!(b.now(), 15);
        b.set(100);
        assert_eq!(a.now(), 100);
    }
}
