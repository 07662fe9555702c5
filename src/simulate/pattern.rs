//! The built-in traffic patterns of `sluice simulate`, as arrival times relative to a window edge.

use sluice::clock::SECOND;

/// Most calls one simulation may hold (a pattern's size grows with `--limit`).
pub const MAX_CALLS: usize = 1_000_000;

/// A traffic pattern that shows how an algorithm treats one kind of traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TrafficPattern {
    /// N calls just before a window edge and N just after it: the fixed window's 2N burst.
    EdgeBurst,
    /// A steady stream at twice the limit for six windows.
    DoubleRate,
    /// A burst of 2N at the start, then a trickle at exactly the limit's rate.
    BurstTrickle,
}

impl TrafficPattern {
    /// The name used on the command line and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            TrafficPattern::EdgeBurst => "edge-burst",
            TrafficPattern::DoubleRate => "double-rate",
            TrafficPattern::BurstTrickle => "burst-trickle",
        }
    }

    /// Arrival times in nanoseconds from t = 0 (a window edge), in time order, for a limit of
    /// `limit` calls per `window` nanoseconds. Times may be negative (edge-burst with a window
    /// under 2 s starts before t = 0). Errors when the pattern would exceed [`MAX_CALLS`].
    pub fn arrivals(self, limit: u64, window: u64) -> Result<Vec<i64>, String> {
        let calls = match self {
            TrafficPattern::EdgeBurst => limit.saturating_mul(2),
            TrafficPattern::DoubleRate => limit.saturating_mul(12),
            // The trickle adds about 3N calls at most (one every W/N for under 3W).
            TrafficPattern::BurstTrickle => limit.saturating_mul(5),
        };
        if calls > MAX_CALLS as u64 {
            return Err(format!(
                "pattern {} with --limit {limit} would simulate about {calls} calls \
                 (at most {MAX_CALLS}); use a smaller --limit",
                self.name()
            ));
        }
        // Exact integer spacing: the k-th of `parts` steps across `span` is at k*span/parts.
        let step = |k: u64, span: u64, parts: u64| -> i64 {
            (u128::from(k) * u128::from(span) / u128::from(parts.max(1))) as i64
        };
        let (w, n) = (window as i64, limit);
        let times = match self {
            TrafficPattern::EdgeBurst => {
                let spread = 1_990 * sluice::clock::MILLI;
                let before = (0..n).map(|i| w - 2 * SECOND as i64 + step(i, spread, n));
                let after = (0..n).map(|i| w + step(i, spread, n));
                before.chain(after).collect()
            }
            TrafficPattern::DoubleRate => (0..12 * n).map(|k| step(k, window, 2 * n)).collect(),
            TrafficPattern::BurstTrickle => {
                let burst = (0..2 * n).map(|i| step(i, SECOND, 2 * n));
                let trickle = (0..)
                    .map(|j| 2 * SECOND as i64 + step(j, window, n))
                    .take_while(|&t| t < 3 * w);
                burst.chain(trickle).collect()
            }
        };
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Edge-burst puts N calls in the two seconds before the edge and N in the two after it.
    #[test]
    fn edge_burst_straddles_the_edge() {
        let t = TrafficPattern::EdgeBurst.arrivals(5, 10 * SECOND).unwrap();
        assert_eq!(t.len(), 10);
        assert_eq!(t[0], 8 * SECOND as i64);
        assert!(
            t[..5]
                .iter()
                .all(|&x| (8 * SECOND as i64..10 * SECOND as i64).contains(&x))
        );
        assert_eq!(t[5], 10 * SECOND as i64);
        assert_eq!(
            t[9],
            10 * SECOND as i64 + 4 * 398 * sluice::clock::MILLI as i64
        );
    }

    /// Double-rate sends 2N per window for six windows, evenly spaced from t = 0.
    #[test]
    fn double_rate_is_twice_the_limit() {
        let t = TrafficPattern::DoubleRate.arrivals(5, 10 * SECOND).unwrap();
        assert_eq!(t.len(), 60);
        assert_eq!(t[1], SECOND as i64);
        assert!(t.windows(2).all(|p| p[1] - p[0] == SECOND as i64));
    }

    /// Burst-trickle is 2N calls in the first second, then one call per W/N up to 3W.
    #[test]
    fn burst_trickle_shape() {
        let t = TrafficPattern::BurstTrickle
            .arrivals(5, 10 * SECOND)
            .unwrap();
        assert_eq!(t[9], 900 * sluice::clock::MILLI as i64);
        assert_eq!(t[10], 2 * SECOND as i64);
        assert_eq!(*t.last().unwrap(), 28 * SECOND as i64);
        assert_eq!(t.len(), 10 + 14);
    }

    /// A limit that would produce millions of calls is refused, not allocated.
    #[test]
    fn huge_limits_are_refused() {
        let err = TrafficPattern::DoubleRate
            .arrivals(u64::MAX, SECOND)
            .unwrap_err();
        assert!(err.contains("use a smaller --limit"), "{err}");
    }
}
