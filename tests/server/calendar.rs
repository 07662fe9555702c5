//! Calendar limits through the real server in-process on a manual clock: `duration_until_reset`
//! and `Retry-After` count to the local boundary (a 23-hour day, a 25-hour day, a month's end in
//! another zone), the next local day is a fresh counter, and `/rlconfig`, `/ui`'s rule tree and
//! its explanation show the calendar.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sluice::clock::Nanos;

const RULES: &str = r#"
domain: cal
descriptors:
  - key: paris
    rate_limit: { requests_per_unit: 2, calendar: day, timezone: Europe/Paris, name: daily }
  - key: monthly
    rate_limit: { requests_per_unit: 1, calendar: month, timezone: America/New_York }
"#;

/// Unix nanoseconds of an RFC 3339 instant in UTC (`YYYY-MM-DDTHH:MM:SSZ`).
fn at(text: &str) -> Nanos {
    let ts: jiff::Timestamp = text.parse().expect("an instant");
    Nanos::try_from(ts.as_nanosecond()).expect("after 1970")
}

const HOUR_MS: u64 = 3_600_000;

/// On the day Paris springs forward, 22:00 local is two hours before midnight (20:00 UTC,
/// midnight at 22:00 UTC): the counter resets then, `Retry-After` says so, and the next day
/// (an ordinary 24 hours) is a new counter.
#[tokio::test]
async fn a_paris_day_resets_at_local_midnight_across_spring_forward() {
    let server = TestServer::start(RULES).await;
    server.clock.set(at("2026-03-29T20:00:00Z"));
    let mut client = server.client().await;
    let req = || one_descriptor("cal", &[("paris", "alice")]);
    for remaining in [1, 0] {
        let r = call(&mut client, req()).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, remaining)
        );
        assert_eq!(reset_ms(&r, 0), 2 * HOUR_MS);
    }
    let refused = call(&mut client, req()).await;
    assert_eq!(refused.overall_code, OVER);
    assert_eq!(reset_ms(&refused, 0), 2 * HOUR_MS);
    assert_eq!(header(&refused, "Retry-After"), Some("7200"));
    // The nominal day is the policy's window; the reset is the real one.
    assert_eq!(
        header(&refused, "RateLimit-Policy"),
        Some("\"daily\";q=2;w=86400")
    );
    server.clock.set(at("2026-03-29T22:00:00Z") - 1);
    assert_eq!(call(&mut client, req()).await.overall_code, OVER);
    server.clock.set(at("2026-03-29T22:00:00Z"));
    let next_day = call(&mut client, req()).await;
    assert_eq!(
        (next_day.overall_code, next_day.statuses[0].limit_remaining),
        (OK, 1)
    );
    assert_eq!(reset_ms(&next_day, 0), 24 * HOUR_MS);
    server.stop().await;
}

/// The day Paris falls back lasts 25 hours: a call at its first instant resets 25 hours on.
#[tokio::test]
async fn a_paris_day_lasts_25_hours_when_the_clocks_fall_back() {
    let server = TestServer::start(RULES).await;
    server.clock.set(at("2026-10-24T22:00:00Z"));
    let mut client = server.client().await;
    let req = || one_descriptor("cal", &[("paris", "bob")]);
    let r = call(&mut client, req()).await;
    assert_eq!(reset_ms(&r, 0), 25 * HOUR_MS);
    call(&mut client, req()).await;
    server.clock.set(at("2026-10-25T22:59:59Z"));
    let refused = call(&mut client, req()).await;
    assert_eq!(refused.overall_code, OVER);
    assert_eq!(header(&refused, "Retry-After"), Some("1"));
    server.stop().await;
}

/// February in New York ends at 05:00 UTC on March 1st: seventeen hours after noon UTC on the
/// 28th; `/rlconfig`, the rule tree and the explanation show both calendars.
#[tokio::test]
async fn a_month_ends_in_its_own_zone_and_the_views_show_it() {
    let server = TestServer::start(RULES).await;
    server.clock.set(at("2026-02-28T12:00:00Z"));
    let mut client = server.client().await;
    let req = || one_descriptor("cal", &[("monthly", "carol")]);
    assert_eq!(call(&mut client, req()).await.overall_code, OK);
    let refused = call(&mut client, req()).await;
    assert_eq!(refused.overall_code, OVER);
    assert_eq!(
        header(&refused, "Retry-After"),
        Some((17 * 3_600).to_string().as_str())
    );
    let current = refused.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        current.unit,
        sluice::proto::rate_limit_response::rate_limit::Unit::Month as i32
    );

    let (status, rlconfig) = http(server.http_addr, "GET", "/rlconfig", "").await;
    assert_eq!(status, 200);
    assert!(
        rlconfig.contains(
            "cal.paris: unit=DAY requests_per_unit=2, shadow_mode: false, quota_mode: false, \
             algorithm=fixed_window calendar=day timezone=Europe/Paris"
        ),
        "{rlconfig}"
    );
    assert!(
        rlconfig.contains("calendar=month timezone=America/New_York"),
        "{rlconfig}"
    );

    let (_, rules) = http(server.http_addr, "GET", "/ui/api/rules", "").await;
    let rules: Value = serde_json::from_str(&rules).unwrap();
    let text = rules.to_string();
    assert!(text.contains("\"2 per day (Europe/Paris)\""), "{text}");
    assert!(text.contains("\"timezone\":\"America/New_York\""), "{text}");

    let body = json!({ "domain": "cal", "descriptors": ["monthly=carol"] }).to_string();
    let (status, answer) = http(server.http_addr, "POST", "/ui/api/explain", &body).await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let counter = &answer["descriptors"][0]["limits"][0]["counter"];
    assert_eq!(counter["admits"], false, "{answer}");
    assert_eq!(counter["reset_after_ms"], 17 * HOUR_MS);
    server.stop().await;
}
