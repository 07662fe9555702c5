//! The timing Envoy 1.40's quota client keeps, and the caps and delays the book derives from it.

use crate::clock::{Nanos, SECOND};

/// How often Envoy 1.40 reports every bucket of a stream (hard-coded there, whatever the
/// bucket's `reporting_interval` says).
pub const REPORT_INTERVAL: Nanos = 5 * SECOND;

/// The `assignment_time_to_live` of every assignment, in whole seconds: two report intervals,
/// so one lost or late answer never lets an assignment lapse (each report restarts it).
pub const ASSIGNMENT_TTL_SECONDS: u32 = 10;

/// The most buckets one stream may report; past it `report` fails with
/// [`QuotaError::TooManyBuckets`](super::QuotaError::TooManyBuckets).
pub const MAX_BUCKETS_PER_STREAM: usize = 1_000;

/// A bucket that no stream has reported for this long is forgotten (abandoned to whoever still
/// holds it). Envoy reports every bucket it tracks each interval, idle or not, so silence means
/// its streams are gone; this comes before [`SILENT_AFTER`], so an open stream still holding the
/// bucket is told to abandon it before its holder expires.
pub const FORGET_AFTER: Nanos = 2 * REPORT_INTERVAL;

/// A stream that has not reported a bucket for this long (two missed reports) gets no more
/// pushes for it; its share stays reserved until its assignment has expired in the Envoy.
pub const SILENT_AFTER: Nanos = 2 * REPORT_INTERVAL + SECOND;

/// When an Envoy returns to a new book holding a bucket (after a restart), the book hands out no
/// share of a counted limit until this long after it was created: every Envoy that still holds
/// an assignment from the previous process reconnects at its next report tick (within one
/// interval) and is counted before the limit is split. The extra second covers Envoy's
/// whole-second report times. A fresh start is answered at once.
pub const WARM_UP: Nanos = REPORT_INTERVAL + SECOND;

/// How long after the book last answered a stream its assignment may still be live in the
/// Envoy: the TTL plus a second, since Envoy counts whole seconds and the tick runs each second.
pub const HELD_FOR: Nanos = ASSIGNMENT_TTL_SECONDS as Nanos * SECOND + SECOND;

/// How much more than its demand a stream is offered, so a growing stream is not refused
/// before its next report moves its share: a quarter more, at least one token per fill.
pub const HEADROOM: f64 = 1.25;
