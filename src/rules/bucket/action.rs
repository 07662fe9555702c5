//! What the quota server does with a bucket, read off the rule a bucket id reaches.

use std::sync::Arc;

use crate::clock::Nanos;

/// The rate of a limit that the quota server shares among the Envoys reporting a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaRate {
    /// Requests per window (the token bucket's refill per window). Never 0: a zero limit is
    /// [`QuotaAction::Deny`].
    pub requests: u64,
    /// The window in nanoseconds (never 0).
    pub window: Nanos,
    /// The most admitted at once: `burst` for a token bucket, the window's N for the window
    /// algorithms.
    pub burst: u64,
}

/// What the rule a bucket reaches asks the quota server to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaAction {
    /// No rule limits the bucket (no match, or a node without limits): `ALLOW_ALL`.
    NoRule,
    /// `unlimited: true`: `ALLOW_ALL`.
    Unlimited {
        /// The node's full key, e.g. `quota.tenant_internal`.
        rule: Arc<str>,
    },
    /// A zero limit: `DENY_ALL`.
    Deny {
        /// The node's full key.
        rule: Arc<str>,
    },
    /// A counted limit, shared among the streams that report the bucket. With `shadow` the
    /// Envoys are told `ALLOW_ALL` and the refusals the share would have made are only counted.
    Limited {
        /// The node's full key.
        rule: Arc<str>,
        /// The limit to share.
        rate: QuotaRate,
        /// `shadow_mode` on the node.
        shadow: bool,
    },
}

impl QuotaAction {
    /// The full key of the rule the bucket reached, if one applies.
    pub fn rule(&self) -> Option<&Arc<str>> {
        match self {
            QuotaAction::NoRule => None,
            QuotaAction::Unlimited { rule }
            | QuotaAction::Deny { rule }
            | QuotaAction::Limited { rule, .. } => Some(rule),
        }
    }
}
