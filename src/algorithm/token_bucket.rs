//! Token bucket as GCRA: a single scaled arrival time per key, in exact integer arithmetic.
//!
//! Time is scaled by `requests` (units of 1/`requests` ns), so one hit's emission interval is
//! exactly `window` and the tolerance is exactly `burst × window`: no rate is ever rounded.

use super::{Limit, State, Verdict, until, window_start};
use crate::clock::Nanos;

/// Decides one call; see [`super::decide`].
pub(super) fn decide(
    limit: &Limit,
    state: Option<&State>,
    now: Nanos,
    cost: u64,
) -> (Verdict, Option<State>) {
    let window = u128::from(limit.window.max(1));
    let rate = u128::from(limit.requests);
    let now_s = u128::from(now) * rate;
    let tolerance = u128::from(limit.burst) * window;
    let stored = match state {
        Some(&State::Bucket { tat_scaled }) => tat_scaled,
        _ => 0,
    };
    // How far the bucket is from full, in scaled time. A stored arrival time ahead of now
    // (including after a clock step back) simply keeps the bucket that much emptier.
    let debt = stored.saturating_sub(now_s);
    // Scaled time back to nanoseconds, rounded up so no hint ever comes early.
    let to_nanos =
        |scaled: u128| Nanos::try_from(scaled.div_ceil(rate.max(1))).unwrap_or(Nanos::MAX);
    let denied = |reset_after| {
        (
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after,
            },
            None,
        )
    };
    // A check (cost 0) is judged as a single hit would be (as none under envoyproxy/ratelimit's
    // judgment).
    let need = u128::from(limit.recording.judged(cost)) * window;

    if rate == 0 || need > tolerance {
        // Never fits: report the time until the bucket is full, or else the window's end.
        let full = if rate == 0 { 0 } else { to_nanos(debt) };
        let end = u128::from(window_start(now, limit.window.max(1))) + window;
        return denied(if full > 0 { full } else { until(end, now) });
    }
    if debt > tolerance - need {
        // Fits once now_s has caught up: the smallest whole ns where debt + need <= tolerance.
        return denied(to_nanos(debt - (tolerance - need)));
    }
    // Here debt + need <= tolerance. Storing the new arrival time must still fit in u128:
    // only absurd limits (burst × window near 2^128 late in time) fail that, and such a call
    // is denied (hint: time to full) rather than stored wrapped or saturated.
    let after = debt + need;
    let Some(tat_scaled) = now_s.checked_add(after) else {
        return denied(to_nanos(debt).max(1));
    };
    if cost == 0 {
        let remaining = Nanos::try_from((tolerance - debt) / window).unwrap_or(Nanos::MAX);
        let verdict = Verdict {
            admitted: true,
            remaining,
            reset_after: to_nanos(debt),
        };
        return (verdict, None);
    }
    // At most `burst`, since `after` includes at least one emission interval.
    let remaining = Nanos::try_from((tolerance - after) / window).unwrap_or(Nanos::MAX);
    let verdict = Verdict {
        admitted: true,
        remaining,
        reset_after: to_nanos(after),
    };
    (verdict, Some(State::Bucket { tat_scaled }))
}

/// Whether the bucket has refilled completely by `now` (or can never refill: `requests` 0).
pub(super) fn is_idle(limit: &Limit, state: &State, now: Nanos) -> bool {
    match *state {
        State::Bucket { tat_scaled } => {
            limit.requests == 0 || tat_scaled <= u128::from(now) * u128::from(limit.requests)
        }
        _ => true,
    }
}

