//! Property tests of the counting algorithms over random arrival sequences and costs.

use proptest::prelude::*;
use sluice::algorithm::{Algorithm, Limit, State, Verdict, decide, idle_at, is_idle, window_start};
use sluice::clock::{Nanos, SECOND};
use sluice::store::saved::combine;

/// One decided call: when, for how much, the state it saw, the verdict and the state after.
pub(crate) struct Step {
    pub now: Nanos,
    pub cost: u64,
    pub before: Option<State>,
    pub verdict: Verdict,
    pub after: Option<State>,
}

/// Runs `calls` (gap since the previous call, cost) from `start`, storing state as a store would
/// (every state `decide` returns: a recording limit's for a denied charge too).
pub(crate) fn run(limit: &Limit, start: Nanos, calls: &[(u64, u64)]) -> Vec<Step> {
    let (mut now, mut state) = (start, None::<State>);
    let mut steps = Vec::with_capacity(calls.len());
    for &(gap, cost) in calls {
        now += gap;
        let (verdict, next) = decide(limit, state.as_ref(), now, cost);
        let before = state.clone();
        if let Some(s) = next {
            state = Some(s);
        }
        steps.push(Step {
            now,
            cost,
            before,
            verdict,
            after: state.clone(),
        });
    }
    steps
}

/// Admitted hits as (time, cost), checks left out.
fn admitted(steps: &[Step]) -> Vec<(Nanos, u64)> {
    steps
        .iter()
        .filter(|s| s.verdict.admitted && s.cost > 0)
        .map(|s| (s.now, s.cost))
        .collect()
}

/// A window: tiny (rounding at every step), odd-sized, or a real minute.
fn window() -> impl Strategy<Value = Nanos> {
    prop_oneof![1u64..=300, 1u64..=10 * SECOND, Just(60 * SECOND)]
}

/// A limit of the given algorithm, with its window.
fn limit(algorithm: Algorithm, requests: u64, burst: u64, window: Nanos) -> Limit {
    let burst = if algorithm == Algorithm::TokenBucket {
        burst
    } else {
        requests
    };
    Limit {
        algorithm,
        requests,
        window,
        burst,
        origin: 0,
        recording: Default::default(),
    }
}

/// Any algorithm.
fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

/// Call sequences as (gap in sixteenths of a window plus a few ns of jitter, cost).
fn calls(max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    prop::collection::vec((0u64..=40, 0u64..=2, 0..=max_cost), 1..60)
}

