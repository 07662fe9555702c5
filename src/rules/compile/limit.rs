//! A node's `rate_limit` / `rate_limits` to [`LimitRule`]s: unit, window or calendar, algorithm,
//! burst, lease, replaces, whether charges past the limit are recorded, and the
//! `RateLimit-Policy` item computed once here instead of per request.

use std::fmt::Write as _;
use std::sync::Arc;

use super::Ctx;
use crate::algorithm::{Algorithm, Limit, Recording};
use crate::clock::{Nanos, SECOND};
use crate::rules::duration;
use crate::rules::file::{RawDescriptor, RawLimit};
use crate::rules::{Calendar, LimitKind, LimitRule, Period, Scope, Unit};

/// Most limits on one node (`index` is a `u8`).
const MAX_LIMITS: usize = 256;

/// The limits of one node, in `rate_limits` order (one for `rate_limit`, none for neither).
pub(super) fn build_all(ctx: &mut Ctx<'_>, raw: &RawDescriptor, full_key: &str) -> Vec<LimitRule> {
    let mut limits = Vec::new();
    if let Some(list) = &raw.rate_limits {
        if raw.rate_limit.is_some() {
            ctx.error(
                list.pos,
                "`rate_limit` and `rate_limits` cannot both be set",
            );
        }
        if list.value.is_empty() {
            ctx.error(list.pos, "`rate_limits` must not be empty");
        }
        if list.value.len() > MAX_LIMITS {
            ctx.error(
                list.pos,
                format!("`rate_limits` has more than {MAX_LIMITS} entries"),
            );
        }
        for (index, limit) in list.value.iter().enumerate().take(MAX_LIMITS) {
            limits.extend(build(ctx, limit, index as u8, true, full_key));
        }
    }
    if let Some(limit) = &raw.rate_limit {
        let built = build(ctx, limit, 0, false, full_key);
        if raw.rate_limits.is_none() {
            limits.extend(built);
        }
    }
    limits
}

/// Validates one limit; `None` when it has an error. Every check runs, so one load reports
/// all of a limit's problems; errors are counted before and after to know if any was found.
fn build(
    ctx: &mut Ctx<'_>,
    raw: &RawLimit,
    index: u8,
    in_list: bool,
    full_key: &str,
) -> Option<LimitRule> {
    let errors_before = ctx.errors.len();
    let unlimited = raw.unlimited.as_ref().is_some_and(|u| u.value);
    let unit = raw.unit.as_ref().and_then(|u| Unit::from_name(&u.value));
    let window = window(ctx, raw);
    // An unlimited limit's calendar is reported as a field it should not have, nothing more.
    let calendar = if unlimited { None } else { calendar(ctx, raw) };
    let algorithm = algorithm(ctx, raw);
    if unlimited {
        check_unlimited(ctx, raw, unit.is_some(), in_list);
    } else if raw.calendar.is_some() {
        check_calendar(ctx, raw, algorithm);
    } else {
        check_period(ctx, raw, unit.is_some());
    }
    let burst = burst(ctx, raw, algorithm, unlimited);
    let lease = lease(ctx, raw, algorithm, unlimited);
    let scope = scope(ctx, raw, unlimited);
    let recording = recording(ctx, raw, algorithm, unlimited);
    check_replaces(ctx, raw);
    if raw.bad || ctx.errors.len() > errors_before {
        return None;
    }
    let name = raw.name.clone();
    let (kind, unit, policy) = if unlimited {
        // Never counted, so never the subject of a RateLimit-Policy header.
        (LimitKind::Unlimited, None, Arc::from(""))
    } else {
        // A calendar's nominal period stands for it wherever one length is asked for.
        let unit = calendar.as_ref().map(|c| c.period.unit()).or(unit);
        let window = window.or(unit.map(|u| u.seconds() * SECOND))?;
        let requests = u64::from(raw.requests_per_unit);
        let limit = Limit {
            algorithm,
            requests,
            window,
            burst: burst.map_or(requests, |b| b as u64),
            origin: 0,
            recording,
        };
        let policy_name = name.as_deref().unwrap_or(full_key);
        (
            LimitKind::Counted(limit),
            unit.or_else(|| Unit::from_window(window)),
            Arc::from(policy(policy_name, raw.requests_per_unit, window)),
        )
    };
    Some(LimitRule {
        kind,
        requests_per_unit: raw.requests_per_unit,
        unit,
        name: name.map(Arc::from),
        replaces: raw.replaces.iter().map(|r| r.value.clone()).collect(),
        index,
        policy,
        lease: lease.map_or(0, |l| l as u32),
        calendar: calendar.map(Arc::new),
        scope,
    })
}

