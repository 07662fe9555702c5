//! How often a stream reports a bucket, learned from its reports, and the delays that follow.

use crate::clock::{Nanos, SECOND};
use crate::rlqs::limits::{LONGEST_INTERVAL, REPORT_INTERVAL, SHORTEST_INTERVAL};

/// A report interval in whole seconds, from [`SHORTEST_INTERVAL`] to [`LONGEST_INTERVAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Interval(Nanos);

impl Default for Interval {
    /// Envoy 1.40's.
    fn default() -> Self {
        Interval(REPORT_INTERVAL)
    }
}

impl Interval {
    /// The longest the book learns.
    pub(crate) fn longest() -> Self {
        Interval(LONGEST_INTERVAL)
    }

    /// The time to live of an assignment, in whole seconds: two intervals, so one lost or late
    /// answer never lets it lapse (each report restarts it).
    pub(crate) fn ttl_seconds(self) -> u32 {
        (2 * self.0 / SECOND) as u32
    }

    /// A holder that has not reported for this long (two missed reports) gets no more pushes.
    pub(crate) fn silent_after(self) -> Nanos {
        2 * self.0 + SECOND
    }

    /// A bucket nobody has reported for this long (two of its holders' longest interval) is
    /// forgotten; before [`Interval::silent_after`], so a stream still holding it is told to
    /// abandon it before its holder expires.
    pub(crate) fn forget_after(self) -> Nanos {
        2 * self.0
    }

    pub(crate) fn nanos(self) -> Nanos {
        self.0
    }
}

/// How often a stream reports a bucket: the larger of the intervals its last two reports
/// showed (each its `time_elapsed`, else the time since the report before), so a stream that
/// reports less often is followed at once and one that reports more often after two reports.
/// Unknown until a report covers time (Envoy's first report of a bucket it has just made
/// covers none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cadence {
    last: Option<Interval>,
    previous: Option<Interval>,
}

impl Cadence {
    /// Records a report covering `elapsed`, `since` the holder's last (`None`: its first),
    /// learning at most `longest`.
    pub(crate) fn record(&mut self, elapsed: Nanos, since: Option<Nanos>, longest: Interval) {
        let seen = if elapsed > 0 {
            elapsed
        } else {
            match since.filter(|&s| s > 0) {
                Some(since) => since,
                None => return,
            }
        };
        let whole = seen.div_ceil(SECOND).saturating_mul(SECOND);
        let top = longest.0.max(SHORTEST_INTERVAL);
        self.previous = self.last;
        self.last = Some(Interval(whole.clamp(SHORTEST_INTERVAL, top)));
    }

    /// The interval learned, `None` until a report covered time.
    pub(crate) fn interval(&self) -> Option<Interval> {
        match (self.last, self.previous) {
            (Some(last), Some(previous)) => Some(last.max(previous)),
            (last, _) => last,
        }
    }

    /// The TTL to send: of the interval learned, else of Envoy 1.40's.
    pub(crate) fn ttl_seconds(&self) -> u32 {
        self.interval().unwrap_or_default().ttl_seconds()
    }

    /// How long the book waits for a report before it takes the holder for silent (or, for a
    /// bucket, forgotten): the interval learned, else the longest, so a stream that reports
    /// rarely is not taken for gone before its second report.
    pub(crate) fn patience(&self) -> Interval {
        self.interval().unwrap_or(Interval::longest())
    }
}

/// How long after it was sent an assignment with a TTL of `ttl_seconds` may still be live in its
/// Envoy: the TTL and a second, as Envoy counts whole seconds and the tick runs each second.
pub(crate) fn held_for(ttl_seconds: u32) -> Nanos {
    ttl_seconds as Nanos * SECOND + SECOND
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_from_elapsed_then_the_gap_in_whole_seconds_within_bounds() {
        let longest = Interval::longest();
        let mut c = Cadence::default();
        c.record(0, None, longest);
        assert_eq!((c.interval(), c.ttl_seconds()), (None, 10));
        assert_eq!(c.patience(), longest);
        c.record(30 * SECOND, Some(2 * SECOND), longest);
        assert_eq!(c.ttl_seconds(), 60);
        assert_eq!(c.patience().silent_after(), 61 * SECOND);
        // Faster reports are followed after two of them.
        c.record(0, Some(SECOND + 1), longest);
        assert_eq!(c.ttl_seconds(), 60);
        c.record(SECOND / 10, None, longest);
        assert_eq!(c.ttl_seconds(), 4);
        c.record(SECOND / 10, None, longest);
        assert_eq!(c.ttl_seconds(), 2);
        c.record(3_600 * SECOND, None, longest);
        assert_eq!(c.interval(), Some(longest));
        let mut capped = Cadence::default();
        capped.record(30 * SECOND, None, Interval::default());
        assert_eq!(capped.ttl_seconds(), 10);
        assert_eq!(held_for(10), 11 * SECOND);
    }
}
