//! What an answer carries besides its codes: which rate-limit headers, whether the dynamic
//! metadata envoyproxy/ratelimit offers and sluice's names of the refusing rules, and how
//! precisely `duration_until_reset` is reported.

use std::borrow::Cow;

use crate::clock::{MILLI, Nanos, SECOND};

/// Response switches of the limiter (the `--response-*` and `--reset-precision` flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseOptions {
    /// Which rate-limit headers go into `response_headers_to_add`.
    pub headers: HeaderStyle,
    /// Fill `dynamic_metadata` as envoyproxy/ratelimit's `RESPONSE_DYNAMIC_METADATA` does.
    pub dynamic_metadata: bool,
    /// Add `sluice_refused_by` to `dynamic_metadata`: the names of the rules whose descriptors
    /// refused (`--refusal-metadata`).
    pub refusal_metadata: bool,
    /// How `duration_until_reset` is rounded.
    pub reset_precision: ResetPrecision,
}

/// The rate-limit headers of an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// IETF draft-10 `RateLimit-Policy` and `RateLimit` for the status closest to exhaustion,
    /// and on OVER_LIMIT `Retry-After` and `cache-control: no-store`.
    #[default]
    Draft10,
    /// envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED`: its three headers (limit,
    /// remaining, reset) for the status it would choose, under these names, and nothing else.
    Compat(CompatHeaderNames),
    /// No rate-limit headers.
    None,
}

/// The names of envoyproxy/ratelimit's three headers (`LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`), sent exactly as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatHeaderNames {
    /// The header carrying `requests_per_unit`.
    pub limit: Cow<'static, str>,
    /// The header carrying `limit_remaining`.
    pub remaining: Cow<'static, str>,
    /// The header carrying the whole seconds until the window resets.
    pub reset: Cow<'static, str>,
}

/// envoyproxy/ratelimit's default header names.
pub(crate) const COMPAT_LIMIT_HEADER: &str = "RateLimit-Limit";
/// envoyproxy/ratelimit's default header names.
pub(crate) const COMPAT_REMAINING_HEADER: &str = "RateLimit-Remaining";
/// envoyproxy/ratelimit's default header names.
pub(crate) const COMPAT_RESET_HEADER: &str = "RateLimit-Reset";

impl Default for CompatHeaderNames {
    /// envoyproxy/ratelimit's defaults: `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset`.
    fn default() -> Self {
        Self {
            limit: Cow::Borrowed(COMPAT_LIMIT_HEADER),
            remaining: Cow::Borrowed(COMPAT_REMAINING_HEADER),
            reset: Cow::Borrowed(COMPAT_RESET_HEADER),
        }
    }
}

/// How `duration_until_reset` is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResetPrecision {
    /// Whole seconds, rounded up, at least 1 s: Envoy reads only the seconds of the field for
    /// `x-ratelimit-reset`, so this keeps that header equal to `Retry-After` and `RateLimit`'s
    /// `t` (a client that waits this long is admitted; it may be up to 1 s more than needed).
    #[default]
    Seconds,
    /// Milliseconds, rounded up, at least 1 ms: the earliest moment the call is admitted, for
    /// clients that read the field themselves (Envoy's `x-ratelimit-reset` then shows the
    /// truncated seconds, up to 1 s less than `Retry-After`).
    Milliseconds,
}

impl ResetPrecision {
    /// `nanos` rounded up to this precision, never zero.
    pub fn round(self, nanos: Nanos) -> Nanos {
        let step = match self {
            ResetPrecision::Seconds => SECOND,
            ResetPrecision::Milliseconds => MILLI,
        };
        nanos.div_ceil(step).max(1).saturating_mul(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both precisions round up and never report zero; a whole value stays as it is.
    #[test]
    fn reset_rounds_up_never_to_zero() {
        let seconds = ResetPrecision::Seconds;
        assert_eq!(seconds.round(57_300 * MILLI), 58 * SECOND);
        assert_eq!(seconds.round(58 * SECOND), 58 * SECOND);
        assert_eq!(seconds.round(1), SECOND);
        assert_eq!(seconds.round(0), SECOND);
        let millis = ResetPrecision::Milliseconds;
        assert_eq!(millis.round(57_300 * MILLI + 1), 57_301 * MILLI);
        assert_eq!(millis.round(0), MILLI);
        // Saturates rather than wrapping (no reset is anywhere near this long).
        assert_eq!(seconds.round(Nanos::MAX), Nanos::MAX);
    }
}