/// `scope`, checked: `region` (the default) or `global`, which needs a global store and a
/// counted limit (an unlimited one is never counted, so there is nothing to share).
fn scope(ctx: &mut Ctx<'_>, raw: &RawLimit, unlimited: bool) -> Scope {
    let Some(s) = &raw.scope else {
        return Scope::Region;
    };
    let Some(scope) = Scope::from_name(&s.value) else {
        ctx.error(
            s.pos,
            format!(
                "unknown scope '{}' (expected one of: region, global)",
                s.value
            ),
        );
        return Scope::Region;
    };
    if unlimited {
        ctx.error(s.pos, "should not specify scope when unlimited");
    } else if scope == Scope::Global && !ctx.opts.global_scope {
        ctx.error(
            s.pos,
            "`scope: global` needs a global store (--global-redis-url): without one each region \
             would admit the whole limit",
        );
    }
    scope
}

/// `calendar` and `timezone` (UTC when absent), checked; `None` when absent or reported.
fn calendar(ctx: &mut Ctx<'_>, raw: &RawLimit) -> Option<Calendar> {
    let Some(c) = &raw.calendar else {
        if let Some(tz) = &raw.timezone {
            ctx.error(
                tz.pos,
                "`timezone` needs `calendar` (day, week, month or year)",
            );
        }
        return None;
    };
    let period = Period::from_name(&c.value);
    if period.is_none() {
        let valid: Vec<&str> = Period::ALL.iter().map(|p| p.name()).collect();
        ctx.error(
            c.pos,
            format!(
                "unknown calendar '{}' (expected one of: {})",
                c.value,
                valid.join(", ")
            ),
        );
    }
    let (zone, pos) = raw
        .timezone
        .as_ref()
        .map_or(("UTC", c.pos), |tz| (tz.value.as_str(), tz.pos));
    let calendar = Calendar::new(period.unwrap_or(Period::Day), zone)
        .inspect_err(|message| ctx.error(pos, message))
        .ok()?;
    period.map(|_| calendar)
}

/// A calendar limit's period is its calendar's, counted in fixed windows: no `unit` or
/// `window` beside it, and no other algorithm.
fn check_calendar(ctx: &mut Ctx<'_>, raw: &RawLimit, algorithm: Algorithm) {
    for (field, pos) in [
        ("unit", raw.unit.as_ref().map(|u| u.pos)),
        ("window", raw.window.as_ref().map(|w| w.pos)),
    ] {
        if let Some(pos) = pos {
            ctx.error(pos, format!("`calendar` and `{field}` cannot both be set"));
        }
    }
    if let Some(a) = &raw.algorithm
        && algorithm != Algorithm::FixedWindow
    {
        ctx.error(
            a.pos,
            format!(
                "`calendar` counts in fixed windows: algorithm must be fixed_window (this \
                 limit says {algorithm})"
            ),
        );
    }
}

/// `window`, parsed; `None` when absent or reported.
fn window(ctx: &mut Ctx<'_>, raw: &RawLimit) -> Option<Nanos> {
    let w = raw.window.as_ref()?;
    duration::parse(&w.value)
        .inspect_err(|message| ctx.error(w.pos, message))
        .ok()
}

/// `algorithm`, or the load's default when absent or unknown (reported).
fn algorithm(ctx: &mut Ctx<'_>, raw: &RawLimit) -> Algorithm {
    let Some(a) = &raw.algorithm else {
        // A calendar window is a fixed window, whatever the load's default.
        if raw.calendar.is_some() {
            return Algorithm::FixedWindow;
        }
        return ctx.opts.default_algorithm;
    };
    Algorithm::from_name(&a.value).unwrap_or_else(|| {
        let valid: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        ctx.error(
            a.pos,
            format!(
                "unknown algorithm '{}' (expected one of: {})",
                a.value,
                valid.join(", ")
            ),
        );
        ctx.opts.default_algorithm
    })
}

/// An unlimited limit is never counted, so every field that shapes counting is an error.
fn check_unlimited(ctx: &mut Ctx<'_>, raw: &RawLimit, known_unit: bool, in_list: bool) {
    if in_list && let Some(u) = &raw.unlimited {
        ctx.error(
            u.pos,
            "`unlimited` is not allowed inside `rate_limits` (use `rate_limit`)",
        );
    }
    if let (true, Some(u)) = (known_unit, &raw.unit) {
        ctx.error(u.pos, "should not specify rate limit unit when unlimited");
    }
    for (field, pos) in [
        ("window", raw.window.as_ref().map(|w| w.pos)),
        ("calendar", raw.calendar.as_ref().map(|c| c.pos)),
        ("timezone", raw.timezone.as_ref().map(|t| t.pos)),
        ("algorithm", raw.algorithm.as_ref().map(|a| a.pos)),
        ("burst", raw.burst.as_ref().map(|b| b.pos)),
        ("lease", raw.lease.as_ref().map(|l| l.pos)),
        (
            "record_over_limit",
            raw.record_over_limit.as_ref().map(|r| r.pos),
        ),
    ] {
        if let Some(pos) = pos {
            ctx.error(pos, format!("should not specify {field} when unlimited"));
        }
    }
}

