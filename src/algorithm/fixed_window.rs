//! Fixed window: epoch-aligned windows (or calendar ones, from the limit's origin), each
//! counted from zero, as envoyproxy/ratelimit counts.

use super::{Limit, State, Verdict, until};
use crate::clock::Nanos;

/// Decides one call; see [`super::decide`].
pub(super) fn decide(
    limit: &Limit,
    state: Option<&State>,
    now: Nanos,
    cost: u64,
) -> (Verdict, Option<State>) {
    let window = limit.window.max(1);
    let current = limit.window_start(now);
    // A state stamped with a later window means the clock stepped back: keep counting in that
    // later window (the latest time seen) so a step back can never free capacity. A state from
    // an older window (or of another algorithm) counts as nothing.
    let (start, count) = match state {
        Some(&State::Fixed {
            window_start,
            count,
        }) if window_start >= current => (window_start, count),
        _ => (current, 0),
    };
    // The counter returns to full only when its window ends, whatever the verdict; a call that
    // can never fit (requests 0, cost above the limit) gets the same hint, which is never 0.
    let reset_after = until(u128::from(start) + u128::from(window), now);
    // A check (cost 0) is judged as a single hit would be (as none under envoyproxy/ratelimit's
    // judgment).
    let charge = limit.recording.judged(cost);
    if u128::from(count) + u128::from(charge) > u128::from(limit.requests) {
        let verdict = Verdict {
            admitted: false,
            remaining: 0,
            reset_after,
        };
        return (verdict, None);
    }
    // Fits, so count + cost <= requests: no overflow below.
    let count = count + cost;
    let verdict = Verdict {
        admitted: true,
        remaining: limit.requests - count,
        reset_after,
    };
    let next = (cost > 0).then_some(State::Fixed {
        window_start: start,
        count,
    });
    (verdict, next)
}

/// Whether the counter's window has ended, so it is as good as never seen.
pub(super) fn is_idle(limit: &Limit, state: &State, now: Nanos) -> bool {
    match *state {
        State::Fixed { window_start, .. } => {
            u128::from(window_start) + u128::from(limit.window.max(1)) <= u128::from(now)
        }
        _ => true,
    }
}

