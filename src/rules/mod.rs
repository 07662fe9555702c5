//! Rules: YAML rule files (a superset of envoyproxy/ratelimit's) compiled into an immutable,
//! indexed [`RuleSet`] that the limiter matches descriptors against.
//!
//! `file` reads one rule file into raw, positioned rules and checks envoyproxy/ratelimit's schema;
//! `compile` finds the files, validates them and builds the [`RuleSet`] (every error with its
//! location, all at once); `document` takes rules given as data (xDS's `RateLimitConfig`) through
//! the same compiler; `matcher` walks a domain for a request descriptor; `view` prints a set for
//! `sluice check` and `GET /rlconfig`; `explain` walks the tree step by step for `sluice explain`
//! and `/ui`; `duration` is the `window:` grammar; `error` holds the located errors; `runtime`
//! reads envoyproxy/ratelimit's own file layout. The types of a compiled set are defined here.

mod afresh;
pub mod bucket;
mod calendar;
mod compat_layout;
mod compile;
mod document;
mod duration;
mod entry_text;
mod error;
mod explain;
pub(crate) mod file;
mod matcher;
mod view;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::algorithm::{Algorithm, Limit};

pub use calendar::{Calendar, Period};
pub use compat_layout::CompatLayout;
pub use compile::{LoadOptions, load, load_sources};
pub(crate) use compile::{MAX_FILE_BYTES, is_rule_file, is_skipped};
pub(crate) use document::load_documents;
pub use document::{DescriptorRule, LimitSpec, RuleDocument};
pub(crate) use duration::format as format_window;
pub use duration::parse as parse_window;
pub(crate) use entry_text::split_entries;
pub use error::{ConfigError, ConfigErrors};
pub use explain::{Reached, Step, Walk, walk};
pub(crate) use matcher::override_stats_key;
pub use matcher::{Match, MatchKind, Pattern};

/// A time unit of envoyproxy/ratelimit's `rate_limit.unit` (epoch-aligned; month = 30 days, year =
/// 365 days).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3,600 s.
    Hour,
    /// 86,400 s.
    Day,
    /// 604,800 s (windows start on Thursday 00:00 UTC, as envoyproxy/ratelimit's).
    Week,
    /// 2,592,000 s (30 days, not a calendar month).
    Month,
    /// 31,536,000 s (365 days, not a calendar year).
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The lower-case name used in rule files.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// Parses a unit name in any case, as envoyproxy/ratelimit does; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(name))
    }

    /// The unit whose length is exactly `window` nanoseconds, if any.
    pub fn from_window(window: crate::clock::Nanos) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|u| u.seconds() * crate::clock::SECOND == window)
    }
}

/// What a rule does when its counter store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Fail open: answer OK, marked degraded.
    #[default]
    Allow,
    /// Fail closed: answer OVER_LIMIT.
    Deny,
    /// Count in this process instead, with the limit divided by the expected replicas.
    Local,
}

impl FailureMode {
    /// The name used in rule files and in the `mode` metric label.
    pub fn name(self) -> &'static str {
        match self {
            FailureMode::Allow => "allow",
            FailureMode::Deny => "deny",
            FailureMode::Local => "local",
        }
    }
}

/// Where a limit holds (`scope:` of a limit, sluice): in each region on its own, or once across
/// every region sharing a global store (`--global-redis-url`; see `region`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// Each region enforces the whole limit on its own (today's behaviour; the default).
    #[default]
    Region,
    /// All regions together: each enforces its portion, claimed from the global store.
    Global,
}

impl Scope {
    /// The name used in rule files.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Region => "region",
            Scope::Global => "global",
        }
    }

    /// Parses a rule-file name; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        [Scope::Region, Scope::Global]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// Where in which file something was written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// The rule file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub col: Option<usize>,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.col {
                write!(f, ":{col}")?;
            }
        }
        Ok(())
    }
}

/// What a matched limit does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKind {
    /// `unlimited: true`: always OK, never counted.
    Unlimited,
    /// A counted limit.
    Counted(Limit),
}

