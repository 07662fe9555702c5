//! What `/ui` shows about live traffic, kept in bounded memory: the keys limited most in the
//! last minutes (`hitters.rs`, a windowed Space-Saving sketch) and decision rates
//! (`rates.rs`, totals sampled once a second).
//!
//! The transport calls [`Insight::observe`] after each decision: an allowed call costs four
//! relaxed atomic additions at most; only a refused descriptor is formatted into the sketch.
//! Time moves by [`Insight::tick`], which housekeeping calls once a second (nothing here reads
//! a clock).

mod hitters;
mod rates;

use crate::limiter::{Code, Decision, LimitError, Request, StoreUse};

pub(crate) use self::hitters::{HITTER_WINDOW_SECONDS, HITTER_WINDOWS};
pub use self::hitters::{LimitedKey, TopKeys};
pub use self::rates::{DecisionRates, PerSecond, Rates};

/// Live traffic figures for the operator page.
#[derive(Debug)]
pub struct Insight {
    top: TopKeys,
    rates: Rates,
}

impl Default for Insight {
    fn default() -> Self {
        Self::new(hitters::DEFAULT_SLOTS)
    }
}

impl Insight {
    /// Figures whose sketch keeps at most `slots` keys per window.
    pub fn new(slots: usize) -> Self {
        Self {
            top: TopKeys::new(slots),
            rates: Rates::default(),
        }
    }

    /// Counts one answered call of `request`: its outcome, and each refused descriptor's key.
    pub fn observe(&self, request: &Request, result: &Result<Decision, LimitError>) {
        match result {
            Ok(decision) => {
                let degraded = matches!(decision.store, StoreUse::Failed(_));
                self.rates.count(decision.code, degraded);
                if decision.code == Code::OverLimit {
                    for (descriptor, status) in request.descriptors.iter().zip(&decision.statuses) {
                        if status.code == Code::OverLimit {
                            self.top.offer(&request.domain, &descriptor.entries);
                        }
                    }
                }
            }
            Err(_) => self.rates.count_error(),
        }
    }

    /// Counts a call refused as malformed before it reached the limiter.
    pub fn observe_invalid(&self) {
        self.rates.count_error();
    }

    /// One second passed: samples the rates and ages the sketch.
    pub fn tick(&self) {
        self.rates.sample();
        self.top.tick();
    }

    /// The `n` keys limited most over the sketch's windows, most first.
    pub fn top(&self, n: usize) -> Vec<LimitedKey> {
        self.top.top(n)
    }

    /// Decision rates over the last seconds.
    pub fn rates(&self) -> DecisionRates {
        self.rates.rates()
    }
}
