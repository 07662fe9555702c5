//! One stream's share of a limit in whole tokens, the fill interval it is counted in, and how a
//! share becomes (and is read back from) the strategy Envoy enforces.

use std::num::NonZeroU32;

use crate::clock::SECOND;
use crate::rules::bucket::SharedRate;

use crate::rlqs::assign::Strategy;

/// Below this many tokens per fill interval a whole limit is split too coarsely; the interval
/// grows until the limit holds at least this many.
const TOKENS_PER_INTERVAL: f64 = 100.0;

/// The longest fill interval for a limit whose window is shorter. Envoy refills its bucket
/// continuously (`tokens_per_fill / fill_interval` a second), so a longer interval changes only
/// how finely shares are counted, not how fast tokens come back; the cap keeps intervals readable.
const LONGEST_INTERVAL_SECONDS: u64 = 60;

/// A limit as the book hands it out: `tokens` per `interval` seconds and `burst` tokens at most,
/// already cut to this replica's portion. The interval is fixed by the limit alone, so every
/// share of it is a number of tokens per the same interval and a changed share always changes
/// `tokens_per_fill` (Envoy ignores a change of the interval's whole seconds alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grid {
    /// Whole seconds between fills.
    pub interval: u32,
    /// Tokens per interval, summed over every share (`floor(rate × interval × portion)`).
    pub tokens: u64,
    /// Burst, summed over every share.
    pub burst: u64,
}

impl Grid {
    /// The grid of `rate`, of which this replica may hand out `portion` (0..=1).
    pub(crate) fn of(rate: &SharedRate, portion: f64) -> Grid {
        let per_second = rate.per_second();
        let window_seconds = (rate.window / SECOND).max(LONGEST_INTERVAL_SECONDS) as f64;
        let wanted = (TOKENS_PER_INTERVAL / per_second)
            .ceil()
            .clamp(1.0, window_seconds);
        // A limit under one request per whole window second still needs one token per fill.
        let interval = wanted.max((1.0 / per_second).ceil()).min(u32::MAX as f64);
        let interval = interval as u32;
        // In integers: a float product could land a hair above a whole number of tokens.
        let whole =
            rate.requests as u128 * interval as u128 * SECOND as u128 / rate.window.max(1) as u128;
        let cut = |n: u128| {
            let n = n.min(u32::MAX as u128) as u64;
            if portion >= 1.0 {
                n
            } else {
                (n as f64 * portion.max(0.0)).floor() as u64
            }
        };
        Grid {
            interval,
            tokens: cut(whole),
            burst: cut(rate.burst as u128),
        }
    }
}

/// A share of a grid: tokens per fill and burst. `(0, 0)` is `DENY_ALL` (or nothing at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Share {
    /// Tokens per fill interval.
    pub tokens: u64,
    /// Burst (`max_tokens`).
    pub burst: u64,
}

impl Share {
    /// More than any limit: what `ALLOW_ALL` takes of one.
    pub(crate) const ALL: Share = Share {
        tokens: u64::MAX,
        burst: u64::MAX,
    };

    /// What `held` takes of a grid with `interval` (`None`: nothing). A token bucket of another
    /// interval (from before a reload) is rounded up, so the sum over-states, never under-states.
    pub(crate) fn of(held: Option<Strategy>, interval: u32) -> Share {
        match held {
            None | Some(Strategy::DenyAll) => Share::default(),
            Some(Strategy::AllowAll) => Share::ALL,
            Some(Strategy::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
            }) => {
                let fill = fill_interval_seconds.get() as u64;
                let tokens = (tokens_per_fill.get() as u64 * interval as u64).div_ceil(fill);
                Share {
                    tokens,
                    burst: max_tokens.get() as u64,
                }
            }
        }
    }

    /// The strategy that hands out this share: a token bucket, or `DENY_ALL` when either part is
    /// zero (Envoy requires both to be positive).
    pub(crate) fn strategy(self, interval: u32) -> Strategy {
        let tokens = NonZeroU32::new(self.tokens.min(u32::MAX as u64) as u32);
        let burst = NonZeroU32::new(self.burst.min(u32::MAX as u64) as u32);
        match (tokens, burst, NonZeroU32::new(interval)) {
            (Some(tokens_per_fill), Some(max_tokens), Some(fill_interval_seconds)) => {
                Strategy::TokenBucket {
                    max_tokens,
                    tokens_per_fill,
                    fill_interval_seconds,
                }
            }
            _ => Strategy::DenyAll,
        }
    }

    /// Each part the smaller of the two.
    pub(crate) fn min(self, other: Share) -> Share {
        Share {
            tokens: self.tokens.min(other.tokens),
            burst: self.burst.min(other.burst),
        }
    }

    /// Both parts at most `other`'s.
    pub(crate) fn within(self, other: Share) -> bool {
        self.tokens <= other.tokens && self.burst <= other.burst
    }
}

/// Whether moving from `held` to `target` is worth a new strategy: Envoy rebuilds its bucket for
/// a changed one, so small moves (under a tenth, and under two tokens) keep the old strategy.
/// Going to or from nothing, or to another interval, always counts.
pub(crate) fn material(held: Option<Strategy>, target: Strategy, interval: u32) -> bool {
    let Some(held) = held else { return true };
    match (held, target) {
        (a, b) if a == b => false,
        (
            Strategy::TokenBucket {
                fill_interval_seconds: h,
                ..
            },
            Strategy::TokenBucket {
                fill_interval_seconds: t,
                ..
            },
        ) if h == t && t.get() == interval => {
            let (h, t) = (
                Share::of(Some(held), interval),
                Share::of(Some(target), interval),
            );
            moved(h.tokens, t.tokens) || moved(h.burst, t.burst)
        }
        _ => true,
    }
}

fn moved(from: u64, to: u64) -> bool {
    from.abs_diff(to) >= (from / 10).max(2)
}

/// `target`, altered if Envoy would take it for `held`: Envoy compares `max_tokens`,
/// `tokens_per_fill` and only the nanoseconds of the interval, so a strategy differing in the
/// interval's seconds alone would leave the old rate in force. One token less makes it differ
/// (never more: a changed share must still fit); at one token each, `DENY_ALL`.
pub(crate) fn distinct(held: Option<Strategy>, target: Strategy) -> Strategy {
    match (held, target) {
        (
            Some(Strategy::TokenBucket {
                max_tokens: hm,
                tokens_per_fill: ht,
                fill_interval_seconds: hi,
            }),
            Strategy::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
            },
        ) if hm == max_tokens && ht == tokens_per_fill && hi != fill_interval_seconds => {
            let less = |n: NonZeroU32| NonZeroU32::new(n.get() - 1);
            match (less(tokens_per_fill), less(max_tokens)) {
                (Some(tokens_per_fill), _) => Strategy::TokenBucket {
                    max_tokens,
                    tokens_per_fill,
                    fill_interval_seconds,
                },
                (None, Some(max_tokens)) => Strategy::TokenBucket {
                    max_tokens,
                    tokens_per_fill,
                    fill_interval_seconds,
                },
                (None, None) => Strategy::DenyAll,
            }
        }
        _ => target,
    }
}

#[cfg(test)]
mod tests;
