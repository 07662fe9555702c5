//! Property tests of limits that record every charge (token budgets): every hit is counted,
//! admitted or not; what is admitted still keeps each algorithm's bound; every hint is exact.

use proptest::prelude::*;
use sluice::algorithm::{Algorithm, Limit, Recording, State, decide, window_start};
use sluice::clock::{Nanos, SECOND};

use crate::algorithms_prop::run;

/// An algorithm that can record (a sliding log cannot: the rules refuse it).
fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(vec![
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ])
}

/// Either way of recording.
fn recording() -> impl Strategy<Value = Recording> {
    prop::sample::select(vec![Recording::Always, Recording::AlwaysCompat])
}

/// A limit of `requests` per `window` (a bucket of `burst`) that records as `recording` says.
fn limit(
    algorithm: Algorithm,
    requests: u64,
    burst: u64,
    window: Nanos,
    recording: Recording,
) -> Limit {
    Limit {
        algorithm,
        requests,
        window,
        burst: if algorithm == Algorithm::TokenBucket {
            burst
        } else {
            requests
        },
        origin: 0,
        recording,
    }
}

/// A window: tiny, odd-sized, or a real minute.
fn window() -> impl Strategy<Value = Nanos> {
    prop_oneof![1u64..=300, 1u64..=10 * SECOND, Just(60 * SECOND)]
}

/// Calls as (gap in sixteenths of `window` plus jitter, cost): costs up to 12 against limits up
/// to 8, so charges cross the limit often.
fn calls(window: Nanos) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..=40, 0u64..=2, 0u64..=12), 1..60).prop_map(move |raw| {
        raw.into_iter()
            .map(|(g, j, c)| (window / 16 * g + j, c))
            .collect()
    })
}

/// A limit and its calls.
fn case() -> impl Strategy<Value = (Limit, Nanos, Vec<(u64, u64)>)> {
    (
        algorithm(),
        1u64..=8,
        1u64..=8,
        window(),
        recording(),
        0u64..1 << 40,
    )
        .prop_flat_map(|(a, n, b, w, r, start)| (Just(limit(a, n, b, w, r)), Just(start), calls(w)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every charge is counted, admitted or not: a window's count is the sum of every cost
    /// charged in it; a bucket's arrival time moves on by every cost (it goes into debt).
    #[test]
    fn every_charge_is_counted((l, start, calls) in case()) {
        let w = l.window;
        let steps = run(&l, start, &calls);
        for (i, s) in steps.iter().enumerate() {
            let charged_in = |from: Nanos| -> u64 {
                steps[..=i].iter().filter(|t| window_start(t.now, w) == from).map(|t| t.cost).sum()
            };
            match s.after {
                Some(State::Fixed { window_start: at, count }) => prop_assert_eq!(count, charged_in(at)),
                Some(State::Sliding { window_start: at, current, .. }) => prop_assert_eq!(current, charged_in(at)),
                Some(State::Bucket { tat_scaled }) if s.cost > 0 => {
                    let rate = u128::from(l.requests);
                    let before = match s.before { Some(State::Bucket { tat_scaled }) => tat_scaled, _ => 0 };
                    let from = before.max(u128::from(s.now) * rate);
                    prop_assert_eq!(tat_scaled, from + u128::from(s.cost) * u128::from(w));
                }
                _ => {}
            }
        }
    }

    /// What is admitted keeps the algorithm's bound (recorded hits only leave less room):
    /// at most N in an aligned window, N × (1 + d/W) over d ≤ W for a sliding window, burst +
    /// rate × T / W for a bucket.
    #[test]
    fn admitted_hits_keep_the_bound((l, start, calls) in case()) {
        let (n, w) = (u128::from(l.requests), u128::from(l.window));
        let hits: Vec<(Nanos, u64)> = run(&l, start, &calls)
            .iter()
            .filter(|s| s.verdict.admitted && s.cost > 0)
            .map(|s| (s.now, s.cost))
            .collect();
        for (i, &(t0, _)) in hits.iter().enumerate() {
            let mut sum = 0u128;
            for &(t1, c) in &hits[i..] {
                sum += u128::from(c);
                let d = u128::from(t1 - t0);
                let bound = match l.algorithm {
                    Algorithm::TokenBucket => u128::from(l.burst) + n * d / w,
                    Algorithm::SlidingWindow if d <= w => (n * w + n * d) / w,
                    Algorithm::FixedWindow if window_start(t0, l.window) == window_start(t1, l.window) => n,
                    _ => continue,
                };
                prop_assert!(sum <= bound, "{sum} > {bound} over [{t0}, {t1}]");
            }
        }
    }

    /// A recorded charge's hint is exact for the same charge on the state it left; a refused
    /// check's for a check; a check is admitted as its judgment says (one hit must fit, or
    /// under envoyproxy/ratelimit's the counter must not be past the limit).
    #[test]
    fn hints_are_exact_and_checks_judged((l, start, calls) in case()) {
        let steps = run(&l, start, &calls);
        for s in steps.iter().filter(|s| !s.verdict.admitted) {
            let hint = s.verdict.reset_after;
            prop_assert!(hint > 0);
            if s.cost > l.capacity() {
                continue;
            }
            let at = |t| decide(&l, s.after.as_ref(), t, s.cost).0.admitted;
            prop_assert!(at(s.now + hint), "refused at its hint {:?}", s.verdict);
            prop_assert!(!at(s.now + hint - 1), "admitted before its hint {:?}", s.verdict);
        }
        let ordinary = Limit { recording: Recording::AdmittedOnly, ..l };
        for s in &steps {
            let check = decide(&l, s.before.as_ref(), s.now, 0).0.admitted;
            let one = decide(&ordinary, s.before.as_ref(), s.now, 1).0.admitted;
            match (l.recording, &s.before) {
                // Past the limit, not at it: a fixed window's count, by the letter.
                (Recording::AlwaysCompat, Some(State::Fixed { window_start: at, count }))
                    if *at == window_start(s.now, l.window) =>
                {
                    prop_assert_eq!(check, *count <= l.requests);
                }
                // Never stricter than one hit's judgment.
                (Recording::AlwaysCompat, _) => prop_assert!(check || !one),
                _ => prop_assert_eq!(check, one),
            }
        }
    }
}

/// envoyproxy/ratelimit's judgment on a fixed window, by count: a check passes at the limit and
/// is refused past it; one hit's judgment refuses at the limit already.
#[test]
fn compat_check_is_refused_only_past_the_limit() {
    let at = 1_767_225_600 * SECOND;
    for count in 0..=6 {
        let state = State::Fixed {
            window_start: at,
            count,
        };
        let compat = limit(
            Algorithm::FixedWindow,
            4,
            4,
            60 * SECOND,
            Recording::AlwaysCompat,
        );
        let always = Limit {
            recording: Recording::Always,
            ..compat
        };
        assert_eq!(decide(&compat, Some(&state), at, 0).0.admitted, count <= 4);
        assert_eq!(decide(&always, Some(&state), at, 0).0.admitted, count < 4);
    }
}