/// When the bucket is full again: the first whole nanosecond at or past the arrival time;
/// see [`super::idle_at`].
pub(super) fn idle_at(limit: &Limit, state: &State) -> Nanos {
    match *state {
        State::Bucket { tat_scaled } if limit.requests > 0 => {
            super::saturate(tat_scaled.div_ceil(u128::from(limit.requests)))
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::algorithm::testing::{T0, assert_exact_retry, call, v};
    use crate::clock::{MILLI, SECOND};

    /// Refill `n` per minute into a bucket of `burst`.
    fn bucket(n: u64, burst: u64) -> Limit {
        let algorithm = Algorithm::TokenBucket;
        Limit {
            algorithm,
            requests: n,
            window: 60 * SECOND,
            burst,
            origin: 0,
            recording: Default::default(),
        }
    }

    /// A full bucket admits exactly `burst` at once, then denies until a token drips back.
    #[test]
    fn admits_exactly_burst_then_denies() {
        let (l, mut st) = (bucket(6, 3), None);
        for (left, reset) in [(2, 10), (1, 20), (0, 30)] {
            assert_eq!(call(&l, &mut st, T0, 1), v(true, left, reset * SECOND));
        }
        assert_eq!(call(&l, &mut st, T0, 1), v(false, 0, 10 * SECOND));
    }

    /// Tokens come back one emission interval at a time, up to the burst and no further.
    #[test]
    fn capacity_returns_gradually() {
        let (l, mut st) = (bucket(6, 3), None);
        assert!(call(&l, &mut st, T0, 3).admitted);
        let left = |now| decide(&l, st.as_ref(), now, 0).0.remaining;
        assert_eq!((left(T0 + 10 * SECOND - 1), left(T0 + 10 * SECOND)), (0, 1));
        assert_eq!((left(T0 + 25 * SECOND), left(T0 + 99 * SECOND)), (2, 3));
        assert!(!call(&l, &mut st, T0 + 20 * SECOND - 1, 2).admitted);
        assert!(call(&l, &mut st, T0 + 20 * SECOND, 2).admitted);
    }

    /// Hammering while denied neither takes tokens nor moves the retry time.
    #[test]
    fn denied_calls_do_not_extend_penalty() {
        let (l, mut st) = (bucket(1, 1), None);
        assert!(call(&l, &mut st, T0, 1).admitted);
        let before = st.clone();
        for now in (1..100).map(|i| T0 + i * SECOND / 2) {
            assert_eq!(
                now + call(&l, &mut st, now, 1).reset_after,
                T0 + 60 * SECOND
            );
        }
        assert_eq!(st, before);
    }

    /// The retry hint is exact, including a rate that does not divide the window evenly.
    #[test]
    fn retry_hint_is_exact() {
        let (l, mut st) = (bucket(7, 4), None);
        assert!(call(&l, &mut st, T0 + 3, 4).admitted);
        let mut checked = 0;
        for now in [T0 + 3, T0 + 5 * SECOND + 1, T0 + 17 * SECOND] {
            for cost in (1..=4).filter(|&c| !decide(&l, st.as_ref(), now, c).0.admitted) {
                assert_exact_retry(&l, &st, now, cost);
                checked += 1;
            }
        }
        assert_eq!(checked, 4 + 4 + 3);
        // 60 s / 7 is not whole: the hint rounds up to the first nanosecond that fits.
        assert_eq!(assert_exact_retry(&l, &st, T0 + 3, 1), 8_571_428_572);
    }

    /// Cost above one takes that many tokens; cost above the burst never fits, hint to full.
    #[test]
    fn costs_above_one_and_above_capacity() {
        let (l, mut st) = (bucket(60, 10), None);
        assert_eq!(call(&l, &mut st, T0, 7).remaining, 3);
        assert!(!call(&l, &mut st, T0, 4).admitted);
        assert_eq!(call(&l, &mut st, T0, 11), v(false, 0, 7 * SECOND));
        assert_eq!(
            call(&l, &mut None, T0 + SECOND, 11),
            v(false, 0, 59 * SECOND)
        );
        assert!(!call(&l, &mut None, T0, 1 + (u64::MAX >> 1)).admitted);
    }

    /// Cost 0 is judged like a single hit, reports the unconsumed remaining, and stores nothing.
    #[test]
    fn zero_cost_is_a_check() {
        let (l, mut st) = (bucket(6, 2), None);
        assert_eq!(decide(&l, None, T0, 0), (v(true, 2, 0), None));
        assert!(call(&l, &mut st, T0, 1).admitted);
        let check = decide(&l, st.as_ref(), T0 + SECOND, 0);
        assert_eq!(check, (v(true, 1, 9 * SECOND), None));
        assert!(call(&l, &mut st, T0, 1).admitted);
        let check = decide(&l, st.as_ref(), T0 + SECOND, 0);
        assert_eq!(check, (v(false, 0, 9 * SECOND), None));
    }

    /// A refill of 0 requests blocks every call; so does a bucket of 0.
    #[test]
    fn zero_requests_blocks_everything() {
        for (l, cost) in [(bucket(0, 5), 0), (bucket(0, 5), 1), (bucket(5, 0), 1)] {
            let denied = (v(false, 0, 50 * SECOND), None);
            assert_eq!(decide(&l, None, T0 + 10 * SECOND, cost), denied);
        }
    }

    /// Extreme costs, rates, bursts, windows and times neither panic nor over-admit.
    #[test]
    fn huge_values_do_not_panic() {
        let m = u64::MAX;
        let wide = Limit {
            window: m,
            ..bucket(m, m)
        };
        let far = State::Bucket {
            tat_scaled: u128::MAX,
        };
        for now in [0, 1, T0, m - 1, m] {
            for l in [bucket(m, m), bucket(1, m), bucket(m, 1), wide] {
                let mut st = None;
                let first = call(&l, &mut st, now, m);
                assert!(!first.admitted || !call(&l, &mut st, now, 1).admitted);
                call(&l, &mut st, 0, m);
                decide(&l, st.as_ref(), m, 0);
                assert!(!decide(&l, Some(&far), now, 1).0.admitted && !is_idle(&l, &far, now));
            }
        }
    }

    /// A clock stepping back keeps the arrival time already reached instead of refilling.
    #[test]
    fn clock_going_backwards_never_over_admits() {
        let (l, mut st) = (bucket(1, 1), None);
        assert!(call(&l, &mut st, T0 + 100 * SECOND, 1).admitted);
        assert_eq!(call(&l, &mut st, T0, 1), v(false, 0, 160 * SECOND));
    }

    /// A bucket is idle exactly when it has refilled completely.
    #[test]
    fn idle_when_full() {
        let (l, st) = (
            bucket(6, 3),
            State::Bucket {
                tat_scaled: u128::from(T0 + 20 * SECOND) * 6,
            },
        );
        assert!(!is_idle(&l, &st, T0 + 20 * SECOND - 1));
        assert!(is_idle(&l, &st, T0 + 20 * SECOND));
        assert!(is_idle(&bucket(0, 3), &st, T0));
    }

    /// N just before a minute boundary and N just after with burst N: only N pass in total.
    #[test]
    fn edge_burst_admits_only_n() {
        let (l, mut st) = (bucket(10, 10), None);
        let mut burst = |now| {
            (0..10)
                .filter(|_| call(&l, &mut st, now, 1).admitted)
                .count()
        };
        assert_eq!((burst(T0 - MILLI), burst(T0 + MILLI)), (10, 0));
    }
}
