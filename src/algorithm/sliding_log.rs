//! Sliding log: each admitted hit is kept until it leaves the trailing window: exact counting.

use std::collections::VecDeque;

use super::{Limit, State, Verdict, until, window_start};
use crate::clock::Nanos;

/// Hits admitted at one instant (hits admitted at the same instant share one entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEntry {
    /// When the hits were admitted.
    pub at: Nanos,
    /// How many hits were admitted then.
    pub hits: u64,
}

/// The log of a counter never seen.
static EMPTY: VecDeque<LogEntry> = VecDeque::new();

/// Decides one call; see [`super::decide`].
pub(super) fn decide(
    limit: &Limit,
    state: Option<&State>,
    now: Nanos,
    cost: u64,
) -> (Verdict, Option<State>) {
    let window = u128::from(limit.window.max(1));
    let (log, stored_total) = match state {
        Some(State::Log { entries, total }) => (entries, *total),
        _ => (&EMPTY, 0),
    };
    // Judge at the latest time seen, so a clock stepping back cannot resurrect capacity.
    let t = log.back().map_or(now, |e| e.at.max(now));
    // An entry counts over (at, at + window]: it stops counting once t reaches at + window.
    let expiry = |e: &LogEntry| u128::from(e.at) + window;
    let mut live_from = 0;
    let mut total = stored_total;
    for e in log.iter().take_while(|e| expiry(e) <= u128::from(t)) {
        live_from += 1;
        total = total.saturating_sub(e.hits);
    }
    let live = log.range(live_from..);
    let newest_expiry = live.clone().next_back().map(expiry);
    let requests = limit.requests;
    // A check (cost 0) is judged as a single hit would be (as none under envoyproxy/ratelimit's
    // judgment).
    let charge = limit.recording.judged(cost);
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

    if charge > requests {
        // Never fits: report the time until the log is empty, or else the window's end.
        let end = u128::from(window_start(now, limit.window.max(1))) + window;
        return denied(until(newest_expiry.unwrap_or(end), now));
    }
    if u128::from(total) + u128::from(charge) > u128::from(requests) {
        // The call fits once enough of the oldest hits have left the window.
        let need = total - (requests - charge);
        let retry = freed_at(live, need, window)
            .unwrap_or_else(|| newest_expiry.unwrap_or(u128::from(t) + window));
        return denied(until(retry, now));
    }
    if cost == 0 {
        let reset_after = newest_expiry.map_or(0, |at| until(at, now));
        let verdict = Verdict {
            admitted: true,
            remaining: requests - total,
            reset_after,
        };
        return (verdict, None);
    }
    // Copying the live entries is forced by the borrowed-in, owned-out interface; the copy
    // drops the expired prefix, and it never holds more than `requests` entries.
    let mut entries: VecDeque<LogEntry> = live.copied().collect();
    match entries.back_mut() {
        Some(last) if last.at == t => last.hits = last.hits.saturating_add(cost),
        _ => entries.push_back(LogEntry { at: t, hits: cost }),
    }
    // Fits, so total + cost <= requests: no overflow.
    let total = total + cost;
    let reset_after = until(u128::from(t) + window, now);
    let verdict = Verdict {
        admitted: true,
        remaining: requests - total,
        reset_after,
    };
    (verdict, Some(State::Log { entries, total }))
}

/// When the oldest of the `live` entries holding `need` hits have all left the window.
fn freed_at<'a>(
    live: impl Iterator<Item = &'a LogEntry>,
    mut need: u64,
    window: u128,
) -> Option<u128> {
    for e in live {
        need = need.saturating_sub(e.hits);
        if need == 0 {
            return Some(u128::from(e.at) + window);
        }
    }
    None
}

/// Whether every logged hit has left the window at `now`.
pub(super) fn is_idle(limit: &Limit, state: &State, now: Nanos) -> bool {
    match state {
        State::Log { entries, .. } => entries
            .back()
            .is_none_or(|e| u128::from(e.at) + u128::from(limit.window.max(1)) <= u128::from(now)),
        _ => true,
    }
}

