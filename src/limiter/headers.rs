//! Response headers: IETF draft-10 `RateLimit-Policy` / `RateLimit`, and `Retry-After` on refusal.

use std::borrow::Cow;
use std::sync::Arc;

use super::{HeaderText, RateLimitItem};
use crate::clock::{Nanos, SECOND};

/// `RateLimit-Policy`: the policy of the status closest to exhaustion.
pub(crate) const RATELIMIT_POLICY: &str = "RateLimit-Policy";
/// `RateLimit`: that policy's remaining requests and seconds until reset.
pub(crate) const RATELIMIT: &str = "RateLimit";
/// `Retry-After`: whole seconds until the refused call would be admitted.
pub(crate) const RETRY_AFTER: &str = "Retry-After";
/// `cache-control`: a 429 must never be cached.
pub(crate) const CACHE_CONTROL: &str = "cache-control";

/// Whole seconds, rounded up, at least 1.
pub(crate) fn whole_seconds_up(nanos: Nanos) -> u64 {
    nanos.div_ceil(SECOND).max(1)
}

/// Builds the headers for the status chosen to describe the call.
/// `policy` is the compiled policy item (`"<name>";q=<n>;w=<s>`), shared with the rule: the
/// values are its parts and two numbers, written out only on the wire (no text per call).
pub fn build(
    policy: &Arc<str>,
    remaining: u32,
    reset_after: Nanos,
    over_limit: bool,
) -> Vec<(Cow<'static, str>, HeaderText)> {
    let reset = whole_seconds_up(reset_after);
    let current = HeaderText::Current(RateLimitItem::new(policy, remaining, reset));
    let mut headers = Vec::with_capacity(if over_limit { 4 } else { 2 });
    headers.push((
        RATELIMIT_POLICY.into(),
        HeaderText::Shared(Arc::clone(policy)),
    ));
    headers.push((RATELIMIT.into(), current));
    if over_limit {
        headers.push((RETRY_AFTER.into(), HeaderText::Number(reset)));
        headers.push((CACHE_CONTROL.into(), HeaderText::Static("no-store")));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An OK answer carries the policy and the remaining allowance, rounded-up seconds.
    #[test]
    fn ok_headers() {
        let h = build(
            &"\"edge.api_key\";q=100;w=60".into(),
            42,
            1_500_000_000,
            false,
        );
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].0, RATELIMIT_POLICY);
        assert_eq!(h[0].1, "\"edge.api_key\";q=100;w=60");
        assert_eq!(h[1].0, RATELIMIT);
        assert_eq!(h[1].1, "\"edge.api_key\";r=42;t=2");
    }

    /// A name holding `;` and `;q=` is kept whole in the RateLimit item.
    #[test]
    fn a_name_with_separators_is_kept_whole() {
        let h = build(&"\"a;q=1;w=2\";q=5;w=60".into(), 3, SECOND, false);
        assert_eq!(h[1].1, "\"a;q=1;w=2\";r=3;t=1");
    }

    /// A refusal adds Retry-After (at least 1 s) and forbids caching.
    #[test]
    fn over_limit_headers() {
        let h = build(&"\"n\";q=1;w=1".into(), 0, 1, true);
        assert!(h.contains(&(RETRY_AFTER.into(), HeaderText::Static("1"))));
        assert!(h.contains(&(CACHE_CONTROL.into(), HeaderText::Static("no-store"))));
    }
}
