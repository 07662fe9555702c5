//! One rule file: YAML read with positions, checked against envoyproxy/ratelimit's schema, into raw
//! rules.
//!
//! Two passes over the positioned tree, as envoyproxy/ratelimit does them: first the flat key
//! allow-list over the whole document (envoyproxy/ratelimit's `validateYamlKeys`), then typed
//! extraction of the fields each place uses (envoyproxy/ratelimit's struct decoding). Every problem
//! is recorded, none stops the walk; a field that failed marks its owner `bad` so `compile` does
//! not report follow-on errors.
//!
//! `yaml.rs` builds the positioned tree, `scalar.rs` resolves scalars as go-yaml v2 does, this
//! module runs pass 1 and `extract.rs` pass 2.

mod extract;
pub(crate) mod scalar;
pub(crate) mod yaml;

use std::path::Path;

use crate::rules::ConfigError;
use scalar::Value;
use yaml::{Yaml, YamlKind};

/// A 1-based line and column.
pub(crate) type Pos = (usize, usize);

/// envoyproxy/ratelimit's allow-list, applied at every depth (except inside `metadata`).
const COMPAT_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
/// sluice's additions to the allow-list.
const SLUICE_KEYS: [&str; 11] = [
    "record_over_limit",
    "window",
    "calendar",
    "timezone",
    "algorithm",
    "burst",
    "lease",
    "rate_limits",
    "failure_mode",
    "shards",
    "scope",
];

fn is_known(key: &str) -> bool {
    COMPAT_KEYS.contains(&key) || SLUICE_KEYS.contains(&key)
}

/// A value and the position of the node it came from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub pos: Pos,
}

/// A file's top level.
#[derive(Debug, Default)]
pub(super) struct RawFile {
    /// Where the document starts, if there is one.
    pub pos: Option<Pos>,
    /// `domain`, possibly empty.
    pub domain: Option<Spanned<String>>,
    /// An error about the domain (or the whole document) was already reported.
    pub bad: bool,
    /// Top-level descriptors.
    pub descriptors: Vec<RawDescriptor>,
}

