//! Views of a [`RuleSet`]: the `check` summary, the `/rlconfig` lines and the configured limits
//! the `sluice_rule_limit` gauges show.

use std::fmt::Write as _;

use crate::clock::SECOND;
use crate::metrics::ConfiguredLimit;
use crate::rules::duration;
use crate::rules::{Level, LimitKind, LimitRule, Node, RuleSet};

impl RuleSet {
    /// A one-line summary for `sluice check` and the reload log, e.g. `2 domains, 9 limited nodes`.
    pub fn summary(&self) -> String {
        let nodes: usize = self.domains.values().map(|d| limited_nodes(&d.root)).sum();
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        format!(
            "{}, {}",
            plural(self.domains.len(), "domain"),
            plural(nodes, "limited node")
        )
    }

    /// One line per node that has limits, sorted, for `GET /rlconfig`. envoyproxy/ratelimit's
    /// format comes first, then sluice's fields: `<full_key>: unit=MINUTE requests_per_unit=20,
    /// shadow_mode: false, quota_mode: false, algorithm=sliding_window window=1m` (` burst=<b>` for
    /// a token bucket, ` lease=<n>` with a lease; `calendar=day timezone=Europe/Paris` in place of
    /// `window=` for a calendar limit; `unlimited=true` instead for an unlimited node;
    /// each further limit of `rate_limits` appended as ` | unit=... requests_per_unit=...
    /// algorithm=... window=...`).
    pub fn rlconfig_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for domain in self.domains.values() {
            push_lines(&domain.root, &mut lines);
        }
        // By full key, so a parent comes before its children (`a.b:` sorts after `a.b.c:`).
        lines.sort();
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

impl RuleSet {
    /// Every counted limit of every node, for the `sluice_rule_limit` and
    /// `sluice_rule_window_seconds` gauges, sorted by key (a calendar limit's window is its
    /// nominal length, a day 86,400 s).
    pub fn configured_limits(&self) -> Vec<ConfiguredLimit> {
        let mut limits = Vec::new();
        for domain in self.domains.values() {
            push_limits(&domain.name, &domain.root, &mut limits);
        }
        limits.sort_by(|a, b| (&a.domain, &a.key, a.index).cmp(&(&b.domain, &b.key, b.index)));
        limits
    }
}

fn push_limits(domain: &str, level: &Level, limits: &mut Vec<ConfiguredLimit>) {
    for node in nodes(level) {
        for rule in &node.limits {
            if let LimitKind::Counted(limit) = &rule.kind {
                limits.push(ConfiguredLimit {
                    domain: domain.to_owned(),
                    key: node.full_key.clone(),
                    index: rule.index,
                    algorithm: limit.algorithm.name(),
                    requests: limit.requests,
                    window_seconds: limit.window as f64 / SECOND as f64,
                });
            }
        }
        push_limits(domain, &node.children, limits);
    }
}

fn limited_nodes(level: &Level) -> usize {
    nodes(level)
        .map(|n| usize::from(!n.limits.is_empty()) + limited_nodes(&n.children))
        .sum()
}

pub(super) fn nodes(level: &Level) -> impl Iterator<Item = &Node> {
    level
        .exact
        .values()
        .chain(level.wildcards.iter().map(|(_, n)| n))
        .chain(level.key_only.values())
}

fn push_lines<'a>(level: &'a Level, lines: &mut Vec<(&'a str, String)>) {
    for node in nodes(level) {
        if let Some((first, rest)) = node.limits.split_first() {
            let mut line = format!(
                "{}: {}, shadow_mode: {}, quota_mode: {}, ",
                node.full_key,
                compat_fields(first),
                node.shadow_mode,
                node.quota_mode
            );
            sluice_fields(first, &mut line);
            for limit in rest {
                let _ = write!(line, " | {} ", compat_fields(limit));
                sluice_fields(limit, &mut line);
            }
            lines.push((&node.full_key, line));
        }
        push_lines(&node.children, lines);
    }
}

/// `unit=MINUTE requests_per_unit=20` (UNKNOWN for a window that is no unit, as
/// envoyproxy/ratelimit names it).
fn compat_fields(limit: &LimitRule) -> String {
    let unit = limit
        .unit
        .map_or_else(|| "UNKNOWN".to_string(), |u| u.name().to_ascii_uppercase());
    format!("unit={unit} requests_per_unit={}", limit.requests_per_unit)
}

fn sluice_fields(limit: &LimitRule, line: &mut String) {
    match &limit.kind {
        LimitKind::Unlimited => line.push_str("unlimited=true"),
        LimitKind::Counted(l) => {
            let _ = match &limit.calendar {
                Some(c) => write!(
                    line,
                    "algorithm={} calendar={} timezone={}",
                    l.algorithm,
                    c.period.name(),
                    c.zone_name
                ),
                None => write!(
                    line,
                    "algorithm={} window={}",
                    l.algorithm,
                    duration::format(l.window)
                ),
            };
            if l.algorithm == crate::algorithm::Algorithm::TokenBucket {
                let _ = write!(line, " burst={}", l.burst);
            }
            if limit.lease > 0 {
                let _ = write!(line, " lease={}", limit.lease);
            }
            if limit.scope == crate::rules::Scope::Global {
                line.push_str(" scope=global");
            }
        }
    }
}

impl LimitRule {
    /// One limit in words, e.g. `100 per 1m (sliding_window)`, `10 per 1s, burst 50
    /// (token_bucket)`, `100 per 1m, across regions (sliding_window)` (`scope: global`), `10 per day (Europe/Paris)` (a calendar limit, always a fixed window),
    /// `unlimited`.
    pub fn describe(&self) -> String {
        match &self.kind {
            LimitKind::Unlimited => "unlimited".to_owned(),
            LimitKind::Counted(l) if let Some(c) = &self.calendar => {
                let mut text = format!("{} per {}", l.requests, c.period.name());
                if self.lease > 0 {
                    let _ = write!(text, ", lease {}", self.lease);
                }
                if self.scope == crate::rules::Scope::Global {
                    text.push_str(", across regions");
                }
                let _ = write!(text, " ({})", c.zone_name);
                text
            }
            LimitKind::Counted(l) => {
                let mut text = format!("{} per {}", l.requests, duration::format(l.window));
                if l.algorithm == crate::algorithm::Algorithm::TokenBucket {
                    let _ = write!(text, ", burst {}", l.burst);
                }
                if self.lease > 0 {
                    let _ = write!(text, ", lease {}", self.lease);
                }
                if self.scope == crate::rules::Scope::Global {
                    text.push_str(", across regions");
                }
                let _ = write!(text, " ({})", l.algorithm);
                text
            }
        }
    }
}
