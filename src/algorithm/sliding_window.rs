//! Sliding window: the previous aligned window's count, weighted by its overlap, plus the current.

use super::{Limit, State, Verdict, until, window_start};
use crate::clock::Nanos;

/// The (window start, previous, current) counts in force at `now`, rolling the stored buckets
/// forward into now's aligned window. A stored window later than now's (the clock stepped
/// back) is kept as it is: the latest window seen goes on counting.
fn roll(state: Option<&State>, now: Nanos, window: Nanos) -> (Nanos, u64, u64) {
    let start = window_start(now, window);
    match state {
        Some(&State::Sliding {
            window_start: s,
            previous,
            current,
        }) if s >= start => (s, previous, current),
        Some(&State::Sliding {
            window_start: s,
            current,
            ..
        }) if u128::from(s) + u128::from(window) == u128::from(start) => (start, current, 0),
        _ => (start, 0, 0),
    }
}

/// Room left for the previous bucket's weighted share once `current + cost` is counted, scaled
/// by the window; `None` when `current + cost` alone exceeds `requests`.
fn room(requests: u64, current: u64, cost: u64, window: u128) -> Option<u128> {
    let left = u128::from(requests).checked_sub(u128::from(current) + u128::from(cost))?;
    Some(left * window)
}

/// Smallest offset x in [0, window) into a window at which `previous × (window − x) <= room`.
fn first_fit_in(previous: u64, room: Option<u128>, window: u128) -> Option<u128> {
    let room = room?;
    if previous == 0 {
        return Some(0);
    }
    // The previous bucket's weight (window − x) may be at most floor(room / previous).
    let weight = room / u128::from(previous);
    match weight {
        0 => None,
        w if w >= window => Some(0),
        w => Some(window - w),
    }
}

/// The exact earliest offset from the current window's start at which a call of `cost` fits,
/// given the buckets in force and no further calls; `None` if it never fits (cost > requests).
/// The estimate only falls as time passes, so the first fit is found in this window, or in
/// the next (where `current` becomes the previous bucket), or at the start of the one after.
fn earliest_fit(
    previous: u64,
    current: u64,
    cost: u64,
    requests: u64,
    window: u128,
) -> Option<u128> {
    let empty = room(requests, 0, cost, window)?;
    first_fit_in(previous, room(requests, current, cost, window), window)
        .or_else(|| first_fit_in(current, Some(empty), window).map(|x| window + x))
        .or(Some(2 * window))
}

/// Decides one call; see [`super::decide`].
pub(super) fn decide(
    limit: &Limit,
    state: Option<&State>,
    now: Nanos,
    cost: u64,
) -> (Verdict, Option<State>) {
    let window = limit.window.max(1);
    let w = u128::from(window);
    let (start, previous, current) = roll(state, now, window);
    // Before `start` only after a clock step back: judge at the stored window's start, where
    // the previous bucket weighs most, so a step back never over-admits.
    let elapsed = u128::from(now.saturating_sub(start));
    let at = |offset: u128| until(u128::from(start) + offset, now);
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
    let requests = limit.requests;
    // A check (cost 0) is judged as a single hit would be (as none under envoyproxy/ratelimit's
    // judgment).
    let charge = limit.recording.judged(cost);
    let weighted = u128::from(previous) * (w - elapsed);

    let fits = room(requests, current, charge, w).is_some_and(|r| weighted <= r);
    if !fits {
        // Never fitting (cost > requests): report when the estimate is back to 0, which is
        // never now, as the call was denied.
        let never = if current > 0 { at(2 * w) } else { at(w) };
        let retry = earliest_fit(previous, current, charge, requests, w);
        return denied(retry.map_or(never, at));
    }
    // remaining = floor(requests − estimate − cost), computed exactly in window-scaled units.
    let left = room(requests, current, cost, w).map_or(0, |r| r - weighted) / w;
    let remaining = Nanos::try_from(left).unwrap_or(Nanos::MAX);
    // Fits, so current + cost <= requests: no overflow.
    let current = current + cost;
    // The estimate is 0 once every counted hit has aged out: the current bucket still weighs
    // until the end of the next window, the previous one until the end of this window.
    let reset_after = match (previous, current) {
        (_, 1..) => at(2 * w),
        (1.., 0) => at(w),
        (0, 0) => 0,
    };
    let verdict = Verdict {
        admitted: true,
        remaining,
        reset_after,
    };
    let next = (cost > 0).then_some(State::Sliding {
        window_start: start,
        previous,
        current,
    });
    (verdict, next)
}

