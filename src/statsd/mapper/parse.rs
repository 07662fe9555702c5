//! The mapping file, read as statsd_exporter reads it: `mappings:` (each `match`, `name`,
//! `labels`, `match_type`, `match_metric_type`, `action`, `scale`, `help`) and `defaults:`
//! (`match_type`). Options that shape a histogram or summary (`timer_type`, `observer_type`,
//! `buckets`, `quantiles`, `histogram_options`, `summary_options`, `ttl`) are accepted and have no
//! effect: observers are always histograms on sluice's own buckets. Every error names the
//! line and column of what is wrong.

use regex::Regex;

use super::{Mapper, Rule, StatKind};
use crate::rules::file::Pos;
use crate::rules::file::yaml::{self, Yaml, YamlKind};

/// An error and where.
type Error = (Pos, String);

/// The keys of a mapping that change nothing here.
const INERT_KEYS: [&str; 8] = [
    "timer_type",
    "observer_type",
    "buckets",
    "quantiles",
    "histogram_options",
    "summary_options",
    "ttl",
    "honor_labels",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum MatchType {
    Glob,
    Regex,
}

/// The mapping in `text`.
pub(super) fn mapper(text: &str) -> Result<Mapper, Error> {
    let documents = yaml::parse(text).map_err(|e| {
        let message = e.message.trim_start_matches("error loading config file: ");
        (e.pos, message.to_owned())
    })?;
    let Some(root) = documents.first() else {
        return Ok(Mapper {
            rules: Vec::new(),
            clashed: Default::default(),
        });
    };
    let mut default_type = MatchType::Glob;
    let mut mappings = None;
    for (key, value) in pairs(root, "the file")? {
        match text_of(key)? {
            "mappings" => mappings = Some(value),
            "defaults" => {
                for (key, value) in pairs(value, "defaults")? {
                    match text_of(key)? {
                        "match_type" => default_type = match_type(value)?,
                        "glob_disable_ordering"
                        | "ttl"
                        | "timer_type"
                        | "observer_type"
                        | "buckets"
                        | "quantiles"
                        | "histogram_options"
                        | "summary_options" => {}
                        other => {
                            return Err((key.pos, format!("unknown key {other:?} in defaults")));
                        }
                    }
                }
            }
            other => {
                return Err((
                    key.pos,
                    format!("unknown key {other:?} (mappings or defaults)"),
                ));
            }
        }
    }
    let mut globs = Vec::new();
    let mut regexes = Vec::new();
    if let Some(mappings) = mappings {
        let YamlKind::Seq(items) = &mappings.kind else {
            return Err((mappings.pos, "mappings must be a list".to_owned()));
        };
        for item in items {
            let (rule, kind) = mapping(item, default_type)?;
            match kind {
                MatchType::Glob => globs.push(rule),
                MatchType::Regex => regexes.push(rule),
            }
        }
    }
    globs.extend(regexes);
    Ok(Mapper {
        rules: globs,
        clashed: Default::default(),
    })
}

/// One entry of `mappings`.
fn mapping(node: &Yaml, default_type: MatchType) -> Result<(Rule, MatchType), Error> {
    let mut pattern = None;
    let mut name = None;
    let mut labels = Vec::new();
    let mut kind = None;
    let mut match_kind = default_type;
    let mut drop = false;
    let mut scale = 1.0;
    let mut help = None;
    for (key, value) in pairs(node, "a mapping")? {
        match text_of(key)? {
            "match" => pattern = Some((value.pos, text_of(value)?.to_owned())),
            "name" => name = Some((value.pos, text_of(value)?.to_owned())),
            "match_type" => match_kind = match_type(value)?,
            "match_metric_type" => kind = Some(metric_type(value)?),
            "help" => help = Some(text_of(value)?.to_owned()),
            "action" => {
                drop = match text_of(value)? {
                    "map" => false,
                    "drop" => true,
                    other => {
                        return Err((value.pos, format!("action {other:?} is not map or drop")));
                    }
                }
            }
            "scale" => {
                scale = text_of(value)?
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite())
                    .ok_or_else(|| (value.pos, "scale must be a number".to_owned()))?;
            }
            "labels" => {
                for (label, template) in pairs(value, "labels")? {
                    let label_name = text_of(label)?;
                    if !valid_label(label_name) {
                        return Err((label.pos, format!("{label_name:?} is not a label name")));
                    }
                    labels.push((label_name.to_owned(), text_of(template)?.to_owned()));
                }
            }
            other if INERT_KEYS.contains(&other) => {}
            other => return Err((key.pos, format!("unknown key {other:?} in a mapping"))),
        }
    }
    let Some((at, pattern)) = pattern else {
        return Err((node.pos, "a mapping without match".to_owned()));
    };
    if name.is_none() && !drop {
        return Err((
            node.pos,
            "a mapping without name (or action: drop)".to_owned(),
        ));
    }
    let regex = match match_kind {
        MatchType::Glob => glob(&pattern),
        MatchType::Regex => pattern.clone(),
    };
    let pattern = Regex::new(&regex).map_err(|e| (at, format!("{pattern:?}: {e}")))?;
    let name_at = name.as_ref().map_or(node.pos, |(at, _)| *at);
    let name = name.map(|(_, name)| name);
    let rule = Rule {
        pattern,
        kind,
        name: if drop { None } else { name },
        name_at,
        labels,
        scale,
        help,
    };
    Ok((rule, match_kind))
}

/// A glob as an anchored regular expression: `*` is any run of characters without a dot.
fn glob(pattern: &str) -> String {
    let parts: Vec<String> = pattern.split('*').map(regex::escape).collect();
    format!("^{}$", parts.join("([^.]*)"))
}

fn match_type(node: &Yaml) -> Result<MatchType, Error> {
    match text_of(node)? {
        "" | "glob" => Ok(MatchType::Glob),
        "regex" => Ok(MatchType::Regex),
        other => Err((
            node.pos,
            format!("match_type {other:?} is not glob or regex"),
        )),
    }
}

fn metric_type(node: &Yaml) -> Result<StatKind, Error> {
    match text_of(node)? {
        "counter" => Ok(StatKind::Counter),
        "gauge" => Ok(StatKind::Gauge),
        "observer" | "timer" | "histogram" | "distribution" => Ok(StatKind::Observer),
        other => Err((
            node.pos,
            format!("match_metric_type {other:?} is not counter, gauge or observer"),
        )),
    }
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`.
fn valid_label(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A map's pairs.
fn pairs<'a>(node: &'a Yaml, what: &str) -> Result<&'a [(Yaml, Yaml)], Error> {
    match &node.kind {
        YamlKind::Map(pairs) => Ok(pairs),
        _ => Err((node.pos, format!("{what} must be a map"))),
    }
}

/// A scalar's text.
fn text_of(node: &Yaml) -> Result<&str, Error> {
    yaml::scalar_text(node).ok_or_else(|| (node.pos, "expected a scalar".to_owned()))
}
