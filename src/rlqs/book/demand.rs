//! A stream's demand for one bucket, read from its last two usage reports.

use crate::clock::{Nanos, SECOND};

/// Requests per second a stream offered a bucket (allowed + denied), smoothed as the larger of
/// its last two reports: a stream whose traffic dips for one interval keeps its share one more
/// interval, and one that grows is seen at once.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Demand {
    last: Option<f64>,
    previous: Option<f64>,
}

impl Demand {
    /// Records one report. A report with no elapsed time (Envoy's immediate report of a bucket
    /// it has just made) says nothing about a rate and is skipped.
    pub(crate) fn record(&mut self, offered: u64, elapsed: Nanos) {
        if elapsed == 0 {
            return;
        }
        let rate = offered as f64 * SECOND as f64 / elapsed as f64;
        self.previous = self.last;
        self.last = Some(rate);
    }

    /// The demand per second, `None` until a report with elapsed time has arrived.
    pub(crate) fn per_second(&self) -> Option<f64> {
        match (self.last, self.previous) {
            (Some(last), Some(previous)) => Some(last.max(previous)),
            (last, _) => last,
        }
    }
}
