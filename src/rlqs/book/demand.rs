//! A stream's demand for one bucket, read from its last two usage reports.

use crate::clock::{Nanos, SECOND};

/// Requests per second a stream offered a bucket (allowed + denied), smoothed as the larger of
/// its last two reports: a stream whose traffic dips for one interval keeps its share one more
/// interval, and one that grows is seen at once.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Demand {
    last: Option<f64>,
    previous: Option<f64>,
    /// Reports since the last one that counted a refused request; a new stream's count
    /// starts at 0, as if it had just been refused: how its requests arrive is not known yet.
    since_refused: u8,
}

/// A stream refused any of its requests in one of its last this many reports (or new, and not
/// yet reported this many times) is "refused lately" (15 s at Envoy 1.40's 5 s reports).
const REFUSED_LATELY: u8 = 3;

impl Demand {
    /// Records one report of `offered` requests, `refused` of them refused under the stream's
    /// share. A report with no elapsed time (Envoy's immediate report of a bucket it has just
    /// made) says nothing about a rate and is skipped.
    pub(crate) fn record(&mut self, offered: u64, refused: u64, elapsed: Nanos) {
        if elapsed == 0 {
            return;
        }
        let rate = offered as f64 * SECOND as f64 / elapsed as f64;
        self.previous = self.last;
        self.last = Some(rate);
        self.since_refused = match refused {
            0 => self.since_refused.saturating_add(1),
            _ => 0,
        };
    }

    /// Whether one of the last [`REFUSED_LATELY`] reports counted a refused request, or the
    /// stream has not made that many: a stream asking less than the fair share that its share
    /// refused (its requests arrive unevenly) is offered headroom, one whose share serves it is
    /// not.
    pub(crate) fn refused_lately(&self) -> bool {
        self.since_refused < REFUSED_LATELY
    }

    /// The demand per second, `None` until a report with elapsed time has arrived.
    pub(crate) fn per_second(&self) -> Option<f64> {
        match (self.last, self.previous) {
            (Some(last), Some(previous)) => Some(last.max(previous)),
            (last, _) => last,
        }
    }
}