/// Whether both buckets in force at `now` are empty.
pub(super) fn is_idle(limit: &Limit, state: &State, now: Nanos) -> bool {
    matches!(roll(Some(state), now, limit.window.max(1)), (_, 0, 0))
}

/// When both buckets have aged out: the current one weighs until the end of the next window,
/// the previous one until the end of this one; see [`super::idle_at`].
pub(super) fn idle_at(limit: &Limit, state: &State) -> Nanos {
    let w = u128::from(limit.window.max(1));
    match *state {
        State::Sliding {
            window_start,
            current,
            ..
        } if current > 0 => super::saturate(u128::from(window_start) + 2 * w),
        State::Sliding {
            window_start,
            previous,
            ..
        } if previous > 0 => super::saturate(u128::from(window_start) + w),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::algorithm::testing::{T0, assert_exact_retry, call, per_minute_of, v};
    use crate::clock::{MILLI, SECOND};

    /// One window.
    const W: Nanos = 60 * SECOND;

    /// `n` requests per minute.
    fn per_minute(n: u64) -> Limit {
        per_minute_of(Algorithm::SlidingWindow, n)
    }

    /// The earliest fit, worked by hand: now, later in this window, the next one, the one after.
    #[test]
    fn earliest_fit_by_hand() {
        let w = 60;
        assert_eq!(earliest_fit(0, 0, 1, 10, w), Some(0));
        // 10 × (60 − x)/60 + 1 <= 10 first holds at x = 6.
        assert_eq!(earliest_fit(10, 0, 1, 10, w), Some(6));
        // Full current bucket: wait for the next window, where it weighs 10 × (60 − x)/60.
        assert_eq!(earliest_fit(10, 10, 1, 10, w), Some(66));
        // Rounding: 7 × (60 − x) <= 3 × 60 first holds at x = 35 (x = 34 gives 182).
        assert_eq!(earliest_fit(7, 0, 7, 10, w), Some(35));
        // The whole allowance is needed: only once both buckets are empty.
        assert_eq!(earliest_fit(5, 10, 10, 10, w), Some(120));
        assert_eq!(earliest_fit(1, 0, 1, 1, w), Some(60));
        assert_eq!(earliest_fit(0, 0, 11, 10, w), None);
        let (m, wm) = (u64::MAX, u128::from(u64::MAX));
        assert_eq!(earliest_fit(m, m, m, m, wm), Some(2 * wm));
    }

    /// Exactly N calls fit in a fresh window, then calls are denied with an exact hint.
    #[test]
    fn admits_exactly_n_then_denies() {
        let (l, mut st) = (per_minute(3), None);
        for left in [2, 1, 0] {
            assert_eq!(
                call(&l, &mut st, T0 + SECOND, 1),
                v(true, left, 2 * W - SECOND)
            );
        }
        // Next window: 3 × (60 − x)/60 + 1 <= 3 first at x = 20 s.
        assert_eq!(
            call(&l, &mut st, T0 + 2 * SECOND, 1),
            v(false, 0, 78 * SECOND)
        );
    }

    /// The previous window's hits weigh less and less: capacity returns gradually.
    #[test]
    fn capacity_returns_gradually() {
        let (l, mut st) = (per_minute(10), None);
        assert!(call(&l, &mut st, T0, 10).admitted);
        let check = |now| decide(&l, st.as_ref(), now, 0).0;
        assert!(!check(T0 + W).admitted);
        assert_eq!(check(T0 + W + 30 * SECOND).remaining, 5);
        assert_eq!(check(T0 + W + 30 * SECOND - 1).remaining, 4);
        assert_eq!(check(T0 + W + 54 * SECOND).remaining, 9);
        assert_eq!(check(T0 + 2 * W).remaining, 10);
    }

    /// Hammering while denied neither counts nor moves the retry time.
    #[test]
    fn denied_calls_do_not_extend_penalty() {
        let (l, mut st) = (per_minute(2), None);
        assert!(call(&l, &mut st, T0, 2).admitted);
        let before = st.clone();
        for now in (1..90).map(|i| T0 + i * SECOND) {
            assert_eq!(
                now + call(&l, &mut st, now, 1).reset_after,
                T0 + W + 30 * SECOND
            );
        }
        assert_eq!(st, before);
    }

    /// The retry hint is exact within this window, in the next, and two windows on.
    #[test]
    fn retry_hint_is_exact() {
        let (l, mut st) = (per_minute(7), None);
        assert!(call(&l, &mut st, T0 + 3, 5).admitted);
        assert!(call(&l, &mut st, T0 + W + 11, 2).admitted);
        let mut checked = 0;
        for now in [T0 + W + 11, T0 + W + 20 * SECOND + 1, T0 + 2 * W - 1] {
            for cost in (1..=7).filter(|&c| !decide(&l, st.as_ref(), now, c).0.admitted) {
                assert_exact_retry(&l, &st, now, cost);
                checked += 1;
            }
        }
        assert_eq!(checked, 7 + 6 + 3);
        assert_eq!(assert_exact_retry(&l, &st, T0 + W + 11, 7), 2 * W - 11);
    }

    /// Cost above one consumes that many; cost above the limit never fits, hint to empty.
    #[test]
    fn costs_above_one_and_above_capacity() {
        let (l, mut st) = (per_minute(10), None);
        assert_eq!(call(&l, &mut st, T0, 7).remaining, 3);
        assert!(!call(&l, &mut st, T0, 4).admitted);
        assert_eq!(
            call(&l, &mut st, T0 + SECOND, 11),
            v(false, 0, 2 * W - SECOND)
        );
        assert_eq!(
            call(&l, &mut None, T0 + SECOND, 11),
            v(false, 0, W - SECOND)
        );
    }

    /// Cost 0 is judged like a single hit, reports the unconsumed remaining, and stores nothing.
    #[test]
    fn zero_cost_is_a_check() {
        let (l, mut st) = (per_minute(2), None);
        assert_eq!(decide(&l, None, T0, 0), (v(true, 2, 0), None));
        assert!(call(&l, &mut st, T0, 1).admitted);
        let check = decide(&l, st.as_ref(), T0 + W + 15 * SECOND, 0);
        assert_eq!(check, (v(true, 1, 45 * SECOND), None));
        assert!(call(&l, &mut st, T0, 1).admitted);
        let check = decide(&l, st.as_ref(), T0 + W, 0);
        assert_eq!(check, (v(false, 0, 30 * SECOND), None));
    }

    /// Extreme costs, limits, windows and times neither panic nor over-admit.
    #[test]
    fn huge_values_do_not_panic() {
        let m = u64::MAX;
        let wide = Limit {
            window: m,
            ..per_minute(m)
        };
        for now in [0, 1, T0, m - 1, m] {
            for l in [per_minute(m), wide, per_minute(3)] {
                let mut st = None;
                let first = call(&l, &mut st, now, m);
                assert_eq!(first.admitted, l.requests == m);
                assert!(!first.admitted || !call(&l, &mut st, now, 1).admitted);
                call(&l, &mut st, 0, m);
                decide(&l, st.as_ref(), m, 0);
            }
        }
    }

    /// A clock stepping back keeps the latest window seen instead of freeing its counts.
    #[test]
    fn clock_going_backwards_never_over_admits() {
        let (l, mut st) = (per_minute(1), None);
        assert!(call(&l, &mut st, T0 + W + 5 * SECOND, 1).admitted);
        assert_eq!(call(&l, &mut st, T0, 1), v(false, 0, 3 * W));
    }

    /// A counter is idle once both buckets in force are empty, and not a nanosecond earlier.
    #[test]
    fn idle_when_both_buckets_empty() {
        let l = per_minute(5);
        let st = |previous, current| State::Sliding {
            window_start: T0,
            previous,
            current,
        };
        assert!(!is_idle(&l, &st(3, 2), T0 + 2 * W - 1));
        assert!(is_idle(&l, &st(3, 2), T0 + 2 * W));
        assert!(!is_idle(&l, &st(3, 0), T0 + W - 1));
        assert!(is_idle(&l, &st(3, 0), T0 + W));
    }

    /// N just before a minute boundary and N just after: only N pass in total.
    #[test]
    fn edge_burst_admits_only_n() {
        let (l, mut st) = (per_minute(10), None);
        let mut burst = |now| {
            (0..10)
                .filter(|_| call(&l, &mut st, now, 1).admitted)
                .count()
        };
        assert_eq!((burst(T0 - MILLI), burst(T0 + MILLI)), (10, 0));
    }
}
