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

mod parse;
mod render;

use std::path::Path;

use regex::Regex;

use crate::metrics::{CompatExposition, CompatStat};

/// The most bytes a mapping file may hold.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// A loaded mapping.
#[derive(Debug)]
pub struct Mapper {
    /// Glob mappings first, then regex mappings, each in file order.
    rules: Vec<Rule>,
}

/// One mapping.
#[derive(Debug)]
struct Rule {
    pattern: Regex,
    /// `None`: any kind of stat.
    kind: Option<StatKind>,
    /// `None`: `action: drop`.
    name: Option<String>,
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
    /// Reads and checks the mapping file at `path`.
    pub fn load(path: &Path) -> Result<Self, MapperError> {
        let text = crate::files::read_to_string(path, MAX_FILE_BYTES).map_err(|e| MapperError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read the mapping: {e}"),
        })?;
        parse::mapper(&text).map_err(|(pos, message)| MapperError {
            file: path.display().to_string(),
            line: pos.0,
            column: pos.1,
            message,
        })
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
    fn render(&self, stats: &[CompatStat]) -> String {
        render::families(self, stats)
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
