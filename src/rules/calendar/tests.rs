//! Calendar windows at the edges: clock changes (23- and 25-hour days, a day with no
//! midnight), month lengths, weeks from Monday, years, and the cached window.

use super::*;
use crate::clock::{Clock, ManualClock};

/// Unix nanoseconds of an RFC 3339 instant.
fn at(text: &str) -> Nanos {
    let ts: Timestamp = text.parse().expect("an instant");
    Nanos::try_from(ts.as_nanosecond()).expect("after 1970")
}

fn calendar(period: Period, zone: &str) -> Calendar {
    Calendar::new(period, zone).expect("a known zone")
}

/// The window of `period` in `zone` at `now`, as instants.
fn window(period: Period, zone: &str, now: &str) -> (Nanos, Nanos) {
    calendar(period, zone).window(at(now)).expect("a window")
}

const HOUR: Nanos = 3_600 * SECOND;
const DAY: Nanos = 24 * HOUR;

/// Paris springs forward on 2026-03-29: that day starts at 23:00 UTC the day before and
/// lasts 23 hours.
#[test]
fn spring_forward_day_lasts_23_hours() {
    let (start, end) = window(Period::Day, "Europe/Paris", "2026-03-29T12:00:00Z");
    assert_eq!(start, at("2026-03-28T23:00:00Z"));
    assert_eq!(end, at("2026-03-29T22:00:00Z"));
    assert_eq!(end - start, 23 * HOUR);
    let (start, end) = window(Period::Day, "America/New_York", "2026-03-08T12:00:00Z");
    assert_eq!(
        (start, end - start),
        (at("2026-03-08T05:00:00Z"), 23 * HOUR)
    );
}

/// Paris falls back on 2026-10-25: that day lasts 25 hours.
#[test]
fn fall_back_day_lasts_25_hours() {
    let (start, end) = window(Period::Day, "Europe/Paris", "2026-10-25T12:00:00Z");
    assert_eq!(start, at("2026-10-24T22:00:00Z"));
    assert_eq!(end, at("2026-10-25T23:00:00Z"));
    assert_eq!(end - start, 25 * HOUR);
    let (start, end) = window(Period::Day, "America/New_York", "2026-11-01T12:00:00Z");
    assert_eq!(
        (start, end - start),
        (at("2026-11-01T04:00:00Z"), 25 * HOUR)
    );
}

/// São Paulo's clocks went from 00:00 to 01:00 on 2018-11-04: the day starts at 01:00 local,
/// the first instant it has.
#[test]
fn a_day_without_midnight_starts_when_the_clock_jumps() {
    let (start, end) = window(Period::Day, "America/Sao_Paulo", "2018-11-04T12:00:00Z");
    assert_eq!(start, at("2018-11-04T03:00:00Z"));
    assert_eq!(end - start, 23 * HOUR);
}

/// A window holds from its first instant to the one before the next window's.
#[test]
fn boundaries_are_inclusive_then_exclusive() {
    let paris = calendar(Period::Day, "Europe/Paris");
    let midnight = at("2026-03-29T22:00:00Z");
    assert_eq!(paris.window(midnight - 1).unwrap().1, midnight);
    assert_eq!(paris.window(midnight).unwrap().0, midnight);
    assert_eq!(paris.window(midnight).unwrap().1, midnight + DAY);
}

/// Months are as long as the calendar says: February 28 or 29 days, April 30, May 31, and
/// Paris's March an hour short of 31 days.
#[test]
fn months_follow_the_calendar() {
    let length = |zone, now| {
        let (start, end) = window(Period::Month, zone, now);
        end - start
    };
    assert_eq!(length("UTC", "2026-02-14T00:00:00Z"), 28 * DAY);
    assert_eq!(length("UTC", "2028-02-29T23:59:59Z"), 29 * DAY);
    assert_eq!(length("UTC", "2026-04-30T10:00:00Z"), 30 * DAY);
    assert_eq!(length("UTC", "2026-05-01T00:00:00Z"), 31 * DAY);
    assert_eq!(
        length("Europe/Paris", "2026-03-15T00:00:00Z"),
        31 * DAY - HOUR
    );
    let (start, end) = window(Period::Month, "Europe/Paris", "2026-03-31T22:30:00Z");
    assert_eq!(
        (start, end),
        (at("2026-03-31T22:00:00Z"), at("2026-04-30T22:00:00Z"))
    );
}