/// One limit of a rule node (`rate_limit`, or one entry of `rate_limits`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRule {
    /// Counted or unlimited.
    pub kind: LimitKind,
    /// `requests_per_unit` as written (reported in `current_limit`).
    pub requests_per_unit: u32,
    /// The envoyproxy/ratelimit unit reported in `current_limit`: the configured `unit`, or the
    /// unit whose length equals `window`; `None` for a window that is no unit (reported as
    /// UNKNOWN).
    pub unit: Option<Unit>,
    /// `name` (reported in `current_limit.name`; target of `replaces`).
    pub name: Option<Arc<str>>,
    /// Names of limits this one replaces while it matches in the same request.
    pub replaces: Vec<String>,
    /// Position among the node's limits (0 for `rate_limit`); part of the counter key.
    pub index: u8,
    /// The `RateLimit-Policy` list item for this limit, e.g. `"edge.api_key";q=100;w=60`,
    /// computed once at compile time.
    pub policy: Arc<str>,
    /// `lease` (sluice): hits a replica may take from a shared store at a time and admit
    /// locally (0: every call counted by the store). See `store::redis::lease`.
    pub lease: u32,
    /// `calendar` and `timezone` (sluice): the limit counts over the local day, week, month or
    /// year, and its `Limit` is the nominal period's (see [`LimitRule::counted_at`]).
    pub calendar: Option<Arc<Calendar>>,
    /// `scope` (sluice): the whole limit in each region, or one limit across regions.
    pub scope: Scope,
}

/// One node of a domain's descriptor tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// The descriptor key.
    pub key: String,
    /// The configured value: `None` = key-only (any value, one counter per value).
    pub value: Option<String>,
    /// The limits on this node (empty: no limit of its own, e.g. a whitelist entry).
    pub limits: Vec<LimitRule>,
    /// `shadow_mode`: counted, but its code is forced to OK.
    pub shadow_mode: bool,
    /// `quota_mode`: the request is over only if all its quota-mode descriptors are over.
    pub quota_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold`: all values matching the wildcard share one counter.
    pub share_threshold: bool,
    /// `failure_mode` (sluice).
    pub failure_mode: FailureMode,
    /// `shards` (sluice): split the counter across this many sub-counters (>= 1).
    pub shards: u32,
    /// `metadata`, as JSON.
    pub metadata: Option<serde_json::Value>,
    /// The configured path from the domain, e.g. `edge.api_key_gold-*.path` (envoyproxy/ratelimit
    /// full key).
    pub full_key: String,
    /// Where the node was written.
    pub location: Location,
    /// Child nodes.
    pub children: Level,
    /// This node's per-rule metric series, resolved on its first counted call.
    pub series: crate::metrics::SeriesSlot,
}

/// The nodes of one depth under one parent, indexed for matching precedence:
/// exact value, then wildcards in file order, then key-only.
#[derive(Debug, Clone, Default)]
pub struct Level {
    /// Nodes with a value without `*`, by (key, value).
    pub exact: HashMap<(String, String), Node, foldhash::fast::RandomState>,
    /// Nodes with a value containing `*`, in file order.
    pub wildcards: Vec<(crate::rules::matcher::Pattern, Node)>,
    /// Key-only nodes, by key.
    pub key_only: HashMap<String, Node, foldhash::fast::RandomState>,
}

/// The compiled rules of one domain.
#[derive(Debug, Clone, Default)]
pub struct Domain {
    /// The domain name.
    pub name: String,
    /// Top-level descriptors.
    pub root: Level,
}

/// The whole compiled, immutable rule set. Swapped whole on reload.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Domains by name.
    pub domains: HashMap<String, Domain, foldhash::fast::RandomState>,
    /// Non-fatal findings (e.g. a known key in a place where it has no effect).
    pub warnings: Vec<ConfigError>,
    /// The version its source gave it: an xDS response's `version_info`; `None` for rule files.
    pub version: Option<String>,
    /// A stand-in for rules not received yet (xDS before its first accepted response): calls
    /// fail as unavailable instead of finding no domain, and health reports not serving.
    pub awaiting: bool,
}

impl RuleSet {
    /// The stand-in used until a rule source delivers its first rule set.
    pub fn awaiting() -> Self {
        Self {
            awaiting: true,
            ..Self::default()
        }
    }

    /// The domain named `name`, if loaded.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }
}

/// Default algorithm etc. are in [`LoadOptions`]; this alias names the default.
pub const DEFAULT_ALGORITHM: Algorithm = Algorithm::SlidingWindow;
