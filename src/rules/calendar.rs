//! Calendar windows (`calendar:` with `timezone:`): the local day, week, month or year a call
//! falls in, its boundaries found with jiff in the IANA time-zone database compiled into the
//! binary (the release image has no `/usr/share/zoneinfo`, and none is read).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::algorithm::Limit;
use crate::clock::{Nanos, SECOND};
use crate::rules::{LimitKind, LimitRule, Unit};

/// The period of a calendar window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// From local midnight to the next.
    Day,
    /// From Monday's local midnight to the next Monday's.
    Week,
    /// From the 1st's local midnight to the next month's 1st.
    Month,
    /// From January 1st's local midnight to the next year's.
    Year,
}

impl Period {
    /// Every period, shortest first.
    pub const ALL: [Period; 4] = [Period::Day, Period::Week, Period::Month, Period::Year];

    /// The name used in rule files.
    pub fn name(self) -> &'static str {
        self.unit().name()
    }

    /// Parses a rule-file name in any case (as `unit:` is read); `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// The envoyproxy/ratelimit unit reported in `current_limit` (whose length is also the
    /// limit's nominal window: the `RateLimit-Policy` `w=`, the rule gauges, quota rates).
    pub fn unit(self) -> Unit {
        match self {
            Period::Day => Unit::Day,
            Period::Week => Unit::Week,
            Period::Month => Unit::Month,
            Period::Year => Unit::Year,
        }
    }
}

/// A limit's calendar: its period, its time zone, and the window last found.
pub struct Calendar {
    /// Day, week, month or year.
    pub period: Period,
    /// The time zone whose local midnight starts each window.
    pub zone: TimeZone,
    /// The zone's name as written (`UTC` when `timezone:` is absent).
    pub zone_name: Arc<str>,
    /// The window found last, packed as `start seconds << 32 | length seconds` (0: none):
    /// one atomic word, so a reader never sees the start of one window with the length of
    /// another. Boundaries are whole seconds (every zone's offsets are).
    last: AtomicU64,
}

impl Calendar {
    /// The calendar of `period` in the zone named `zone_name`; the error names the zone.
    pub fn new(period: Period, zone_name: &str) -> Result<Self, String> {
        let zone = TimeZone::get(zone_name).map_err(|_| {
            format!(
                "unknown time zone '{zone_name}' (expected an IANA name such as Europe/Paris, \
                 America/New_York or UTC)"
            )
        })?;
        Ok(Self {
            period,
            zone,
            zone_name: Arc::from(zone_name),
            last: AtomicU64::new(0),
        })
    }

    /// The window `[start, end)` that contains `now`, in Unix nanoseconds; `None` only for an
    /// instant jiff cannot place (far outside the years any clock reads).
    ///
    /// A call in the window found last costs one atomic load; the first call past its end
    /// asks jiff again (a time-zone lookup and two midnights, once per window per rule set).
    pub fn window(&self, now: Nanos) -> Option<(Nanos, Nanos)> {
        let packed = self.last.load(Ordering::Relaxed);
        let start = (packed >> 32) * SECOND;
        let end = start + (packed & 0xffff_ffff) * SECOND;
        if packed != 0 && (start..end).contains(&now) {
            return Some((start, end));
        }
        let (start, end) = self.find(now)?;
        let (start_s, length_s) = (start / SECOND, (end - start) / SECOND);
        // Windows from 2106 on (past 32 bits of seconds) are found on every call.
        if let (Ok(start_s), Ok(length_s)) = (u32::try_from(start_s), u32::try_from(length_s)) {
            let packed = u64::from(start_s) << 32 | u64::from(length_s);
            self.last.store(packed, Ordering::Relaxed);
        }
        Some((start, end))
    }

    /// The window containing `now`, computed.
    fn find(&self, now: Nanos) -> Option<(Nanos, Nanos)> {
        let at = Timestamp::from_nanosecond(i128::from(now)).ok()?;
        let today = at.to_zoned(self.zone.clone()).date();
        let (first, next) = match self.period {
            Period::Day => (today, today.checked_add(1.day()).ok()?),
            Period::Week => {
                let monday = today
                    .checked_sub(i64::from(today.weekday().to_monday_zero_offset()).days())
                    .ok()?;
                (monday, monday.checked_add(1.week()).ok()?)
            }
            Period::Month => {
                let first = today.first_of_month();
                (first, first.checked_add(1.month()).ok()?)
            }
            Period::Year => {
                let first = today.first_of_year();
                (first, first.checked_add(1.year()).ok()?)
            }
        };
        let (start, end) = (self.midnight(first)?, self.midnight(next)?);
        (start <= now && now < end).then_some((start, end))
    }

    /// The first instant of `date` in the zone: its local midnight, or the end of a clock
    /// change that skips midnight (jiff's compatible reading: the later side of a gap, the
    /// earlier of a fold).
    fn midnight(&self, date: Date) -> Option<Nanos> {
        let start = date.to_zoned(self.zone.clone()).ok()?.timestamp();
        Nanos::try_from(start.as_nanosecond()).ok()
    }
}

impl fmt::Display for Calendar {
    /// `day (Europe/Paris)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.period.name(), self.zone_name)
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("period", &self.period)
            .field("zone", &self.zone_name)
            .finish()
    }
}

impl PartialEq for Calendar {
    /// The same period in the same zone (the window found last is no part of it).
    fn eq(&self, other: &Self) -> bool {
        self.period == other.period && self.zone == other.zone
    }
}

impl Eq for Calendar {}

impl LimitRule {
    /// The limit to count at `now`: the rule's own, or for a calendar limit the same limit
    /// over the local period `now` falls in (its start the limit's origin, its length the
    /// window). `None` for an unlimited rule.
    pub fn counted_at(&self, now: Nanos) -> Option<Limit> {
        let LimitKind::Counted(limit) = self.kind else {
            return None;
        };
        let window = self.calendar.as_deref().and_then(|c| c.window(now));
        Some(match window {
            Some((start, end)) => Limit {
                window: end - start,
                origin: start,
                ..limit
            },
            // No calendar, or an instant no calendar can place: the nominal period.
            None => limit,
        })
    }
}

#[cfg(test)]
mod tests;
