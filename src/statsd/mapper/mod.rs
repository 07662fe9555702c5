//! A statsd_exporter mapping (`PROMETHEUS_MAPPER_YAML`, `--prometheus-mapper`) applied to
//! envoyproxy/ratelimit's statsd names, making the Prometheus families `/metrics` serves in
//! place of the built-in `ratelimit_service_*` ones: the file read with every error placed
//! (`parse.rs`), each stat matched and renamed (here), the families written (`render.rs`).
//!
//! As statsd_exporter does: glob mappings are tried first, in file order (`*` is any run of
//! characters without a dot), then regex mappings in file order; the first whose pattern and
//! `match_metric_type` fit wins; `name` and `labels` take `$1`… from its groups; `action: drop`
//! leaves the stat out; a stat no mapping matches keeps its name with every character outside
//! `[a-zA-Z0-9_]` made `_`.
//!
//! A family name `/metrics` already has (`sluice_*`, `process_*`; not the `ratelimit_service_*`
//! ones the mapping replaces) would make a second family of that name, and Prometheus refuses a
//! scrape with two. A mapping whose `name` is such a name is refused at load, at its line and
//! column; a name made from `$1`… that turns out to be one is left out of `/metrics`, with one
//! warning per name.

mod parse;
mod render;

use std::path::Path;

use regex::Regex;

use crate::metrics::{CompatExposition, CompatStat};
use crate::rules::file::Pos;

/// The most bytes a mapping file may hold.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// A loaded mapping.
#[derive(Debug)]
pub struct Mapper {
    /// Glob mappings first, then regex mappings, each in file order.
    rules: Vec<Rule>,
    /// Names made from captures that clashed with a family of `/metrics`, already warned of.
    clashed: parking_lot::Mutex<std::collections::BTreeSet<String>>,
}

/// One mapping.
#[derive(Debug)]
struct Rule {
    pattern: Regex,
    /// `None`: any kind of stat.
    kind: Option<StatKind>,
    /// `None`: `action: drop`.
    name: Option<String>,
    /// Where `name` was written.
    name_at: Pos,
    labels: Vec<(String, String)>,
    /// Observed values are multiplied by it (`scale`).
    scale: f64,
    help: Option<String>,
}

/// What a stat is, as `match_metric_type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatKind {
    Counter,
    Gauge,
    Observer,
}

/// Why a mapping file was not loaded: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct MapperError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the file could not be read).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// What one stat becomes.
struct Mapped<'a> {
    name: String,
    labels: Vec<(String, String)>,
    scale: f64,
    help: Option<&'a str>,
}

impl Mapper {
    /// Reads and checks the mapping file at `path`; `taken` names the family of `/metrics` a
    /// name would clash with, if any (see the module's documentation).
    pub fn load(path: &Path, taken: &dyn Fn(&str) -> Option<String>) -> Result<Self, MapperError> {
        let error = |(line, column), message| MapperError {
            file: path.display().to_string(),
            line,
            column,
            message,
        };
        let text = crate::files::read_to_string(path, MAX_FILE_BYTES)
            .map_err(|e| error((0, 0), format!("cannot read the mapping: {e}")))?;
        let mapper = parse::mapper(&text).map_err(|(pos, message)| error(pos, message))?;
        mapper
            .check_names(taken)
            .map_err(|(pos, message)| error(pos, message))?;
        Ok(mapper)
    }

    /// Refuses a mapping whose written `name` (no `$` in it) is a family `/metrics` has.
    fn check_names(&self, taken: &dyn Fn(&str) -> Option<String>) -> Result<(), (Pos, String)> {
        for rule in &self.rules {
            let Some(name) = rule.name.as_deref().filter(|n| !n.contains('$')) else {
                continue;
            };
            if let Some(family) = taken(&escape(name)) {
                return Err((
                    rule.name_at,
                    format!(
                        "name {name:?} clashes with the family {family} that /metrics already \
                         has: Prometheus refuses a scrape with two families of one name; \
                         choose another name"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether a family named `name`, made from captures, is left out as `taken`; the first
    /// time for each name, a warning says so.
    fn clashes(&self, name: &str, taken: &dyn Fn(&str) -> bool) -> bool {
        if !taken(name) {
            return false;
        }
        if self.clashed.lock().insert(name.to_owned()) {
            tracing::warn!(
                family = %crate::log_text::LogText(name),
                "a statsd mapping made a family /metrics already has; it is left out"
            );
        }
        true
    }

    /// What `name` (a stat of `kind`) becomes; `None` when a mapping drops it.
    fn map(&self, name: &str, kind: StatKind) -> Option<Mapped<'_>> {
        for rule in &self.rules {
            if rule.kind.is_some_and(|k| k != kind) {
                continue;
            }
            let Some(groups) = rule.pattern.captures(name) else {
                continue;
            };
            let template = rule.name.as_deref()?;
            let expand = |template: &str| {
                let mut out = String::new();
                groups.expand(template, &mut out);
                out
            };
            return Some(Mapped {
                name: escape(&expand(template)),
                labels: (rule.labels.iter())
                    .map(|(label, value)| (label.clone(), expand(value)))
                    .collect(),
                scale: rule.scale,
                help: rule.help.as_deref(),
            });
        }
        Some(Mapped {
            name: escape(name),
            labels: Vec::new(),
            scale: 1.0,
            help: None,
        })
    }
}

impl CompatExposition for Mapper {
    fn render(&self, stats: &[CompatStat], taken: &dyn Fn(&str) -> bool) -> String {
        render::families(self, stats, taken)
    }
}

/// statsd_exporter's escaping of a name: every character outside `[a-zA-Z0-9_]` becomes `_`,
/// and a leading digit gets a `_` before it.
fn escape(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests;
