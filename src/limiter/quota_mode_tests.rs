//! Quota-mode descriptors with several limits (`rate_limits:`), through the whole limiter (real
//! rules, the embedded store, a manual clock): a quota-mode descriptor is over when any of its
//! limits is, and a call refused because every quota-mode descriptor is over charges nothing.

use super::response_options_tests::limiter_for;
use super::*;
use crate::clock::{ManualClock, SECOND};

/// `q`: 3 an hour and 2 a minute, in quota mode; `p`: 1 a minute, in quota mode.
const RULES: &str = r#"
domain: d
descriptors:
  - key: q
    quota_mode: true
    rate_limits:
      - { unit: hour, requests_per_unit: 3, algorithm: fixed_window }
      - { unit: minute, requests_per_unit: 2, algorithm: fixed_window }
  - key: p
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: fixed_window }
"#;

/// 2026-01-01T00:00:02Z.
const START: u64 = 1_767_225_600 * SECOND + 2 * SECOND;

struct QuotaModeFixture {
    limiter: Limiter,
    clock: ManualClock,
}

fn fixture() -> QuotaModeFixture {
    let clock = ManualClock::new(START);
    let limiter = limiter_for(RULES, LimiterOptions::default(), &clock);
    QuotaModeFixture { limiter, clock }
}

impl QuotaModeFixture {
    fn call(&self, keys: &[&str]) -> Decision {
        let request = Request {
            domain: "d".into(),
            descriptors: keys
                .iter()
                .map(|k| Descriptor {
                    entries: vec![((*k).into(), "x".into())],
                    ..Descriptor::default()
                })
                .collect(),
            hits_addend: 0,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(self.limiter.check(&request)).unwrap()
    }
}

/// The minute limit of the only quota-mode descriptor refuses the third call of a minute; that
/// refused call must not charge the hour limit, which it fits. (Before the fix the store
/// committed it, as one of the call's quota-mode charges was admitted, so the hour limit was used
/// up by calls that were all refused but the first two, and the next minute's call was refused.)
#[test]
fn refused_quota_mode_descriptor_charges_none_of_its_limits() {
    let f = fixture();
    assert_eq!(f.call(&["q"]).code, Code::Ok);
    assert_eq!(f.call(&["q"]).code, Code::Ok);
    let refused = f.call(&["q"]);
    assert_eq!(refused.code, Code::OverLimit, "{refused:#?}");
    f.clock.advance(std::time::Duration::from_secs(60));
    let d = f.call(&["q"]);
    assert_eq!(
        (d.code, d.statuses[0].remaining),
        (Code::Ok, 0),
        "the hour limit had room for one more: {d:#?}"
    );
}

/// With a second quota-mode descriptor that passes, the call passes and its admitted counters are
/// charged, the over descriptor's admitted limit included; with both over, nothing is charged.
#[test]
fn one_passing_quota_mode_descriptor_passes_the_call() {
    let f = fixture();
    f.call(&["q"]);
    f.call(&["q"]);
    let d = f.call(&["q", "p"]);
    assert_eq!(
        (d.code, d.statuses[0].code, d.statuses[1].code),
        (Code::Ok, Code::OverLimit, Code::Ok),
        "{d:#?}"
    );
    // Both over now (p used its one a minute): refused. The passing call charged q's hour
    // limit (its third hit), so q stays over in the next minute.
    assert_eq!(f.call(&["q", "p"]).code, Code::OverLimit);
    f.clock.advance(std::time::Duration::from_secs(60));
    assert_eq!(f.call(&["q"]).code, Code::OverLimit, "hour limit used up");
}
