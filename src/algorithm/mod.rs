//! Counting algorithms as pure functions of (limit, state, now, cost).
//!
//! No I/O, no clock, no locks: a store reads the state, calls [`decide`], and writes the
//! returned state back only when the whole call is admitted. A denied call consumes nothing,
//! unless its limit records every charge ([`Recording`]): a charge that crosses such a limit is
//! written whatever the call's fate.

mod fixed_window;
mod sliding_log;
mod sliding_window;
mod token_bucket;

#[cfg(test)]
mod recording_tests;
#[cfg(test)]
mod testing;

use crate::clock::Nanos;

pub use sliding_log::LogEntry;

/// Which counting algorithm a limit uses.
/// The discriminants are stable: they are part of counter keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Algorithm {
    /// Epoch-aligned fixed windows, as envoyproxy/ratelimit counts.
    FixedWindow = 0,
    /// Two-bucket weighted estimate: O(1) state, no edge double-burst.
    SlidingWindow = 1,
    /// Exact: never more than N admitted in any window of length W; O(N) state.
    SlidingLog = 2,
    /// Token bucket (GCRA): capacity `burst`, refill `requests` per window.
    TokenBucket = 3,
}

impl Algorithm {
    /// Every algorithm, in the order the rule schema documents them.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
    ];

    /// The name used in rule files (`algorithm:`) and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::TokenBucket => "token_bucket",
        }
    }

    /// Parses a rule-file name; `None` for an unknown name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters of one limit, as the algorithms need them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests allowed per window (the token bucket's refill per window). 0 blocks everything.
    pub requests: u64,
    /// The window length in nanoseconds (never 0).
    pub window: Nanos,
    /// Token bucket capacity; equals `requests` for the other algorithms.
    pub burst: u64,
    /// Where fixed windows are counted from: they are `[origin + k * window, ...)`. 0 for
    /// epoch-aligned windows; for a calendar limit, the start of the local day, week, month or
    /// year the call falls in (and `window` that period's length), decided by the limiter.
    /// Only `fixed_window` reads it.
    pub origin: Nanos,
    /// What the limit does with hits past it: only admitted hits count (the default), or every
    /// charge is recorded (a rule's `record_over_limit`, for token budgets).
    pub recording: Recording,
}

/// A bound no counter reaches: a recorded charge is the state the algorithm leaves under it.
/// 2^48, the largest limit parameter the Redis script takes (its numbers are doubles), so both
/// stores reach the same states.
pub const UNBOUNDED: u64 = 1 << 48;

/// What a limit does with hits that cross it (a rule's `record_over_limit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Recording {
    /// Only admitted hits are recorded: a denied charge changes nothing.
    #[default]
    AdmittedOnly,
    /// Every charge is recorded, even one that crosses the limit: a counter goes over it, a
    /// token bucket into debt (a token budget charged after the response), whatever the call's
    /// fate; a charge that fits is committed with its call, as any other. A check (cost 0) is
    /// refused while one more hit would not fit.
    Always,
    /// As [`Recording::Always`], but a check is refused only once the counter is past the
    /// limit, as envoyproxy/ratelimit judges a call of 0 hits (its `INCRBY 0` then a
    /// comparison): the drop-in personality's counting.
    AlwaysCompat,
}

impl Recording {
    /// Whether a charge's hits are recorded even when denied.
    pub fn records(self) -> bool {
        self != Recording::AdmittedOnly
    }

    /// The hits a call of `cost` is judged for: its cost, or for a check (0) one hit, or none
    /// under envoyproxy/ratelimit's judgment.
    pub fn judged(self, cost: u64) -> u64 {
        match (cost, self) {
            (0, Recording::AlwaysCompat) => 0,
            (0, _) => 1,
            (cost, _) => cost,
        }
    }
}

impl Limit {
    /// The start of the fixed window that contains `now`: epoch-aligned, or counted from
    /// [`Limit::origin`] (forwards or backwards).
    pub fn window_start(&self, now: Nanos) -> Nanos {
        let window = self.window.max(1);
        if now >= self.origin {
            now - (now - self.origin) % window
        } else {
            // Before the origin (a clock stepped back past a calendar boundary): the window
            // that ends at or before it, `k` windows back.
            let back = (self.origin - now).div_ceil(window);
            self.origin.saturating_sub(back.saturating_mul(window))
        }
    }

    /// Whether the window is a calendar period the limiter chose rather than an epoch-aligned
    /// one: its counter key names the window, and a shared store is not asked to align it.
    pub fn is_calendar(&self) -> bool {
        self.origin != 0
    }

    /// The most a single call can ever be admitted for: the bucket capacity or the limit.
    pub fn capacity(&self) -> u64 {
        match self.algorithm {
            Algorithm::TokenBucket => self.burst,
            _ => self.requests,
        }
    }

    /// The same limit with a bound no counter reaches (a bucket's capacity; a window's
    /// requests), its rate and window unchanged: it admits whatever was charged, so the state
    /// it leaves is the charge recorded past this limit. A store reads a counter's hits with
    /// it too (its check's remaining is the bound less the hits counted).
    pub fn unbounded(&self) -> Limit {
        match self.algorithm {
            Algorithm::TokenBucket => Limit {
                burst: UNBOUNDED,
                ..*self
            },
            _ => Limit {
                requests: UNBOUNDED,
                ..*self
            },
        }
    }
}

