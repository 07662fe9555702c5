//! The timing Envoy 1.40's quota client keeps, the caps and delays the book derives from it, and
//! the timing of the replicas' portions.

use crate::clock::{Nanos, SECOND};

/// How often Envoy 1.40 reports every bucket of a stream (hard-coded there, whatever the
/// bucket's `reporting_interval` says): the interval the book assumes of a stream until its
/// reports show another. The TTL and the delays below are those of this interval; each holder's
/// follow its own (`book/interval.rs`).
pub const REPORT_INTERVAL: Nanos = 5 * SECOND;

/// The shortest report interval the book learns: Envoy counts TTLs and fill intervals in whole
/// seconds, so a faster stream is served as one reporting every second.
pub const SHORTEST_INTERVAL: Nanos = SECOND;

/// The longest report interval the book learns: a stream reporting less often gets assignments
/// of two minutes, which lapse between its reports.
pub const LONGEST_INTERVAL: Nanos = 60 * SECOND;

/// How long an assignment may be live in its Envoy at the longest (a TTL of two longest
/// intervals, and a second).
pub const LONGEST_HELD_FOR: Nanos = 2 * LONGEST_INTERVAL + SECOND;

/// The `assignment_time_to_live` of an assignment to a stream reporting every
/// [`REPORT_INTERVAL`], in whole seconds: two report intervals, so one lost or late answer never
/// lets an assignment lapse (each report restarts it).
pub const ASSIGNMENT_TTL_SECONDS: u32 = 10;

/// The most buckets one stream may report; past it `report` fails with
/// [`RlqsError::Exhausted`](super::RlqsError::Exhausted), ending the stream.
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

/// A report to a bucket at most this many streams hold re-splits it at once (a bounded cost),
/// pushing the others their changes before it is answered; past it the report is answered from
/// the last split and the bucket re-split at the next tick, so a report costs the same however
/// many streams share its bucket.
pub const SPLIT_AT_ONCE: usize = 32;

/// How much more than its demand a stream is offered, so a growing stream is not refused
/// before its next report moves its share: a quarter more, at least one token per fill. To all
/// while the limit covers every stream's demand with it; when streams are refused, only to
/// streams asking less than the fair share that were refused lately, up to it.
pub const HEADROOM: f64 = 1.25;

/// How long after a claim was sent its portion may be handed out; then only the floor. Claims
/// run every second (every [`AT_REST_CLAIM_EVERY`] for a bucket at rest), so one may fail or be
/// slow without the portion going stale.
pub const PORTION_FRESH: Nanos = 3 * SECOND;

/// How often a replica sharing a store claims its portions (`rlqs::claims`).
pub const CLAIM_EVERY: Nanos = SECOND;

/// How often a bucket at rest is claimed: its last claim got all it asked, and neither what this
/// replica wants of it nor its demand moved materially since. Claims run once a second; such a
/// bucket is left out of every other one, which halves the store's work for a fleet whose
/// portions do not move, and it is still claimed before its portion goes stale.
pub const AT_REST_CLAIM_EVERY: Nanos = 2 * SECOND;

/// How long the store reserves a portion after its claim: as long as a share handed out under
/// it (up to [`PORTION_FRESH`] after the claim) may be live in an Envoy.
pub const PORTION_TTL: Nanos = PORTION_FRESH + HELD_FOR;

/// How long the store reserves a replica's floor after its last claim: while a replica cut off
/// from the store (or the store down) may go on handing out its floor.
pub const MEMBER_FOR: Nanos = 60 * SECOND;

/// Until this long after its claim a floor may be handed out: every share handed out under it
/// has expired before the store frees it.
pub const FLOOR_USABLE: Nanos = MEMBER_FOR - HELD_FOR;

/// After the store is found without its portions (a restart that lost them), how long it grants
/// no replica more than it holds: every live replica claims (and so declares what it holds) in
/// that time, a claim a second each taking up to the store's timeout.
pub const SETTLE: Nanos = 3 * SECOND;

/// Streams open at once, past which a new stream is refused (`RESOURCE_EXHAUSTED`).
pub const MAX_STREAMS: usize = 10_000;

/// Streams open at once that have not sent their first report yet: silent streams cannot take
/// the places of bound ones.
pub const MAX_UNBOUND_STREAMS: usize = 1_000;

/// A stream that sends no first report within this long (three report intervals; Envoy sends
/// its first at once) is ended.
pub const FIRST_REPORT_WITHIN: Nanos = 3 * REPORT_INTERVAL;

/// Answers queued for a stream that has not read them yet; a stream that falls this far behind
/// is ended (its shares given back), so a client that never reads holds nothing.
pub const MAX_PENDING_ANSWERS: usize = 64;

/// The longest domain a stream may name, as for an RLS call.
pub const MAX_DOMAIN_BYTES: usize = 1_024;
