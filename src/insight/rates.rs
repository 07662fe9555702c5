//! Decision rates: running totals by outcome, sampled once a second into a short history, so
//! the page can show calls per second over the last 10 s and the last minute.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::limiter::Code;

/// Samples kept (seconds of history).
pub(crate) const RATE_HISTORY: usize = 120;

/// Running totals by outcome.
#[derive(Debug, Default)]
pub struct Rates {
    ok: AtomicU64,
    over_limit: AtomicU64,
    degraded: AtomicU64,
    errors: AtomicU64,
    history: Mutex<VecDeque<RateTotals>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct RateTotals {
    ok: u64,
    over_limit: u64,
    degraded: u64,
    errors: u64,
}

/// Calls per second by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PerSecond {
    /// Answered OK.
    pub ok: f64,
    /// Answered OVER_LIMIT.
    pub over_limit: f64,
    /// Answered by `failure_mode` without the store (OK or OVER_LIMIT; counted there too).
    pub degraded: f64,
    /// Failed (malformed, or the store failed and no rule allowed it).
    pub errors: f64,
}

/// What the page shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecisionRates {
    /// Over the last 10 seconds.
    pub last_10s: PerSecond,
    /// Over the last 60 seconds.
    pub last_60s: PerSecond,
    /// Per second, oldest first, up to 119 entries (`RATE_HISTORY` − 1).
    pub history: Vec<PerSecond>,
    /// Totals since start: OK, OVER_LIMIT, degraded, errors.
    pub totals: [u64; 4],
}

impl Rates {
    /// Counts one answered call.
    pub fn count(&self, code: Code, degraded: bool) {
        match code {
            Code::Ok => self.ok.fetch_add(1, Ordering::Relaxed),
            Code::OverLimit => self.over_limit.fetch_add(1, Ordering::Relaxed),
        };
        if degraded {
            self.degraded.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one failed call.
    pub fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    fn totals(&self) -> RateTotals {
        RateTotals {
            ok: self.ok.load(Ordering::Relaxed),
            over_limit: self.over_limit.load(Ordering::Relaxed),
            degraded: self.degraded.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    /// Records the totals of this second.
    pub fn sample(&self) {
        let totals = self.totals();
        let mut history = self.history.lock();
        if history.len() == RATE_HISTORY {
            history.pop_front();
        }
        history.push_back(totals);
    }

    /// The rates over the recorded history.
    pub fn rates(&self) -> DecisionRates {
        let history = self.history.lock();
        let samples: Vec<RateTotals> = history.iter().copied().collect();
        drop(history);
        let now = self.totals();
        DecisionRates {
            last_10s: over(&samples, 10),
            last_60s: over(&samples, 60),
            history: samples
                .windows(2)
                .map(|w| per_second(w[0], w[1], 1))
                .collect(),
            totals: [now.ok, now.over_limit, now.degraded, now.errors],
        }
    }
}

/// The rate over the last `seconds` samples (or as many as there are).
fn over(samples: &[RateTotals], seconds: usize) -> PerSecond {
    let Some(&last) = samples.last() else {
        return PerSecond::default();
    };
    let back = seconds.min(samples.len() - 1);
    if back == 0 {
        return PerSecond::default();
    }
    per_second(samples[samples.len() - 1 - back], last, back)
}

fn per_second(from: RateTotals, to: RateTotals, seconds: usize) -> PerSecond {
    let rate = |a: u64, b: u64| b.saturating_sub(a) as f64 / seconds as f64;
    PerSecond {
        ok: rate(from.ok, to.ok),
        over_limit: rate(from.over_limit, to.over_limit),
        degraded: rate(from.degraded, to.degraded),
        errors: rate(from.errors, to.errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rates are the totals' differences per sampled second, over 10 s and 60 s.
    #[test]
    fn rates_follow_samples() {
        let rates = Rates::default();
        rates.sample();
        for second in 0..20 {
            for _ in 0..10 {
                rates.count(Code::Ok, false);
            }
            if second >= 10 {
                rates.count(Code::OverLimit, true);
            }
            rates.sample();
        }
        let r = rates.rates();
        assert_eq!(r.last_10s.ok, 10.0);
        assert_eq!(r.last_10s.over_limit, 1.0);
        assert_eq!(r.last_10s.degraded, 1.0);
        assert_eq!(r.last_60s.over_limit, 0.5, "20 s of history so far");
        assert_eq!(r.history.len(), 20);
        assert_eq!(r.totals, [200, 10, 10, 0]);
    }

    /// Before a second has been sampled, every rate is zero (never a division by zero).
    #[test]
    fn no_history_no_rates() {
        let rates = Rates::default();
        rates.count_error();
        assert_eq!(rates.rates().last_10s, PerSecond::default());
        rates.sample();
        assert_eq!(rates.rates().last_60s, PerSecond::default());
    }
}
