//! envoyproxy/ratelimit's own headers (`LIMIT_RESPONSE_HEADERS_ENABLED`): the limit, remaining
//! and reset of the one status envoyproxy/ratelimit chooses, under the configured names.

use std::borrow::Cow;

use super::HeaderText;
use super::decision::{Code, DescriptorStatus};
use super::headers::whole_seconds_up;
use super::response_options::CompatHeaderNames;

/// The three headers, in envoyproxy/ratelimit's order (limit, remaining, reset), for the status
/// [`choose`] picks; none when no status had a limit. `quota_mode(i)` says whether descriptor `i`
/// is in quota mode. Per call: three numbers kept (written out on the wire), and the names cloned
/// (free for the default names, which are borrowed).
pub(super) fn build(
    names: &CompatHeaderNames,
    statuses: &[DescriptorStatus],
    quota_mode: impl Fn(usize) -> bool,
) -> Vec<(Cow<'static, str>, HeaderText)> {
    let Some(status) = choose(statuses, quota_mode).map(|i| &statuses[i]) else {
        return Vec::new();
    };
    let (Some(limit), Some(reset)) = (&status.limit, status.reset_after) else {
        return Vec::new();
    };
    vec![
        (
            names.limit.clone(),
            HeaderText::Number(limit.requests_per_unit.into()),
        ),
        (
            names.remaining.clone(),
            HeaderText::Number(status.remaining.into()),
        ),
        // envoyproxy/ratelimit: window − (now mod window) in whole seconds, which is the exact
        // reset rounded up (a whole value kept), at least 1.
        (
            names.reset.clone(),
            HeaderText::Number(whole_seconds_up(reset)),
        ),
    ]
}

/// envoyproxy/ratelimit's choice, one pass in request order: a status with a limit and fewer
/// remaining than any before it (strictly) is chosen; an OVER_LIMIT status of a descriptor that is
/// not in quota mode is chosen whatever came before and sets the minimum to 0. So: the last
/// OVER_LIMIT status not in quota mode, else the first with the fewest remaining. A shadow-mode
/// status (OK with 0 remaining) can be chosen; a quota-mode refusal only by its remaining.
fn choose(statuses: &[DescriptorStatus], quota_mode: impl Fn(usize) -> bool) -> Option<usize> {
    let mut fewest = u32::MAX;
    let mut chosen = None;
    for (i, status) in statuses.iter().enumerate() {
        if status.limit.is_some() && status.remaining < fewest {
            chosen = Some(i);
            fewest = status.remaining;
        }
        if status.code == Code::OverLimit && !quota_mode(i) {
            chosen = Some(i);
            fewest = 0;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{MILLI, SECOND};
    use crate::limiter::decision::ReportedLimit;
    use crate::rules::Unit;

    fn limited(code: Code, requests_per_unit: u32, remaining: u32) -> DescriptorStatus {
        DescriptorStatus {
            code,
            limit: Some(ReportedLimit {
                requests_per_unit,
                unit: Some(Unit::Minute),
                name: None,
            }),
            remaining,
            reset_after: Some(58 * SECOND),
        }
    }

    fn ok(requests_per_unit: u32, remaining: u32) -> DescriptorStatus {
        limited(Code::Ok, requests_per_unit, remaining)
    }

    fn over(requests_per_unit: u32) -> DescriptorStatus {
        limited(Code::OverLimit, requests_per_unit, 0)
    }

    fn no_quota_mode(_: usize) -> bool {
        false
    }

    /// The first status with the fewest remaining wins; ties keep the earlier one; statuses
    /// without a limit (no match, unlimited) are never chosen.
    #[test]
    fn fewest_remaining_first_wins() {
        let statuses = [
            DescriptorStatus::unlimited_by_absence(),
            ok(10, 7),
            DescriptorStatus::unlimited(),
            ok(5, 3),
            ok(9, 3),
            ok(100, 50),
        ];
        assert_eq!(choose(&statuses, no_quota_mode), Some(3));
        let none = [
            DescriptorStatus::unlimited_by_absence(),
            DescriptorStatus::unlimited(),
        ];
        assert_eq!(choose(&none, no_quota_mode), None);
        assert!(build(&CompatHeaderNames::default(), &none, no_quota_mode).is_empty());
    }

    /// The last ordinary OVER_LIMIT status wins, even over an earlier one or one with the same
    /// 0 remaining; an OK status after it cannot take its place.
    #[test]
    fn last_over_limit_wins() {
        let statuses = [ok(10, 0), over(1), ok(5, 2), over(2), ok(7, 0)];
        assert_eq!(choose(&statuses, no_quota_mode), Some(3));
    }

    /// A shadow-mode status (OK, 0 remaining) is chosen by its remaining; a quota-mode
    /// refusal is not chosen as a refusal, only when it has the fewest remaining first.
    #[test]
    fn shadow_and_quota_mode_statuses() {
        let shadowed = [ok(10, 4), ok(3, 0), ok(8, 0)];
        assert_eq!(choose(&shadowed, no_quota_mode), Some(1));
        let quota_mode_first = [over(1), ok(5, 2), over(3)];
        let quota_mode = |i: usize| i != 2;
        // Descriptor 0 (quota mode) has the fewest remaining first; descriptor 2 is an ordinary
        // refusal and wins.
        assert_eq!(choose(&quota_mode_first, quota_mode), Some(2));
        let all_quota_mode = |_: usize| true;
        assert_eq!(choose(&quota_mode_first, all_quota_mode), Some(0));
        let quota_mode_later = [ok(5, 2), over(1)];
        assert_eq!(choose(&quota_mode_later, all_quota_mode), Some(1));
    }

    /// Limit, remaining, reset in this order, under the configured names verbatim; the reset
    /// is whole seconds rounded up.
    #[test]
    fn three_headers_in_order() {
        let names = CompatHeaderNames {
            limit: "X-My-Limit".into(),
            remaining: Cow::Owned("x-left".to_owned()),
            reset: "Reset-In".into(),
        };
        let mut status = ok(10, 4);
        status.reset_after = Some(57 * SECOND + 300 * MILLI);
        let headers = build(&names, &[status], no_quota_mode);
        let expected: Vec<(Cow<'static, str>, HeaderText)> = vec![
            ("X-My-Limit".into(), "10".into()),
            ("x-left".into(), "4".into()),
            ("Reset-In".into(), "58".into()),
        ];
        assert_eq!(headers, expected);
        let defaults = build(&CompatHeaderNames::default(), &[over(10)], no_quota_mode);
        let keys: Vec<&str> = defaults.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(
            keys,
            ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]
        );
        assert_eq!(defaults[1].1, "0");
    }
}
