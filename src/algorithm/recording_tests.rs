//! Limits that record every charge (token budgets): worked by hand on a manual clock.

use super::testing::{T0, assert_exact_retry, call, per_minute_of, v};
use super::{Algorithm, Limit, Recording, State, decide};
use crate::clock::SECOND;

/// One minute.
const W: u64 = 60 * SECOND;

/// `n` per minute with `algorithm`, recording every charge as `recording` says.
fn budget(algorithm: Algorithm, n: u64, recording: Recording) -> Limit {
    Limit {
        recording,
        ..per_minute_of(algorithm, n)
    }
}

/// A fixed-window budget of 100: a charge of 30 on 90 is refused but recorded (120), the check
/// is refused until the window ends, then the whole budget is back.
#[test]
fn fixed_window_goes_over_and_refuses_checks_until_the_window_ends() {
    let (l, mut st) = (budget(Algorithm::FixedWindow, 100, Recording::Always), None);
    assert_eq!(call(&l, &mut st, T0 + SECOND, 0), v(true, 100, 59 * SECOND));
    assert_eq!(call(&l, &mut st, T0 + SECOND, 90), v(true, 10, 59 * SECOND));
    assert_eq!(
        call(&l, &mut st, T0 + 2 * SECOND, 30),
        v(false, 0, 58 * SECOND)
    );
    assert_eq!(
        st,
        Some(State::Fixed {
            window_start: T0,
            count: 120
        })
    );
    assert_eq!(
        call(&l, &mut st, T0 + 3 * SECOND, 0),
        v(false, 0, 57 * SECOND)
    );
    assert_exact_retry(&l, &st, T0 + 3 * SECOND, 0);
    assert_eq!(call(&l, &mut st, T0 + W, 0), v(true, 100, W));
}

/// Without recording, the same refused charge consumes nothing and the next check passes: the
/// tenant is never stopped (issue 43's report).
#[test]
fn without_recording_a_refused_charge_consumes_nothing() {
    let (l, mut st) = (
        budget(Algorithm::FixedWindow, 100, Recording::AdmittedOnly),
        None,
    );
    assert!(call(&l, &mut st, T0, 90).admitted);
    assert!(!call(&l, &mut st, T0, 30).admitted);
    assert_eq!(call(&l, &mut st, T0, 0), v(true, 10, W));
}

/// A sliding-window budget charged 150 on 100: the next window's check waits until the
/// previous 150 weigh at most 99, exactly (150 × (60 − x)/60 + 1 ≤ 100 at x = 20.4 s).
#[test]
fn sliding_window_over_budget_weighs_on_the_next_window() {
    let (l, mut st) = (
        budget(Algorithm::SlidingWindow, 100, Recording::Always),
        None,
    );
    assert_eq!(call(&l, &mut st, T0, 150), v(false, 0, 2 * W));
    let hint = assert_exact_retry(&l, &st, T0 + W, 0);
    assert_eq!(hint, 20_400_000_000);
    assert_eq!(decide(&l, st.as_ref(), T0 + W + hint, 0).0.remaining, 1);
}

/// A token bucket goes into debt: 10 a minute (one per 6 s), a burst of 10, charged 25 at once:
/// a check fits again once the debt is down to 9 tokens (96 s), a charge of the whole burst
/// once the bucket is full again (150 s).
#[test]
fn token_bucket_goes_into_debt() {
    let (l, mut st) = (budget(Algorithm::TokenBucket, 10, Recording::Always), None);
    assert_eq!(call(&l, &mut st, T0, 25), v(false, 0, 150 * SECOND));
    assert_eq!(assert_exact_retry(&l, &st, T0, 0), 96 * SECOND);
    // (Judged without being recorded: a recorded one would add its own 10 first.)
    let judged = Limit {
        recording: Recording::AdmittedOnly,
        ..l
    };
    assert_eq!(assert_exact_retry(&judged, &st, T0, 10), 150 * SECOND);
    assert_eq!(
        decide(&l, st.as_ref(), T0 + 150 * SECOND, 0).0.remaining,
        10
    );
}