/// A counted limit has exactly one period: a `window`, or else a known `unit`.
fn check_period(ctx: &mut Ctx<'_>, raw: &RawLimit, known_unit: bool) {
    if raw.window.is_some() {
        if let Some(u) = &raw.unit {
            ctx.error(u.pos, "`window` and `unit` cannot both be set");
        }
    } else if !known_unit && !raw.bad {
        let (text, pos) = raw
            .unit
            .as_ref()
            .map_or(("", raw.pos), |u| (u.value.as_str(), u.pos));
        ctx.error(pos, format!("invalid rate limit unit '{text}'"));
    }
}

/// `burst`, checked against the algorithm; `None` when absent or reported. On an unlimited
/// limit it is passed through unchecked ([`check_unlimited`] reports it).
fn burst(ctx: &mut Ctx<'_>, raw: &RawLimit, algorithm: Algorithm, unlimited: bool) -> Option<i128> {
    let b = raw.burst.as_ref()?;
    if unlimited {
        Some(b.value)
    } else if algorithm != Algorithm::TokenBucket {
        ctx.error(
            b.pos,
            format!("`burst` needs algorithm token_bucket (this limit uses {algorithm})"),
        );
        None
    } else if b.value < 1 {
        ctx.error(b.pos, "burst must be at least 1");
        None
    } else {
        Some(b.value)
    }
}

/// The most hits one lease may take (a replica holds at most this many unused).
pub const MAX_LEASE: i128 = 1 << 20;

/// `lease`, checked against the algorithm; `None` when absent or reported. A lease is exact
/// only where hits counted early in a window weigh as hits counted late in it: fixed and
/// sliding windows. A log stamps each hit with its time and a bucket refills between the
/// lease and its use, so early-counted hits would leave early: over-admission.
fn lease(ctx: &mut Ctx<'_>, raw: &RawLimit, algorithm: Algorithm, unlimited: bool) -> Option<i128> {
    let l = raw.lease.as_ref()?;
    if unlimited {
        Some(l.value)
    } else if !matches!(algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow) {
        ctx.error(
            l.pos,
            format!(
                "`lease` needs algorithm fixed_window or sliding_window (this limit uses \
                 {algorithm}: hits counted before they happen would leave its count early)"
            ),
        );
        None
    } else if !(1..=MAX_LEASE).contains(&l.value) {
        ctx.error(l.pos, format!("lease must be between 1 and {MAX_LEASE}"));
        None
    } else {
        Some(l.value)
    }
}

/// `record_over_limit`, or the load's default for it (`--record-over-limit`, the drop-in
/// personality), checked: a sliding log keeps one entry per hit, which cannot hold budgets of
/// millions, and a lease admits hits away from the store a recorded charge must reach.
fn recording(
    ctx: &mut Ctx<'_>,
    raw: &RawLimit,
    algorithm: Algorithm,
    unlimited: bool,
) -> Recording {
    let said = raw.record_over_limit.as_ref();
    if unlimited || !said.map_or_else(|| ctx.opts.records_by_default(algorithm), |r| r.value) {
        return Recording::AdmittedOnly;
    }
    // Where the recording was asked for: the field, or else (the load's default) the limit.
    let (pos, asked) = said.map_or((raw.pos, "--record-over-limit"), |r| {
        (r.pos, "record_over_limit")
    });
    if algorithm == Algorithm::SlidingLog {
        let pos = raw.algorithm.as_ref().map_or(pos, |a| a.pos);
        ctx.error(
            pos,
            format!(
                "{asked} records every charge, which sliding_log cannot (one entry per hit \
                 cannot hold a budget of millions): use sliding_window, fixed_window or \
                 token_bucket{}",
                if said.is_some() {
                    ""
                } else {
                    ", or set record_over_limit: false"
                }
            ),
        );
    }
    if let Some(l) = &raw.lease {
        ctx.error(
            l.pos,
            format!(
                "`lease` cannot go with {asked}: leased hits are admitted away from the store, \
                 which every recorded charge must reach"
            ),
        );
    }
    ctx.opts.recording(algorithm, Some(true))
}

/// envoyproxy/ratelimit's checks on `replaces` entries.
fn check_replaces(ctx: &mut Ctx<'_>, raw: &RawLimit) {
    for entry in &raw.replaces {
        if entry.value.is_empty() {
            ctx.error(entry.pos, "should not have an empty replaces entry");
        } else if raw.name.as_deref() == Some(entry.value.as_str()) {
            ctx.error(
                entry.pos,
                "replaces should not contain name of same descriptor",
            );
        }
    }
}

/// The draft-10 `RateLimit-Policy` list item: `"name";q=<quota>;w=<seconds, rounded up, >= 1>`.
/// The name is a structured-field string: `"` and `\` are escaped, and characters outside
/// printable ASCII (which such a string cannot hold) become `_` so the header stays valid.
pub(super) fn policy(name: &str, quota: u32, window: Nanos) -> String {
    let mut out = String::with_capacity(name.len() + 24);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    let seconds = window.div_ceil(SECOND).max(1);
    let _ = write!(out, "\";q={quota};w={seconds}");
    out
}
