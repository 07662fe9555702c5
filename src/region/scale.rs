//! A limit cut to a region's portion: what the region's store enforces for a `scope: global`
//! limit.
//!
//! A window algorithm counts hits against `requests`, so its part is `floor(portion ×
//! requests)`; its counters hold hit counts and times, which mean the same under any limit. A
//! token bucket keeps its state as an arrival time scaled by `requests`, so cutting `requests`
//! would misread it: its window is stretched instead (`window / portion`, the same rate
//! `portion × requests / window`) and its burst cut to `floor(portion × burst)`. The time until
//! the bucket is full is unchanged, so a portion that moves keeps the bucket's fill ratio, as
//! Envoy keeps an RLQS token bucket's: a grow from `p` to `q` adds at most `(q − p) × burst`
//! tokens, a shrink adds none. Parts round down: a portion never admits more than its share.

use crate::algorithm::{Algorithm, Limit};

/// A whole limit, in parts per million.
pub const WHOLE_PPM: u32 = 1_000_000;

/// The longest window a stretched bucket may have (about 100 years): past it the portion is too
/// small to refill even one hit in any real time, and the limit admits nothing.
const LONGEST_WINDOW: u128 = 100 * 365 * 86_400 * 1_000_000_000;

/// `limit` cut to `ppm` parts per million of itself (a whole limit unchanged, none admits
/// nothing).
pub fn scaled(limit: &Limit, ppm: u32) -> Limit {
    if ppm >= WHOLE_PPM {
        return *limit;
    }
    let part = |n: u64| (u128::from(n) * u128::from(ppm) / u128::from(WHOLE_PPM)) as u64;
    match limit.algorithm {
        Algorithm::TokenBucket => {
            let window = u128::from(limit.window) * u128::from(WHOLE_PPM);
            let stretched = window.div_ceil(u128::from(ppm.max(1)));
            let burst = part(limit.burst);
            if ppm == 0 || burst == 0 || stretched > LONGEST_WINDOW {
                return Limit {
                    requests: 0,
                    burst: 0,
                    ..*limit
                };
            }
            Limit {
                window: stretched as u64,
                burst,
                ..*limit
            }
        }
        _ => {
            let requests = part(limit.requests);
            Limit {
                requests,
                burst: requests,
                ..*limit
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{State, decide};
    use crate::clock::SECOND;

    /// `requests` a second and `burst` with `algorithm`.
    fn limit(algorithm: Algorithm, requests: u64, burst: u64) -> Limit {
        let (origin, window) = (0, SECOND);
        Limit {
            origin,
            window,
            burst,
            requests,
            algorithm,
            recording: Default::default(),
        }
    }

    /// Window algorithms count their part of the requests, rounded down; a whole portion is
    /// the limit itself, none admits nothing.
    #[test]
    fn window_limits_take_their_part_of_the_requests() {
        let l = limit(Algorithm::SlidingWindow, 100, 100);
        assert_eq!(scaled(&l, 333_334).requests, 33);
        assert_eq!(scaled(&l, 333_334).burst, 33);
        assert_eq!(scaled(&l, WHOLE_PPM), l);
        assert_eq!(scaled(&l, 0).requests, 0);
        assert_eq!(scaled(&l, 1).window, l.window);
    }

    /// A bucket keeps its refill count and gets a longer window (the same part of the rate)
    /// and its part of the burst.
    #[test]
    fn buckets_stretch_their_window() {
        let l = limit(Algorithm::TokenBucket, 100, 50);
        let third = scaled(&l, 250_000);
        assert_eq!(
            (third.requests, third.window, third.burst),
            (100, 4 * SECOND, 12)
        );
        assert_eq!(scaled(&l, 10).requests, 0, "less than one hit of burst");
        assert_eq!(scaled(&l, 0).requests, 0);
    }

    /// A bucket emptied under one portion is as empty (in fill ratio) under another: half
    /// full stays half full, so a grow adds at most the growth of the burst.
    #[test]
    fn a_moved_portion_keeps_the_fill_ratio() {
        let l = limit(Algorithm::TokenBucket, 100, 100);
        let (small, large) = (scaled(&l, 200_000), scaled(&l, 400_000));
        let mut state: Option<State> = None;
        let (verdict, next) = decide(&small, None, 0, 10);
        assert!(verdict.admitted);
        state = next.or(state);
        let left = |limit: &Limit| decide(limit, state.as_ref(), 0, 0).0.remaining;
        assert_eq!(left(&small), 10, "half of 20 left");
        assert_eq!(left(&large), 20, "half of 40 left");
    }
}
