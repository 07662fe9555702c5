//! Replays arrival times through each algorithm: the real store and algorithm code, a manual clock.

use sluice::algorithm::{Algorithm, Limit, Recording};
use sluice::clock::{Clock, ManualClock, Nanos, SECOND};
use sluice::store::{Charge, CounterKeyBuilder, Gate, MemoryStore};

/// What one algorithm did with the traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlgorithmRun {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Each call's arrival time (ns from t = 0) and whether it was admitted, in time order.
    pub decisions: Vec<(i64, bool)>,
    /// Calls admitted.
    pub admitted: usize,
    /// Calls denied.
    pub denied: usize,
    /// The most calls admitted in any window of length W (any start, not only edges).
    pub max_in_any_window: usize,
}

/// Where t = 0 sits on the real clock: a window edge (fixed windows are epoch-aligned, so the
/// patterns' edges must be real edges), far enough from the epoch that negative times fit.
fn origin(window: Nanos) -> Nanos {
    // 2026-01-01T00:00:00Z, rounded up to a window edge.
    let start = 1_767_225_600 * SECOND;
    start.div_ceil(window) * window
}

/// Runs `arrivals` (sorted, ns from t = 0) through every algorithm with `limit` calls per
/// `window` ns; the token bucket holds `burst` and starts full.
pub fn run(arrivals: &[i64], limit: u64, window: Nanos, burst: u64) -> Vec<AlgorithmRun> {
    let window = window.max(1);
    let origin = origin(window);
    Algorithm::ALL
        .into_iter()
        .map(|algorithm| {
            let limit = Limit {
                algorithm,
                requests: limit,
                window,
                burst: if algorithm == Algorithm::TokenBucket {
                    burst
                } else {
                    limit
                },
                origin: 0,
                recording: Recording::AdmittedOnly,
            };
            replay(arrivals, limit, origin)
        })
        .collect()
}

fn replay(arrivals: &[i64], limit: Limit, origin: Nanos) -> AlgorithmRun {
    let store = MemoryStore::with_shards(1);
    let clock = ManualClock::new(origin);
    let mut key = CounterKeyBuilder::new("simulate");
    key.entry("client", "one");
    let charge = [Charge {
        key: key.finish(0, limit.algorithm, limit.window),
        limit,
        cost: 1,
        gate: Gate::Enforced,
        lease: 0,
        descriptor: 0,
    }];
    let decisions: Vec<(i64, bool)> = arrivals
        .iter()
        .map(|&t| {
            clock.set(origin.saturating_add_signed(t));
            (t, store.apply_now(&charge, clock.now())[0].verdict.admitted)
        })
        .collect();
    let admitted: Vec<i64> = decisions.iter().filter(|d| d.1).map(|d| d.0).collect();
    AlgorithmRun {
        algorithm: limit.algorithm,
        admitted: admitted.len(),
        denied: decisions.len() - admitted.len(),
        max_in_any_window: max_in_window(&admitted, limit.window),
        decisions,
    }
}

/// The most of `times` (sorted) that fall in one half-open interval `[t, t + window)`. The
/// busiest interval can always be slid to start at one of the times, so checking those suffices.
pub fn max_in_window(times: &[i64], window: Nanos) -> usize {
    let window = i128::from(window);
    let mut best = 0;
    let mut end = 0;
    for (start, &t) in times.iter().enumerate() {
        while end < times.len() && i128::from(times[end]) < i128::from(t) + window {
            end += 1;
        }
        best = best.max(end - start);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::TrafficPattern;

    fn outcomes(
        pattern: TrafficPattern,
        n: u64,
        window: Nanos,
    ) -> Vec<(&'static str, usize, usize)> {
        let arrivals = pattern.arrivals(n, window).unwrap();
        run(&arrivals, n, window, n)
            .into_iter()
            .map(|o| (o.algorithm.name(), o.admitted, o.max_in_any_window))
            .collect()
    }

    /// Edge-burst: the fixed window admits 2N within four seconds; the sliding log exactly N;
    /// the two-bucket estimate N at coarse limits and at most N(1 + d/W) (d = 2 s here) at fine
    /// ones; the token bucket its burst plus what refilled in those four seconds.
    #[test]
    fn edge_burst() {
        for n in [5, 100] {
            let got = outcomes(TrafficPattern::EdgeBurst, n, 10 * SECOND);
            let n = n as usize;
            assert_eq!(got[0], ("fixed_window", 2 * n, 2 * n));
            assert_eq!(got[2], ("sliding_log", n, n));
            let (name, admitted, max) = got[1];
            assert_eq!(name, "sliding_window");
            assert_eq!(max, admitted);
            if n == 5 {
                assert_eq!(admitted, n);
            } else {
                assert!(admitted > n && admitted <= n + n / 5, "{admitted}");
            }
            let (name, admitted, max) = got[3];
            assert_eq!(name, "token_bucket");
            assert!(admitted > n && admitted <= n + 2 * n / 5, "{admitted}");
            assert_eq!(max, admitted);
        }
    }

    /// Double-rate: the window algorithms admit at most N per window and never more than N in
    /// any window (the two-bucket estimate errs low on steady overload); the token bucket
    /// admits its burst plus the refill, at most burst + N in any window.
    #[test]
    fn double_rate() {
        let got = outcomes(TrafficPattern::DoubleRate, 5, 10 * SECOND);
        assert_eq!(got[0], ("fixed_window", 30, 5));
        assert_eq!(got[2], ("sliding_log", 30, 5));
        let (_, admitted, max) = got[1];
        assert!(
            (20..=30).contains(&admitted) && max == 5,
            "{admitted} {max}"
        );
        let (_, admitted, max) = got[3];
        assert!(
            (30..=35).contains(&admitted) && max <= 10,
            "{admitted} {max}"
        );
    }

    /// Burst-trickle: the burst is cut to N by the window algorithms and to `burst` by the
    /// bucket; the sliding log never admits more than N in any window.
    #[test]
    fn burst_trickle() {
        let got = outcomes(TrafficPattern::BurstTrickle, 5, 10 * SECOND);
        assert_eq!(got[2].2, 5, "sliding_log is exact");
        assert_eq!(got[1].2, 5, "sliding_window holds N on this pattern");
        for (name, admitted, _) in &got {
            assert!(*admitted >= 5, "{name} admits at least the first N");
        }
    }

    /// The window count looks at every start, not just aligned edges.
    #[test]
    fn max_in_window_slides() {
        assert_eq!(max_in_window(&[], 10), 0);
        assert_eq!(max_in_window(&[0, 5, 9, 10, 14, 19], 10), 4);
        assert_eq!(max_in_window(&[-5, 0, 4], 10), 3);
    }
}
