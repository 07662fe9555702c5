//! The refusals a shadow rule would have made: a token bucket of the whole limit, fed by the
//! usage reports of every stream, that only counts.

use crate::clock::{Nanos, SECOND};
use crate::rules::bucket::SharedRate;

/// A virtual token bucket holding the whole limit (every stream's traffic together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shadow {
    tokens: f64,
    at: Nanos,
}

impl Shadow {
    /// A full bucket at `now`.
    pub(crate) fn new(rate: &SharedRate, now: Nanos) -> Shadow {
        Shadow {
            tokens: rate.burst as f64,
            at: now,
        }
    }

    /// Charges `offered` requests reported at `now`; returns how many the limit would have
    /// refused. Reports arrive at their own times, so each refills the bucket up to `now` first.
    pub(crate) fn charge(&mut self, rate: &SharedRate, offered: u64, now: Nanos) -> u64 {
        let elapsed = now.saturating_sub(self.at) as f64 / SECOND as f64;
        let per_second = rate.per_second();
        self.tokens = (self.tokens + elapsed * per_second).min(rate.burst as f64);
        self.at = self.at.max(now);
        let admitted = (offered as f64).min(self.tokens.floor()).max(0.0);
        self.tokens -= admitted;
        offered - admitted as u64
    }
}
