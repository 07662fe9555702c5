//! Helpers shared by the algorithms' unit tests.

use super::{Algorithm, Limit, State, Verdict, decide};
use crate::clock::{Nanos, SECOND};

/// A minute boundary (a multiple of 60 s).
pub(super) const T0: Nanos = 28_333_334 * 60 * SECOND;

/// `n` requests per minute with `algorithm` (a bucket of `n`).
pub(super) fn per_minute_of(algorithm: Algorithm, n: u64) -> Limit {
    Limit {
        algorithm,
        requests: n,
        window: 60 * SECOND,
        burst: n,
        origin: 0,
        recording: Default::default(),
    }
}

/// A verdict, written short.
pub(super) fn v(admitted: bool, remaining: u64, reset_after: Nanos) -> Verdict {
    Verdict {
        admitted,
        remaining,
        reset_after,
    }
}

/// Decides one call and stores the new state, as a store would.
pub(super) fn call(l: &Limit, st: &mut Option<State>, now: Nanos, cost: u64) -> Verdict {
    let (v, next) = decide(l, st.as_ref(), now, cost);
    *st = next.or(st.take());
    v
}

/// Asserts the denied call's hint is exact: still denied 1 ns before it, admitted at it.
pub(super) fn assert_exact_retry(l: &Limit, st: &Option<State>, now: Nanos, cost: u64) -> Nanos {
    let fits = |t| decide(l, st.as_ref(), t, cost).0.admitted;
    let hint = decide(l, st.as_ref(), now, cost).0.reset_after;
    assert!(!fits(now) && hint > 0 && !fits(now + hint - 1) && fits(now + hint));
    hint
}

/// A limit of 0 requests blocks every call of the window algorithms, with a non-zero hint to the
/// window end.
#[test]
fn zero_requests_blocks_everything() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        for cost in [0, 1, 5] {
            let denied = (v(false, 0, 50 * SECOND), None);
            let decided = decide(&per_minute_of(algorithm, 0), None, T0 + 10 * SECOND, cost);
            assert_eq!(decided, denied, "{algorithm}");
        }
    }
}
