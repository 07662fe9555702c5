//! Rules given as data instead of YAML text: envoyproxy/ratelimit's `RateLimitConfig` resources
//! served over xDS. Each document becomes the same raw tree a rule file is read into and goes
//! through the same compiler, so every check (and every message) is the one a file gets.
//!
//! As envoyproxy/ratelimit's `config_xds.go`, a document has no `value_to_metric` or
//! `share_threshold` and none of sluice's extensions (`window`, `algorithm`, `rate_limits`, ...):
//! its limits count with the load's default algorithm. Errors have no line or column: they print as
//! `<document name>: <message>`, envoyproxy/ratelimit's form for xDS.

use std::path::PathBuf;

use super::compile::{LoadOptions, compile_read};
use super::file::{Parsed, Pos, RawDescriptor, RawFile, RawLimit, Spanned};
use super::{ConfigErrors, RuleSet};

/// "No position": the compiler reports errors at it without a line or column.
const NOWHERE: Pos = (0, 0);

/// The rules of one domain, as data (one xDS resource).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleDocument {
    /// What errors are prefixed with (the resource's `name`).
    pub name: String,
    /// The domain.
    pub domain: String,
    /// Top-level descriptors.
    pub descriptors: Vec<DescriptorRule>,
}

/// One descriptor node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DescriptorRule {
    /// The descriptor key.
    pub key: String,
    /// The value; empty means any value (a key-only node), as in a rule file.
    pub value: String,
    /// The node's limit, if any.
    pub rate_limit: Option<LimitSpec>,
    /// Child descriptors.
    pub descriptors: Vec<DescriptorRule>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `metadata`, as JSON.
    pub metadata: Option<serde_json::Value>,
}

/// One `rate_limit`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitSpec {
    /// The unit's name as envoyproxy/ratelimit spells it (`SECOND` ... `YEAR`, `UNKNOWN`, or the
    /// number of an enum value it does not know), checked as a rule file's `unit:` is.
    pub unit: String,
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unlimited`.
    pub unlimited: bool,
    /// `name`; empty means none.
    pub name: String,
    /// Names of the limits this one replaces.
    pub replaces: Vec<String>,
}

/// Compiles documents, in order, into a rule set; fails with every error of every document.
pub(crate) fn load_documents(
    documents: &[RuleDocument],
    opts: &LoadOptions,
) -> Result<RuleSet, ConfigErrors> {
    let names: Vec<PathBuf> = documents.iter().map(|d| PathBuf::from(&d.name)).collect();
    let parsed = documents.iter().zip(&names).map(|(document, name)| {
        let read = Parsed {
            file: Some(raw_file(document)),
            errors: Vec::new(),
            warnings: Vec::new(),
        };
        (name.as_path(), read)
    });
    let (set, errors) = compile_read(parsed, opts);
    if errors.is_empty() {
        Ok(set)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn raw_file(document: &RuleDocument) -> RawFile {
    RawFile {
        pos: None,
        domain: Some(nowhere(document.domain.clone())),
        bad: false,
        descriptors: document.descriptors.iter().map(raw_descriptor).collect(),
    }
}

fn raw_descriptor(rule: &DescriptorRule) -> RawDescriptor {
    RawDescriptor {
        pos: NOWHERE,
        key: Some(nowhere(rule.key.clone())),
        value: Some(nowhere(rule.value.clone())),
        rate_limit: rule.rate_limit.as_ref().map(raw_limit),
        shadow_mode: rule.shadow_mode,
        quota_mode: rule.quota_mode,
        detailed_metric: rule.detailed_metric,
        metadata: rule.metadata.clone(),
        descriptors: rule.descriptors.iter().map(raw_descriptor).collect(),
        ..RawDescriptor::default()
    }
}

fn raw_limit(limit: &LimitSpec) -> RawLimit {
    RawLimit {
        pos: NOWHERE,
        unit: Some(nowhere(limit.unit.clone())),
        requests_per_unit: limit.requests_per_unit,
        // A rule file's `unlimited: false` and no `unlimited` mean the same.
        unlimited: limit.unlimited.then(|| nowhere(true)),
        name: Some(limit.name.clone()).filter(|n| !n.is_empty()),
        replaces: limit.replaces.iter().cloned().map(nowhere).collect(),
        ..RawLimit::default()
    }
}

fn nowhere<T>(value: T) -> Spanned<T> {
    Spanned {
        value,
        pos: NOWHERE,
    }
}

#[cfg(test)]
mod tests;