/// When the counter's window ends; see [`super::idle_at`].
pub(super) fn idle_at(limit: &Limit, state: &State) -> Nanos {
    match *state {
        State::Fixed { window_start, .. } => {
            super::saturate(u128::from(window_start) + u128::from(limit.window.max(1)))
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::algorithm::testing::{T0, assert_exact_retry, call, per_minute_of, v};
    use crate::clock::{MILLI, SECOND};

    /// `n` requests per minute.
    fn per_minute(n: u64) -> Limit {
        per_minute_of(Algorithm::FixedWindow, n)
    }

    /// Exactly N calls fit in a window, with remaining counting down, then calls are denied.
    #[test]
    fn admits_exactly_n_then_denies() {
        let (l, mut st) = (per_minute(3), None);
        for left in [2, 1, 0] {
            assert_eq!(
                call(&l, &mut st, T0 + SECOND, 1),
                v(true, left, 59 * SECOND)
            );
        }
        assert_eq!(
            call(&l, &mut st, T0 + 2 * SECOND, 1),
            v(false, 0, 58 * SECOND)
        );
    }

    /// The whole allowance returns at once when the next aligned window begins.
    #[test]
    fn capacity_returns_at_window_boundary() {
        let (l, mut st) = (per_minute(2), None);
        assert!(call(&l, &mut st, T0 + 30 * SECOND, 2).admitted);
        assert!(!call(&l, &mut st, T0 + 60 * SECOND - 1, 1).admitted);
        assert_eq!(
            call(&l, &mut st, T0 + 60 * SECOND, 1),
            v(true, 1, 60 * SECOND)
        );
    }

    /// Hammering while denied neither counts nor moves the retry time.
    #[test]
    fn denied_calls_do_not_extend_penalty() {
        let (l, mut st) = (per_minute(1), None);
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

    /// The retry hint is exact at several points in the window and for several costs.
    #[test]
    fn retry_hint_is_exact() {
        let (l, mut st) = (per_minute(5), None);
        assert!(call(&l, &mut st, T0 + 7, 4).admitted);
        for now in [T0 + 7, T0 + 13 * SECOND + 1, T0 + 60 * SECOND - 1] {
            for cost in 2..=5 {
                assert_eq!(
                    now + assert_exact_retry(&l, &st, now, cost),
                    T0 + 60 * SECOND
                );
            }
        }
    }

    /// Cost above one consumes that many; cost above the limit never fits and counts nothing.
    #[test]
    fn costs_above_one_and_above_capacity() {
        let (l, mut st) = (per_minute(10), None);
        assert_eq!(call(&l, &mut st, T0, 7).remaining, 3);
        assert!(!call(&l, &mut st, T0, 4).admitted);
        assert!(call(&l, &mut st, T0, 3).admitted);
        assert_eq!(
            call(&l, &mut None, T0 + SECOND, 11),
            v(false, 0, 59 * SECOND)
        );
    }

    /// Cost 0 is judged like a single hit, reports the unconsumed remaining, and stores nothing.
    #[test]
    fn zero_cost_is_a_check() {
        let l = per_minute(2);
        assert_eq!(decide(&l, None, T0, 0), (v(true, 2, 60 * SECOND), None));
        let full = State::Fixed {
            window_start: T0,
            count: 2,
        };
        let check = decide(&l, Some(&full), T0 + SECOND, 0);
        assert_eq!(check, (v(false, 0, 59 * SECOND), None));
    }

    /// Extreme costs, limits, windows and times neither panic nor over-admit.
    #[test]
    fn huge_values_do_not_panic() {
        let m = u64::MAX;
        let wide = Limit {
            window: m,
            ..per_minute(1)
        };
        for now in [0, 1, T0, m - 1, m] {
            let (l, mut st) = (per_minute(m), None);
            assert!(call(&l, &mut st, now, m).admitted);
            assert!(!call(&l, &mut st, now, 1).admitted);
            assert!(!decide(&per_minute(3), None, now, m).0.admitted);
            assert!(decide(&wide, None, now, 1).0.admitted);
        }
    }

    /// A clock stepping back keeps counting in the latest window seen instead of freeing it.
    #[test]
    fn clock_going_backwards_never_over_admits() {
        let (l, mut st) = (per_minute(1), None);
        assert!(call(&l, &mut st, T0 + 60 * SECOND, 1).admitted);
        assert_eq!(
            call(&l, &mut st, T0 + 30 * SECOND, 1),
            v(false, 0, 90 * SECOND)
        );
    }

    /// A counter is idle exactly when its window has ended.
    #[test]
    fn idle_when_window_ended() {
        let l = per_minute(5);
        let st = |window_start| State::Fixed {
            window_start,
            count: 5,
        };
        assert!(!is_idle(&l, &st(T0), T0 + 60 * SECOND - 1));
        assert!(is_idle(&l, &st(T0), T0 + 60 * SECOND));
        assert!(!is_idle(&l, &st(u64::MAX - 1), u64::MAX));
    }

    /// A calendar window (a 23-hour day from its origin, not a multiple of anything since the
    /// epoch) counts from its origin and resets exactly at its end; a clock stepped back before
    /// the origin counts in that earlier window, never freeing this one's count.
    #[test]
    fn windows_count_from_the_origin() {
        let hour = 3_600 * SECOND;
        let day = Limit {
            window: 23 * hour,
            origin: T0 + 7 * SECOND,
            ..per_minute(2)
        };
        let start = day.origin;
        let mut st = None;
        assert_eq!(call(&day, &mut st, start, 1), v(true, 1, 23 * hour));
        assert_eq!(call(&day, &mut st, start + 22 * hour, 1), v(true, 0, hour));
        assert_eq!(
            call(&day, &mut st, start + 23 * hour - 1, 1),
            v(false, 0, 1)
        );
        assert_eq!(day.window_start(start + 23 * hour), start + 23 * hour);
        assert_eq!(day.window_start(start - 1), start - 23 * hour);
        assert!(is_idle(&day, st.as_ref().unwrap(), start + 23 * hour));
        assert_eq!(idle_at(&day, st.as_ref().unwrap()), start + 23 * hour);
    }

    /// envoyproxy/ratelimit's known weakness: N just before a boundary and N just after all pass
    /// (2N).
    #[test]
    fn edge_burst_admits_twice_the_limit() {
        let (l, mut st) = (per_minute(10), None);
        let mut burst = |now| {
            (0..10)
                .filter(|_| call(&l, &mut st, now, 1).admitted)
                .count()
        };
        assert_eq!((burst(T0 - MILLI), burst(T0 + MILLI)), (10, 10));
    }
}