/// Gaps in sixteenths of `window` turned into nanoseconds.
fn scaled(window: Nanos, raw: &[(u64, u64, u64)]) -> Vec<(u64, u64)> {
    raw.iter()
        .map(|&(g, j, c)| (window / 16 * g + j, c))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Sliding log: never more than N hits admitted in any window (t − W, t].
    #[test]
    fn sliding_log_never_over_admits(n in 1u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4)) {
        let l = limit(Algorithm::SlidingLog, n, n, w);
        let hits = admitted(&run(&l, start, &scaled(w, &raw)));
        for &(t, _) in &hits {
            let in_window: u64 = hits.iter().filter(|&&(u, _)| u <= t && u + w > t).map(|h| h.1).sum();
            prop_assert!(in_window <= n, "{in_window} > {n} in window ending {t}");
        }
    }

    /// Token bucket: at most burst + floor(rate × T / W) hits in any closed interval of length T.
    #[test]
    fn token_bucket_never_over_admits(n in 1u64..=8, b in 0u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4)) {
        let l = limit(Algorithm::TokenBucket, n, b, w);
        let hits = admitted(&run(&l, start, &scaled(w, &raw)));
        for (i, &(t0, _)) in hits.iter().enumerate() {
            let mut sum = 0u128;
            for &(t1, c) in &hits[i..] {
                sum += u128::from(c);
                let bound = u128::from(b) + u128::from(n) * u128::from(t1 - t0) / u128::from(w);
                prop_assert!(sum <= bound, "{sum} > {bound} over [{t0}, {t1}]");
            }
        }
    }

    /// Sliding window: at most N in any aligned window, and at most N × (1 + d/W) in any
    /// closed interval of length d <= W (provable: only the previous bucket's share leaks in).
    #[test]
    fn sliding_window_bounds(n in 1u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4)) {
        let l = limit(Algorithm::SlidingWindow, n, n, w);
        let hits = admitted(&run(&l, start, &scaled(w, &raw)));
        for (i, &(t0, _)) in hits.iter().enumerate() {
            let aligned: u64 = hits.iter().filter(|h| window_start(h.0, w) == window_start(t0, w)).map(|h| h.1).sum();
            prop_assert!(aligned <= n);
            let mut sum = 0u128;
            for &(t1, c) in hits[i..].iter().take_while(|h| h.0 - t0 <= w) {
                sum += u128::from(c);
                let (n, d, w) = (u128::from(n), u128::from(t1 - t0), u128::from(w));
                prop_assert!(sum * w <= n * w + n * d, "{sum} over [{t0}, {t1}]");
                prop_assert!(sum <= 2 * n);
            }
        }
    }

    /// Every algorithm: a denied call's hint is exact (admitted at now + hint, denied 1 ns
    /// earlier, nothing else happening), and one that can never fit gets a non-zero hint.
    #[test]
    fn retry_hint_is_exact(a in algorithm(), n in 0u64..=8, b in 0u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(10)) {
        let l = limit(a, n, b, w);
        for s in run(&l, start, &scaled(w, &raw)).iter().filter(|s| !s.verdict.admitted) {
            let (v, cost) = (s.verdict, s.cost);
            prop_assert!(v.reset_after > 0 && v.remaining == 0);
            if n == 0 || cost.max(1) > l.capacity() {
                continue;
            }
            let at = |t| decide(&l, s.before.as_ref(), t, cost).0.admitted;
            prop_assert!(at(s.now + v.reset_after), "{a}: denied at hint {v:?}");
            prop_assert!(!at(s.now + v.reset_after - 1), "{a}: admitted before hint {v:?}");
        }
    }

    /// Every algorithm: an admitted call's remaining is exactly the largest cost that still fits
    /// at once, and its reset_after is exactly when the counter is full again.
    #[test]
    fn admitted_remaining_and_reset_are_exact(a in algorithm(), n in 1u64..=8, b in 1u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4)) {
        let l = limit(a, n, b, w);
        for s in run(&l, start, &scaled(w, &raw)).iter().filter(|s| s.verdict.admitted && s.cost > 0) {
            let (v, after) = (s.verdict, s.after.as_ref());
            prop_assert!(v.remaining <= l.capacity());
            let fits = |t, c| decide(&l, after, t, c).0.admitted;
            prop_assert!(v.remaining == 0 || fits(s.now, v.remaining), "{a}: {v:?}");
            prop_assert!(!fits(s.now, v.remaining + 1), "{a}: {v:?}");
            let left = |t| decide(&l, after, t, 0).0.remaining;
            prop_assert_eq!(left(s.now + v.reset_after), l.capacity(), "{}: {:?}", a, v);
            prop_assert!(left(s.now + v.reset_after - 1) < l.capacity(), "{a}: {v:?}");
        }
    }

    /// Every algorithm: cost 0 stores nothing and is judged as a single hit; an idle state
    /// decides exactly as no state at all.
    #[test]
    fn checks_and_idle_states(a in algorithm(), n in 0u64..=8, b in 0u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4)) {
        let l = limit(a, n, b, w);
        for s in run(&l, start, &scaled(w, &raw)) {
            let (check, stored) = decide(&l, s.before.as_ref(), s.now, 0);
            prop_assert!(stored.is_none());
            prop_assert_eq!(check.admitted, decide(&l, s.before.as_ref(), s.now, 1).0.admitted);
            if let Some(st) = s.before.as_ref().filter(|st| is_idle(&l, st, s.now)) {
                let fresh = decide(&l, None, s.now, s.cost).0;
                prop_assert_eq!(decide(&l, Some(st), s.now, s.cost).0, fresh);
            }
        }
    }

    /// Every algorithm: combining the states a counter went through, in any order and with
    /// repeats (what restore does with snapshot and journal records), gives its latest state.
    #[test]
    fn combining_saved_states_gives_the_latest(a in algorithm(), n in 1u64..=8, b in 1u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4), order in prop::collection::vec(any::<prop::sample::Index>(), 1..40)) {
        let l = limit(a, n, b, w);
        let mut saved: Vec<State> = Vec::new();
        for s in run(&l, start, &scaled(w, &raw)) {
            if let Some(after) = s.after.filter(|after| Some(after) != saved.last()) {
                saved.push(after);
            }
        }
        prop_assume!(!saved.is_empty());
        let latest = saved.last().cloned().unwrap();
        // Every state at least once (the latest included), then random repeats, in a random order.
        let mut picks: Vec<usize> = (0..saved.len()).collect();
        picks.extend(order.iter().map(|i| i.index(saved.len())));
        let len = picks.len();
        for (i, j) in order.iter().enumerate() {
            picks.swap(i % len, j.index(len));
        }
        let mut held = saved[picks[0]].clone();
        let mut idle = idle_at(&l, &held);
        for &p in &picks[1..] {
            idle = combine(&mut held, idle, saved[p].clone(), idle_at(&l, &saved[p]));
        }
        prop_assert_eq!(&held, &latest, "{}", a);
        prop_assert_eq!(idle, idle_at(&l, &latest));
    }

    /// Every algorithm: a stored state is idle exactly from `idle_at` on (what stores reclaim by).
    #[test]
    fn idle_at_is_when_is_idle_starts(a in algorithm(), n in 0u64..=8, b in 0u64..=8, w in window(), start in 0u64..1 << 40, raw in calls(4)) {
        let l = limit(a, n, b, w);
        for st in run(&l, start, &scaled(w, &raw)).iter().filter_map(|s| s.after.as_ref()) {
            let at = idle_at(&l, st);
            prop_assert!(is_idle(&l, st, at), "{a}: not idle at {at}: {st:?}");
            if at > 0 {
                prop_assert!(!is_idle(&l, st, at - 1), "{a}: idle before {at}: {st:?}");
                prop_assert!(!is_idle(&l, st, start), "{a}: idle at the start: {st:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any input at all, including times running backwards and values near u64::MAX, decides
    /// without panicking and keeps remaining within capacity.
    #[test]
    fn never_panics(a in algorithm(), n in any::<u64>(), b in any::<u64>(), w in 1..=u64::MAX,
                    calls in prop::collection::vec((any::<u64>(), prop_oneof![0u64..=3, any::<u64>()]), 1..20)) {
        let l = limit(a, n, b, w);
        let mut state = None;
        for (now, cost) in calls {
            let (v, next) = decide(&l, state.as_ref(), now, cost);
            prop_assert!(v.remaining <= l.capacity());
            prop_assert!(v.admitted || v.reset_after > 0);
            if let Some(s) = next {
                state = Some(s);
            }
            if let Some(s) = &state {
                is_idle(&l, s, now);
            }
        }
    }
}