/// The stored state of one counter. Which variant is used follows the limit's algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Fixed window: the start of the window and the hits counted in it.
    Fixed {
        /// Start of the counted window (a multiple of the window length).
        window_start: Nanos,
        /// Hits admitted in that window.
        count: u64,
    },
    /// Sliding window: hits of the current aligned window and of the one before it.
    Sliding {
        /// Start of the current aligned window.
        window_start: Nanos,
        /// Hits admitted in the previous window.
        previous: u64,
        /// Hits admitted in the current window.
        current: u64,
    },
    /// Sliding log: admitted hits in time order, oldest first, and their total.
    Log {
        /// Admission times with the hits admitted at each, oldest first.
        entries: std::collections::VecDeque<LogEntry>,
        /// Sum of the hits in `entries`.
        total: u64,
    },
    /// Token bucket (GCRA): the theoretical arrival time, scaled by the refill rate.
    Bucket {
        /// Theoretical arrival time in units of 1/`requests` nanoseconds.
        tat_scaled: u128,
    },
}

/// The outcome of one counter for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the call fits within the limit.
    pub admitted: bool,
    /// Requests still allowed after this call (0 when denied).
    pub remaining: u64,
    /// When admitted: the time until the counter is back to its full allowance if no more
    /// calls arrive. When denied: the time after which the same call would be admitted
    /// (for a call that can never fit, the time to full allowance).
    pub reset_after: Nanos,
}

/// Decides one call of `cost` hits against `limit` at `now`, given the counter's stored
/// `state` (`None` = never seen). Returns the verdict and the state to store if the call is
/// committed. A `cost` of 0 is a check: it is judged as a cost-1 call (as a cost-0 one under
/// [`Recording::AlwaysCompat`]) and changes nothing.
///
/// A limit that records every charge ([`Recording::records`]) returns a state for a denied
/// charge too: the hits counted past the limit, to be stored whatever the call's fate (an
/// admitted charge is committed as any other: only if its call is); its verdict's hint is then
/// the exact time after which the same call fits that state.
pub fn decide(
    limit: &Limit,
    state: Option<&State>,
    now: Nanos,
    cost: u64,
) -> (Verdict, Option<State>) {
    let (verdict, next) = judge(limit, state, now, cost);
    if verdict.admitted || cost == 0 || !limit.recording.records() {
        return (verdict, next);
    }
    // Counted as if there were no bound; a charge not even that admits (a count past 2^48, a
    // bucket's arrival time past what it can store) is refused and records nothing.
    let Some(over) = judge(&limit.unbounded(), state, now, cost).1 else {
        return (verdict, None);
    };
    let again = judge(limit, Some(&over), now, cost).0;
    let verdict = Verdict {
        reset_after: again.reset_after,
        ..verdict
    };
    (verdict, Some(over))
}

/// The algorithm's own judgment of one call; see [`decide`].
fn judge(limit: &Limit, state: Option<&State>, now: Nanos, cost: u64) -> (Verdict, Option<State>) {
    match limit.algorithm {
        Algorithm::FixedWindow => fixed_window::decide(limit, state, now, cost),
        Algorithm::SlidingWindow => sliding_window::decide(limit, state, now, cost),
        Algorithm::SlidingLog => sliding_log::decide(limit, state, now, cost),
        Algorithm::TokenBucket => token_bucket::decide(limit, state, now, cost),
    }
}

/// The most hits a call could be admitted for at `now` (0 if not even one fits): what a
/// check (cost 0) reports as remaining.
pub fn available(limit: &Limit, state: Option<&State>, now: Nanos) -> u64 {
    match decide(limit, state, now, 0) {
        (verdict, _) if verdict.admitted => verdict.remaining,
        _ => 0,
    }
}

/// Whether `state` is equivalent to a counter never seen at `now` (safe to reclaim).
pub fn is_idle(limit: &Limit, state: &State, now: Nanos) -> bool {
    match limit.algorithm {
        Algorithm::FixedWindow => fixed_window::is_idle(limit, state, now),
        Algorithm::SlidingWindow => sliding_window::is_idle(limit, state, now),
        Algorithm::SlidingLog => sliding_log::is_idle(limit, state, now),
        Algorithm::TokenBucket => token_bucket::is_idle(limit, state, now),
    }
}

/// The earliest time at which `state` is idle if no call arrives: [`is_idle`] holds at `now`
/// exactly when `now >= idle_at(limit, state)`. Stores keep this one number per counter, so
/// reclaiming idle counters needs neither the limit nor the algorithm.
pub fn idle_at(limit: &Limit, state: &State) -> Nanos {
    match limit.algorithm {
        Algorithm::FixedWindow => fixed_window::idle_at(limit, state),
        Algorithm::SlidingWindow => sliding_window::idle_at(limit, state),
        Algorithm::SlidingLog => sliding_log::idle_at(limit, state),
        Algorithm::TokenBucket => token_bucket::idle_at(limit, state),
    }
}

/// `at` as a [`Nanos`], saturated: an instant past the end of time never comes.
fn saturate(at: u128) -> Nanos {
    Nanos::try_from(at).unwrap_or(Nanos::MAX)
}

/// Start of the epoch-aligned window of length `window` that contains `now`.
pub fn window_start(now: Nanos, window: Nanos) -> Nanos {
    now - now % window
}

/// Nanoseconds from `now` until the instant `at` (0 if it has passed), saturated into [`Nanos`].
fn until(at: u128, now: Nanos) -> Nanos {
    Nanos::try_from(at.saturating_sub(u128::from(now))).unwrap_or(Nanos::MAX)
}