/// When the newest logged hit leaves the window; see [`super::idle_at`].
pub(super) fn idle_at(limit: &Limit, state: &State) -> Nanos {
    match state {
        State::Log { entries, .. } => entries.back().map_or(0, |e| {
            super::saturate(u128::from(e.at) + u128::from(limit.window.max(1)))
        }),
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
        per_minute_of(Algorithm::SlidingLog, n)
    }

    /// Exactly N calls fit, with remaining counting down and reset at the newest hit's expiry.
    #[test]
    fn admits_exactly_n_then_denies() {
        let (l, mut st) = (per_minute(3), None);
        for (i, left) in [(0, 2), (1, 1), (2, 0)] {
            assert_eq!(
                call(&l, &mut st, T0 + i * SECOND, 1),
                v(true, left, 60 * SECOND)
            );
        }
        assert_eq!(
            call(&l, &mut st, T0 + 3 * SECOND, 1),
            v(false, 0, 57 * SECOND)
        );
    }

    /// Capacity returns hit by hit as each admitted hit leaves the window; same-instant hits merge.
    #[test]
    fn capacity_returns_gradually() {
        let (l, mut st) = (per_minute(3), None);
        for at in [T0, T0 + 10 * SECOND, T0 + 10 * SECOND] {
            assert!(call(&l, &mut st, at, 1).admitted);
        }
        let merged = |st: &Option<State>| matches!(st, Some(State::Log { entries, total: 3 }) if entries.len() == 2);
        assert!(merged(&st));
        assert!(!call(&l, &mut st, T0 + 60 * SECOND - 1, 1).admitted);
        assert_eq!(call(&l, &mut st, T0 + 60 * SECOND, 1).remaining, 0);
        assert_eq!(decide(&l, st.as_ref(), T0 + 70 * SECOND, 0).0.remaining, 2);
        assert!(merged(&st));
    }

    /// Hammering while denied neither logs anything nor moves the retry time.
    #[test]
    fn denied_calls_do_not_extend_penalty() {
        let (l, mut st) = (per_minute(2), None);
        assert!(call(&l, &mut st, T0, 2).admitted);
        let before = st.clone();
        for now in (1..100).map(|i| T0 + i * SECOND / 2) {
            assert_eq!(
                now + call(&l, &mut st, now, 1).reset_after,
                T0 + 60 * SECOND
            );
        }
        assert_eq!(st, before);
    }

    /// The retry hint is exact, walking as many old hits as the call needs freed.
    #[test]
    fn retry_hint_is_exact() {
        let (l, mut st) = (per_minute(5), None);
        for (at, cost) in [(T0 + 1, 2), (T0 + 5 * SECOND, 1), (T0 + 9 * SECOND, 2)] {
            assert!(call(&l, &mut st, at, cost).admitted);
        }
        let retry_at = |now, cost| now + assert_exact_retry(&l, &st, now, cost);
        let now = T0 + 20 * SECOND;
        assert_eq!(retry_at(now, 1), T0 + 1 + 60 * SECOND);
        assert_eq!(retry_at(now, 3), T0 + 65 * SECOND);
        assert_eq!(retry_at(now, 4), T0 + 69 * SECOND);
        assert_eq!(retry_at(T0 + 62 * SECOND, 4), T0 + 69 * SECOND);
    }

    /// Cost above one consumes that many; cost above the limit never fits, hint to full.
    #[test]
    fn costs_above_one_and_above_capacity() {
        let (l, mut st) = (per_minute(10), None);
        assert_eq!(call(&l, &mut st, T0, 7).remaining, 3);
        assert!(!call(&l, &mut st, T0, 4).admitted);
        assert_eq!(call(&l, &mut st, T0 + SECOND, 11), v(false, 0, 59 * SECOND));
        assert_eq!(
            call(&l, &mut None, T0 + SECOND, 11),
            v(false, 0, 59 * SECOND)
        );
    }

    /// Cost 0 is judged like a single hit, reports the unconsumed remaining, and stores nothing.
    #[test]
    fn zero_cost_is_a_check() {
        let (l, mut st) = (per_minute(2), None);
        assert_eq!(decide(&l, None, T0, 0), (v(true, 2, 0), None));
        assert!(call(&l, &mut st, T0, 1).admitted);
        let check = decide(&l, st.as_ref(), T0 + SECOND, 0);
        assert_eq!(check, (v(true, 1, 59 * SECOND), None));
        assert!(call(&l, &mut st, T0 + SECOND, 1).admitted);
        let check = decide(&l, st.as_ref(), T0 + 2 * SECOND, 0);
        assert_eq!(check, (v(false, 0, 58 * SECOND), None));
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
            assert!(!call(&l, &mut st, 0, m).admitted);
            assert!(!decide(&per_minute(3), None, now, m).0.admitted);
            assert!(decide(&wide, None, now, 1).0.admitted);
        }
    }

    /// A clock stepping back judges at the latest time seen instead of freeing capacity.
    #[test]
    fn clock_going_backwards_never_over_admits() {
        let (l, mut st) = (per_minute(2), None);
        assert!(call(&l, &mut st, T0 + 100 * SECOND, 1).admitted);
        assert!(call(&l, &mut st, T0, 1).admitted);
        assert_eq!(call(&l, &mut st, T0, 1), v(false, 0, 160 * SECOND));
    }

    /// A log is idle exactly when its newest hit has left the window.
    #[test]
    fn idle_when_newest_hit_expired() {
        let l = per_minute(5);
        let hit = |at| LogEntry { at, hits: 1 };
        let st = State::Log {
            entries: VecDeque::from([hit(T0), hit(T0 + SECOND)]),
            total: 2,
        };
        assert!(!is_idle(&l, &st, T0 + 61 * SECOND - 1));
        assert!(is_idle(&l, &st, T0 + 61 * SECOND));
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