/// A recorded charge's hint is when the same charge fits the state it left: hammering a
/// recording limit extends its own wait (every hit is a fact).
#[test]
fn a_recorded_charge_hints_at_the_state_it_left() {
    let (l, mut st) = (budget(Algorithm::TokenBucket, 60, Recording::Always), None);
    assert!(call(&l, &mut st, T0, 60).admitted);
    let first = call(&l, &mut st, T0, 1);
    let second = call(&l, &mut st, T0, 1);
    assert_eq!(
        (first, second),
        (v(false, 0, 2 * SECOND), v(false, 0, 3 * SECOND))
    );
}

/// envoyproxy/ratelimit's judgment of a check: refused only once the counter is past the
/// limit. Its token-quota example on 2 a minute: three requests pass (checks at 0, 1 and 2),
/// each charged 1 at stream end, the fourth check (at 3) is refused until the window ends.
#[test]
fn compat_checks_refuse_only_past_the_limit() {
    let (l, mut st) = (
        budget(Algorithm::FixedWindow, 2, Recording::AlwaysCompat),
        None,
    );
    for (count, left) in [(0, 2), (1, 1), (2, 0)] {
        let now = T0 + (count + 1) * SECOND;
        assert_eq!(call(&l, &mut st, now, 0), v(true, left, T0 + W - now));
        call(&l, &mut st, now, 1);
    }
    assert_eq!(
        call(&l, &mut st, T0 + 4 * SECOND, 0),
        v(false, 0, 56 * SECOND)
    );
    assert_exact_retry(&l, &st, T0 + 4 * SECOND, 0);
    // The one-hit judgment refuses at 2 already.
    let two = State::Fixed {
        window_start: T0,
        count: 2,
    };
    let always = budget(Algorithm::FixedWindow, 2, Recording::Always);
    assert!(!decide(&always, Some(&two), T0, 0).0.admitted);
    assert!(decide(&l, Some(&two), T0, 0).0.admitted);
}

/// envoyproxy/ratelimit's check on the other algorithms: past the limit, not at it.
#[test]
fn compat_checks_on_sliding_windows_and_buckets() {
    let at_limit = [
        (
            Algorithm::SlidingWindow,
            State::Sliding {
                window_start: T0,
                previous: 0,
                current: 5,
            },
        ),
        (
            Algorithm::TokenBucket,
            State::Bucket {
                tat_scaled: u128::from(T0 + W) * 5,
            },
        ),
    ];
    for (algorithm, state) in at_limit {
        let compat = budget(algorithm, 5, Recording::AlwaysCompat);
        let always = budget(algorithm, 5, Recording::Always);
        assert_eq!(decide(&compat, Some(&state), T0, 0).0.remaining, 0);
        assert!(
            decide(&compat, Some(&state), T0, 0).0.admitted,
            "{algorithm}"
        );
        assert!(
            !decide(&always, Some(&state), T0, 0).0.admitted,
            "{algorithm}"
        );
        let (_, over) = decide(&compat, Some(&state), T0, 1);
        assert!(
            !decide(&compat, over.as_ref(), T0, 0).0.admitted,
            "{algorithm}"
        );
        assert_exact_retry(&compat, &over, T0, 0);
    }
}

/// A charge not even an unbounded counter holds (past 2^48 hits) is refused and records
/// nothing; neither does a check.
#[test]
fn absurd_charges_record_nothing() {
    let l = budget(Algorithm::FixedWindow, 100, Recording::Always);
    assert_eq!(decide(&l, None, T0, u64::MAX).1, None);
    let full = State::Fixed {
        window_start: T0,
        count: 200,
    };
    assert_eq!(decide(&l, Some(&full), T0, 0).1, None);
}
