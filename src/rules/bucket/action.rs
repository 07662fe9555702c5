//! What the RLQS server does with a bucket, read off the rule a bucket id reaches.

use std::sync::Arc;

use crate::algorithm::Limit;
use crate::clock::Nanos;
use crate::rules::{LimitKind, Node};

/// The rate of a limit that the RLQS server shares among the Envoys reporting a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRate {
    /// Requests per window (the token bucket's refill per window). Never 0: a zero limit is
    /// [`BucketAction::Deny`].
    pub requests: u64,
    /// The window in nanoseconds (never 0).
    pub window: Nanos,
    /// The most admitted at once: `burst` for a token bucket, the window's N for the window
    /// algorithms.
    pub burst: u64,
}

impl SharedRate {
    /// The rate in requests per second.
    pub fn per_second(&self) -> f64 {
        self.requests as f64 * crate::clock::SECOND as f64 / self.window.max(1) as f64
    }
}

/// What the rule a bucket reaches asks the RLQS server to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketAction {
    /// No rule limits the bucket (no match, or a node without limits): `ALLOW_ALL`.
    NoRule,
    /// `unlimited: true`: `ALLOW_ALL`.
    Unlimited {
        /// The node's full key, e.g. `quota.tenant_internal`.
        rule: Arc<str>,
    },
    /// A zero limit: `DENY_ALL`. With `shadow` the Envoys are told `ALLOW_ALL` and every
    /// request is only counted as a would-be refusal.
    Deny {
        /// The node's full key.
        rule: Arc<str>,
        /// `shadow_mode` on the node.
        shadow: bool,
    },
    /// A counted limit, shared among the streams that report the bucket. With `shadow` the
    /// Envoys are told `ALLOW_ALL` and the refusals the share would have made are only counted.
    Limited {
        /// The node's full key.
        rule: Arc<str>,
        /// The limit to share.
        rate: SharedRate,
        /// `shadow_mode` on the node.
        shadow: bool,
    },
}

impl BucketAction {
    /// The full key of the rule the bucket reached, if one applies.
    pub fn rule(&self) -> Option<&Arc<str>> {
        match self {
            BucketAction::NoRule => None,
            BucketAction::Unlimited { rule }
            | BucketAction::Deny { rule, .. }
            | BucketAction::Limited { rule, .. } => Some(rule),
        }
    }
}

impl BucketAction {
    /// What a bucket whose path ends on `node` gets: no limits → [`BucketAction::NoRule`] (a
    /// whitelist entry or an intermediate node, as for a descriptor); any `unlimited` limit →
    /// [`BucketAction::Unlimited`] (as the limiter, which never counts such a node); else the
    /// tightest counted limit (see [`tightest`]): 0 requests → [`BucketAction::Deny`], else
    /// [`BucketAction::Limited`] with the limit's rate and its capacity as the burst.
    pub fn for_node(node: &Node) -> BucketAction {
        if node.limits.is_empty() {
            return BucketAction::NoRule;
        }
        let rule: Arc<str> = Arc::from(node.full_key.as_str());
        let counted = node.limits.iter().map(|l| match &l.kind {
            LimitKind::Counted(limit) => Some(limit),
            LimitKind::Unlimited => None,
        });
        let Some(counted) = counted.collect::<Option<Vec<&Limit>>>() else {
            return BucketAction::Unlimited { rule };
        };
        let shadow = node.shadow_mode;
        match tightest(counted) {
            Some(limit) if limit.requests > 0 => BucketAction::Limited {
                rule,
                rate: SharedRate {
                    requests: limit.requests,
                    window: limit.window,
                    burst: limit.capacity(),
                },
                shadow,
            },
            _ => BucketAction::Deny { rule, shadow },
        }
    }

    /// `shadow_mode` on the rule reached: Envoys are told `ALLOW_ALL` whatever the limit.
    pub fn shadow(&self) -> bool {
        match self {
            BucketAction::Deny { shadow, .. } | BucketAction::Limited { shadow, .. } => *shadow,
            BucketAction::NoRule | BucketAction::Unlimited { .. } => false,
        }
    }

    /// What Envoy is told, in a few words, e.g. `token bucket shared: 10 per 1m, burst 10`.
    pub fn describe(&self) -> String {
        let shared = |rate: &SharedRate| {
            format!(
                "token bucket shared: {} per {}, burst {}",
                rate.requests,
                crate::rules::format_window(rate.window),
                rate.burst
            )
        };
        match self {
            BucketAction::NoRule => "ALLOW_ALL (no rule)".to_owned(),
            BucketAction::Unlimited { .. } => "ALLOW_ALL (unlimited)".to_owned(),
            BucketAction::Deny { shadow: false, .. } => "DENY_ALL (zero limit)".to_owned(),
            BucketAction::Deny { shadow: true, .. } => {
                "ALLOW_ALL (shadow mode; would be DENY_ALL: zero limit)".to_owned()
            }
            BucketAction::Limited {
                rate,
                shadow: false,
                ..
            } => shared(rate),
            BucketAction::Limited {
                rate, shadow: true, ..
            } => format!("ALLOW_ALL (shadow mode; would be a {})", shared(rate)),
        }
    }
}

/// The limit with the lowest rate (`requests / window`) among a node's limits (`rate_limits:`):
/// one bucket gets one token bucket, and the slowest limit is the one that refuses first once
/// traffic is steady. Rates are compared by cross-multiplying in `u128` (no rounding, no
/// overflow); a tie keeps the earlier limit in the file. Its burst is not considered: a faster
/// limit's smaller burst is not enforced for a bucket (documented in docs/rlqs.md).
pub fn tightest<'l>(limits: impl IntoIterator<Item = &'l Limit>) -> Option<&'l Limit> {
    limits.into_iter().reduce(|best, next| {
        let next_rate = u128::from(next.requests) * u128::from(best.window);
        let best_rate = u128::from(best.requests) * u128::from(next.window);
        if next_rate < best_rate { next } else { best }
    })
}