/// One descriptor node as written. Fields are the YAML keys of the same name, positioned at
/// their value unless noted; `None` = absent (or null).
#[derive(Debug, Default)]
pub(super) struct RawDescriptor {
    /// Where the descriptor's map starts.
    pub pos: Pos,
    /// `key`.
    pub key: Option<Spanned<String>>,
    /// `value` (possibly empty, which envoyproxy/ratelimit treats as absent).
    pub value: Option<Spanned<String>>,
    /// `rate_limit`.
    pub rate_limit: Option<RawLimit>,
    /// `rate_limits`, positioned at its key.
    pub rate_limits: Option<Spanned<Vec<RawLimit>>>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold`, positioned at its key.
    pub share_threshold: Option<Spanned<bool>>,
    /// `failure_mode`, unchecked.
    pub failure_mode: Option<Spanned<String>>,
    /// `shards`, range unchecked.
    pub shards: Option<Spanned<i128>>,
    /// `metadata` as JSON.
    pub metadata: Option<serde_json::Value>,
    /// Child descriptors.
    pub descriptors: Vec<RawDescriptor>,
    /// A field of this node failed its check (already reported): the node is checked, with
    /// its subtree, but not built.
    pub bad: bool,
}

/// One `rate_limit` map (or `rate_limits` entry) as written, fields as in [`RawDescriptor`].
#[derive(Debug, Default)]
pub(super) struct RawLimit {
    /// Where the map starts.
    pub pos: Pos,
    /// `unit`, unchecked.
    pub unit: Option<Spanned<String>>,
    /// `requests_per_unit` (0 when absent, as envoyproxy/ratelimit).
    pub requests_per_unit: u32,
    /// `unlimited`, positioned at its key.
    pub unlimited: Option<Spanned<bool>>,
    /// `name`, `None` when empty.
    pub name: Option<String>,
    /// `replaces` names, positioned at each entry; an empty string for an entry without a name.
    pub replaces: Vec<Spanned<String>>,
    /// `window`, unparsed.
    pub window: Option<Spanned<String>>,
    /// `calendar`, unchecked.
    pub calendar: Option<Spanned<String>>,
    /// `timezone`, unchecked.
    pub timezone: Option<Spanned<String>>,
    /// `algorithm`, unchecked.
    pub algorithm: Option<Spanned<String>>,
    /// `burst`, range unchecked.
    pub burst: Option<Spanned<i128>>,
    /// `lease`, range unchecked.
    pub lease: Option<Spanned<i128>>,
    /// `scope`, unchecked.
    pub scope: Option<Spanned<String>>,
    /// `record_over_limit`, positioned at its key.
    pub record_over_limit: Option<Spanned<bool>>,
    /// A field of this limit failed its check (already reported).
    pub bad: bool,
}

/// What reading one file gave: the raw rules (unless the YAML did not parse) and its findings.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    /// The raw rules; `None` when the YAML did not parse.
    pub file: Option<RawFile>,
    /// Errors, in no particular order.
    pub errors: Vec<ConfigError>,
    /// Non-fatal findings.
    pub warnings: Vec<ConfigError>,
}

/// Reads and schema-checks one rule file. Never panics, whatever `text` holds.
pub(super) fn read(path: &Path, text: &str) -> Parsed {
    let docs = match yaml::parse(text) {
        Ok(docs) => docs,
        Err(e) => {
            return Parsed {
                file: None,
                errors: vec![ConfigError::at(path, Some(e.pos), e.message)],
                warnings: Vec::new(),
            };
        }
    };
    let mut c = Checker {
        path,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    // envoyproxy/ratelimit decodes only the first document; a second one would be silently ignored
    // there, which hides rules, so it is an error here (an empty trailing `---` is fine).
    for doc in docs.iter().skip(1) {
        if !is_null(doc) {
            c.error(
                doc.pos,
                "config error, a rule file must hold a single YAML document",
            );
        }
    }
    let file = match docs.first() {
        None => RawFile::default(),
        Some(root) if is_null(root) => RawFile {
            pos: Some(root.pos),
            ..RawFile::default()
        },
        Some(
            root @ Yaml {
                kind: YamlKind::Map(pairs),
                ..
            },
        ) => {
            c.validate_map(pairs);
            c.root(root.pos, pairs)
        }
        Some(root) => {
            if matches!(root.kind, YamlKind::Seq(_)) {
                // Not via type_error, which leaves lists to pass 1 (not run on a non-map root).
                c.error(
                    root.pos,
                    "error loading config file: yaml: unmarshal errors: cannot unmarshal !!seq into map",
                );
            } else {
                c.type_error(root, "map");
            }
            RawFile {
                pos: Some(root.pos),
                bad: true,
                ..RawFile::default()
            }
        }
    };
    Parsed {
        file: Some(file),
        errors: c.errors,
        warnings: c.warnings,
    }
}

fn is_null(node: &Yaml) -> bool {
    matches!(&node.kind, YamlKind::Scalar(s) if s.resolve() == Value::Null)
}

/// Collects the findings of one file.
struct Checker<'p> {
    path: &'p Path,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl Checker<'_> {
    fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors
            .push(ConfigError::at(self.path, Some(pos), message));
    }

    fn warn(&mut self, pos: Pos, message: impl Into<String>) {
        self.warnings
            .push(ConfigError::at(self.path, Some(pos), message));
    }

    /// go-yaml's decoding error for a node of the wrong type.
    fn type_error(&mut self, node: &Yaml, target: &str) {
        // A list with a non-map element was reported by pass 1 already.
        if let YamlKind::Seq(items) = &node.kind
            && items.iter().any(|i| !matches!(i.kind, YamlKind::Map(_)))
        {
            return;
        }
        let found = match &node.kind {
            YamlKind::Map(_) => "!!map".to_string(),
            YamlKind::Seq(_) => "!!seq".to_string(),
            YamlKind::Scalar(s) => {
                let tag = match s.resolve() {
                    Value::Null => "null",
                    Value::Bool(_) => "bool",
                    Value::Int(_) => "int",
                    Value::Float => "float",
                    Value::Str(_) => "str",
                };
                let text: String = s.text.chars().take(40).collect();
                format!("!!{tag} `{text}`")
            }
        };
        self.error(
            node.pos,
            format!("error loading config file: yaml: unmarshal errors: cannot unmarshal {found} into {target}"),
        );
    }

    // ---- Pass 1: envoyproxy/ratelimit's allow-list walk. ----

    fn validate_map(&mut self, pairs: &[(Yaml, Yaml)]) {
        for (k, v) in pairs {
            let Some(key) = string_key(k) else {
                self.error(
                    k.pos,
                    format!(
                        "config error, key is not of type string: {}",
                        short(go_fmt(k))
                    ),
                );
                continue;
            };
            if !is_known(key) {
                self.error(k.pos, format!("config error, unknown key '{key}'"));
                continue;
            }
            // Metadata is free-form: envoyproxy/ratelimit does not check its keys.
            if key != "metadata" {
                self.validate_value(v);
            }
        }
    }

    fn validate_value(&mut self, node: &Yaml) {
        match &node.kind {
            YamlKind::Seq(items) => {
                for item in items {
                    match &item.kind {
                        YamlKind::Map(pairs) => self.validate_map(pairs),
                        _ => self.error(
                            item.pos,
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                short(go_fmt(item))
                            ),
                        ),
                    }
                }
            }
            YamlKind::Map(pairs) => self.validate_map(pairs),
            YamlKind::Scalar(s) => {
                if s.resolve() == Value::Float {
                    self.error(node.pos, "error checking config");
                }
            }
        }
    }
}

/// The key's text if it resolves to a string (go-yaml: `0.25`, `1`, `true`, `~` do not).
fn string_key(node: &Yaml) -> Option<&str> {
    match &node.kind {
        YamlKind::Scalar(s) => match s.resolve() {
            Value::Str(text) => Some(text),
            _ => None,
        },
        _ => None,
    }
}

/// `text`, cut to a length that keeps an error message on one readable line.
fn short(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(80) {
        text.truncate(at);
        text.push_str("...");
    }
    text
}

/// A node as Go's `%v` prints the decoded value (for envoyproxy/ratelimit's messages).
fn go_fmt(node: &Yaml) -> String {
    match &node.kind {
        YamlKind::Scalar(s) => match s.resolve() {
            Value::Null => "<nil>".to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Int(n) => n.to_string(),
            Value::Float | Value::Str(_) => s.text.clone(),
        },
        YamlKind::Seq(items) => {
            let items: Vec<String> = items.iter().map(go_fmt).collect();
            format!("[{}]", items.join(" "))
        }
        YamlKind::Map(pairs) => {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}:{}", go_fmt(k), go_fmt(v)))
                .collect();
            format!("map[{}]", pairs.join(" "))
        }
    }
}

#[cfg(test)]
mod tests;