/// Weeks start on Monday at local midnight, whatever day the call falls on.
#[test]
fn weeks_start_on_monday() {
    for now in [
        "2026-03-02T00:00:00Z",
        "2026-03-04T12:00:00Z",
        "2026-03-08T23:59:59Z",
    ] {
        let (start, end) = window(Period::Week, "UTC", now);
        assert_eq!(
            (start, end),
            (at("2026-03-02T00:00:00Z"), at("2026-03-09T00:00:00Z"))
        );
    }
    // Sunday 23:30 in Paris is still the week that began on Monday 23 March.
    let (start, end) = window(Period::Week, "Europe/Paris", "2026-03-29T21:30:00Z");
    assert_eq!(start, at("2026-03-22T23:00:00Z"));
    assert_eq!(end - start, 7 * DAY - HOUR);
}

/// Years start on January 1st at local midnight and last 365 or 366 days.
#[test]
fn years_start_on_january_first() {
    let (start, end) = window(Period::Year, "Europe/Paris", "2026-07-01T00:00:00Z");
    assert_eq!(
        (start, end),
        (at("2025-12-31T23:00:00Z"), at("2026-12-31T23:00:00Z"))
    );
    let (start, end) = window(Period::Year, "UTC", "2028-06-01T00:00:00Z");
    assert_eq!(
        (start, end - start),
        (at("2028-01-01T00:00:00Z"), 366 * DAY)
    );
}

/// The window found last answers the calls inside it; a call outside it (later, or a clock
/// stepped back) finds its own.
#[test]
fn the_cached_window_is_reused_and_replaced() {
    let paris = calendar(Period::Day, "Europe/Paris");
    let clock = ManualClock::new(at("2026-03-29T08:00:00Z"));
    let first = paris.window(clock.now()).unwrap();
    clock.advance(std::time::Duration::from_secs(12 * 3_600));
    assert_eq!(paris.window(clock.now()), Some(first));
    clock.advance(std::time::Duration::from_secs(2 * 3_600));
    let second = paris.window(clock.now()).unwrap();
    assert_eq!(second.0, first.1);
    assert_eq!(paris.window(first.0), Some(first));
}

/// A name outside the database is refused, naming it; `UTC` is always there.
#[test]
fn unknown_zones_are_named() {
    let error = Calendar::new(Period::Day, "Europe/Pariss").unwrap_err();
    assert!(error.contains("'Europe/Pariss'"), "{error}");
    assert!(Calendar::new(Period::Day, "").is_err());
    assert!(Calendar::new(Period::Day, "UTC").is_ok());
    assert_eq!(Period::from_name("Month"), Some(Period::Month));
    assert_eq!(Period::from_name("fortnight"), None);
}

/// A calendar rule counts over its window at `now`; a rule without one keeps its limit.
#[test]
fn a_rule_counts_over_the_window_of_now() {
    let limit = Limit {
        algorithm: crate::algorithm::Algorithm::FixedWindow,
        requests: 10,
        window: DAY,
        burst: 10,
        origin: 0,
        recording: Default::default(),
    };
    let mut rule = LimitRule {
        kind: LimitKind::Counted(limit),
        requests_per_unit: 10,
        unit: Some(Unit::Day),
        name: None,
        replaces: Vec::new(),
        index: 0,
        policy: Arc::from(""),
        lease: 0,
        calendar: None,
        scope: crate::rules::Scope::Region,
    };
    let now = at("2026-03-29T12:00:00Z");
    assert_eq!(rule.counted_at(now), Some(limit));
    rule.calendar = Some(Arc::new(calendar(Period::Day, "Europe/Paris")));
    let counted = rule.counted_at(now).unwrap();
    assert_eq!(counted.origin, at("2026-03-28T23:00:00Z"));
    assert_eq!(counted.window, 23 * HOUR);
    assert_eq!(counted.window_start(now), counted.origin);
}
