//! YAML text to a small tree of maps, lists and scalars that keeps every node's line and column.
//!
//! Built from yaml-rust2's event parser with an explicit stack (its own `load` recurses, so a
//! deeply nested file could overflow the stack). Scalars are resolved the way upstream's YAML
//! library (go-yaml v2, YAML 1.1) resolves them, so the same file means the same thing.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Deepest nesting accepted; keeps every later recursive walk of the tree bounded.
pub(super) const MAX_DEPTH: usize = 128;
/// Most nodes accepted in one document after alias expansion (stops "billion laughs").
pub(super) const MAX_NODES: usize = 250_000;

use super::Pos;

/// One YAML node and where it starts.
#[derive(Debug, Clone)]
pub(super) struct Yaml {
    /// Where the node starts (for a block map: its first key).
    pub pos: Pos,
    /// What it is.
    pub kind: Kind,
}

/// The shape of a node.
#[derive(Debug, Clone)]
pub(super) enum Kind {
    /// Key/value pairs in file order (`<<` merges already applied).
    Map(Vec<(Yaml, Yaml)>),
    /// A list.
    Seq(Vec<Yaml>),
    /// A scalar, unresolved.
    Scalar(Scalar),
}

/// A scalar as written.
#[derive(Debug, Clone)]
pub(super) struct Scalar {
    /// The text (quotes and escapes already processed).
    pub text: String,
    /// Plain (unquoted, not a block scalar): only plain scalars resolve to null/bool/int/float.
    pub plain: bool,
    /// The core-schema tag suffix of an explicit tag (`str`, `int`, ...), or `!` for a
    /// non-specific tag; `None` when untagged or tagged with a custom tag.
    pub tag: Option<String>,
}

/// A resolved scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value<'a> {
    /// `~`, `null`, or nothing at all.
    Null,
    /// YAML 1.1 booleans (`true`, `yes`, `on`, ...).
    Bool(bool),
    /// An integer in YAML 1.1 syntax (`10`, `0x1f`, `0o17`, `1_000`), within i64/u64 range.
    Int(i128),
    /// A float, or an integer too large for 64 bits (as go-yaml resolves it).
    Float,
    /// Anything else, and every quoted or block scalar.
    Str(&'a str),
}

impl Scalar {
    /// Resolves the scalar as go-yaml v2 does for an untyped target.
    pub fn resolve(&self) -> Value<'_> {
        let text = self.text.as_str();
        match self.tag.as_deref() {
            Some("str" | "binary" | "!") => return Value::Str(text),
            Some("null") => return Value::Null,
            Some("float") => return Value::Float,
            Some("bool") => return parse_bool(text).map_or(Value::Str(text), Value::Bool),
            Some("int") => return parse_int(text).unwrap_or(Value::Str(text)),
            _ => {}
        }
        if !self.plain {
            return Value::Str(text);
        }
        if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
            return Value::Null;
        }
        if let Some(b) = parse_bool(text) {
            return Value::Bool(b);
        }
        if let Some(v) = parse_int(text) {
            return v;
        }
        if is_float(text) {
            return Value::Float;
        }
        Value::Str(text)
    }
}

/// YAML 1.1 booleans, as go-yaml v2 accepts them.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Some(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Some(false)
        }
        _ => None,
    }
}

/// YAML 1.1 integers: sign, `0x`/`0o`/`0b` or a leading-zero octal, `_` separators. Values
/// beyond 64 bits come back as [`Value::Float`], as go-yaml falls back to a float for them.
fn parse_int(text: &str) -> Option<Value<'static>> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match cleaned.as_bytes().first() {
        Some(b'-') => (true, &cleaned[1..]),
        Some(b'+') => (false, &cleaned[1..]),
        _ => (false, cleaned.as_str()),
    };
    let (radix, body) = if let Some(rest) = digits.strip_prefix("0x") {
        (16, rest)
    } else if let Some(rest) = digits.strip_prefix("0o") {
        (8, rest)
    } else if let Some(rest) = digits.strip_prefix("0b") {
        (2, rest)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let Ok(magnitude) = u128::from_str_radix(body, radix) else {
        return Some(Value::Float);
    };
    let value = if negative {
        -(i128::try_from(magnitude).ok()?)
    } else {
        i128::try_from(magnitude).ok()?
    };
    if value < i128::from(i64::MIN) || value > i128::from(u64::MAX) {
        return Some(Value::Float);
    }
    Some(Value::Int(value))
}

/// go-yaml v2's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?` and the
/// `.inf`/`.nan` spellings.
fn is_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// A YAML syntax error: upstream's message text and where the parser stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SyntaxError {
    /// Where.
    pub pos: Pos,
    /// The message, e.g. `error loading config file: yaml: line 2: ...`.
    pub message: String,
}

/// A node under construction, with the bookkeeping that bounds size and depth.
struct Frame {
    node: Yaml,
    anchor: usize,
    /// A map's key waiting for its value.
    key: Option<Yaml>,
    /// Nodes in this subtree, for the alias-expansion budget.
    size: usize,
    /// Levels in this subtree (1 for a leaf), for the depth bound through aliases.
    height: usize,
}

/// Parses every document of `text`. An empty stream gives no documents.
pub(super) fn parse(text: &str) -> Result<Vec<Yaml>, SyntaxError> {
    // Defence in depth: a parser bug must become a load error, never take the server down.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse_inner(text))).unwrap_or_else(
        |_| {
            Err(SyntaxError {
                pos: (1, 1),
                message: "error loading config file: yaml: the YAML parser failed on this file"
                    .to_string(),
            })
        },
    )
}

fn parse_inner(text: &str) -> Result<Vec<Yaml>, SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut docs = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    // Anchored nodes with their size and height; aliases clone them.
    let mut anchors: HashMap<usize, (Yaml, usize, usize)> = HashMap::new();
    let mut total = 0usize;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            let m = e.marker();
            SyntaxError {
                pos: (m.line(), m.col() + 1),
                message: format!(
                    "error loading config file: yaml: line {}: {}",
                    m.line(),
                    e.info()
                ),
            }
        })?;
        let done = |node: Yaml, anchor: usize, size: usize, height: usize| Frame {
            node,
            anchor,
            key: None,
            size,
            height,
        };
        let finished = match event {
            Event::StreamEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentStart | Event::DocumentEnd => {
                continue;
            }
            Event::Scalar(text, style, anchor, tag) => {
                let scalar = Scalar {
                    text,
                    plain: style == TScalarStyle::Plain,
                    tag: tag.as_ref().and_then(core_tag),
                };
                done(leaf(mark, Kind::Scalar(scalar)), anchor, 1, 1)
            }
            Event::Alias(id) => {
                let Some((node, size, height)) = anchors.get(&id) else {
                    return Err(error_at(mark, "unknown anchor"));
                };
                let mut node = node.clone();
                node.pos = pos(mark);
                done(node, 0, *size, *height)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(error_at(
                        mark,
                        &format!("nesting deeper than {MAX_DEPTH} levels"),
                    ));
                }
                let kind = if matches!(event, Event::SequenceStart(..)) {
                    Kind::Seq(Vec::new())
                } else {
                    Kind::Map(Vec::new())
                };
                stack.push(done(leaf(mark, kind), anchor, 1, 1));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(mut frame) => {
                    if let Kind::Map(pairs) = &mut frame.node.kind {
                        apply_merges(pairs).map_err(|p| SyntaxError {
                            pos: p,
                            message: "error loading config file: yaml: map merge requires map or \
                                      sequence of maps as the value"
                                .to_string(),
                        })?;
                    }
                    frame
                }
                None => continue,
            },
        };
        total = total.saturating_add(finished.size);
        if total > MAX_NODES {
            return Err(error_at(mark, &format!("more than {MAX_NODES} nodes")));
        }
        if stack.len() + finished.height > MAX_DEPTH {
            return Err(error_at(
                mark,
                &format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        if finished.anchor != 0 {
            anchors.insert(
                finished.anchor,
                (finished.node.clone(), finished.size, finished.height),
            );
        }
        let Some(parent) = stack.last_mut() else {
            docs.push(finished.node);
            continue;
        };
        parent.size = parent.size.saturating_add(finished.size);
        parent.height = parent.height.max(finished.height + 1);
        match &mut parent.node.kind {
            Kind::Seq(items) => items.push(finished.node),
            Kind::Map(pairs) => match parent.key.take() {
                Some(key) => {
                    // A block map's start mark is unreliable; its first key is where it starts.
                    if pairs.is_empty() {
                        parent.node.pos = key.pos;
                    }
                    let mut value = finished.node;
                    // An empty value (`domain:`) is marked where the next token starts, often
                    // the next line; its key is the better place to point at.
                    if matches!(&value.kind, Kind::Scalar(s) if s.plain && s.text.is_empty()) {
                        value.pos = key.pos;
                    }
                    pairs.push((key, value));
                }
                None => parent.key = Some(finished.node),
            },
            Kind::Scalar(_) => {}
        }
    }
    Ok(docs)
}

fn pos(mark: Marker) -> Pos {
    (mark.line(), mark.col() + 1)
}

fn leaf(mark: Marker, kind: Kind) -> Yaml {
    Yaml {
        pos: pos(mark),
        kind,
    }
}

fn error_at(mark: Marker, what: &str) -> SyntaxError {
    SyntaxError {
        pos: pos(mark),
        message: format!(
            "error loading config file: yaml: line {}: {what}",
            mark.line()
        ),
    }
}

/// The suffix of a core-schema tag (`!!str` -> `str`); `!` for the non-specific tag.
fn core_tag(tag: &Tag) -> Option<String> {
    match tag.handle.as_str() {
        "tag:yaml.org,2002:" | "!!" => Some(tag.suffix.clone()),
        // The non-specific tag `!` (the scanner gives it as an empty handle and suffix `!`).
        "" if tag.suffix == "!" => Some("!".to_string()),
        "!" if tag.suffix.is_empty() => Some("!".to_string()),
        _ => None,
    }
}

/// Applies YAML merge keys (`<<: *base`): merged entries fill in keys the map does not set.
/// On error returns the position of the bad `<<` value.
fn apply_merges(pairs: &mut Vec<(Yaml, Yaml)>) -> Result<(), Pos> {
    let is_merge = |k: &Yaml| matches!(&k.kind, Kind::Scalar(s) if s.plain && s.tag.is_none() && s.text == "<<");
    if !pairs.iter().any(|(k, _)| is_merge(k)) {
        return Ok(());
    }
    let (merges, mut own): (Vec<_>, Vec<_>) = std::mem::take(pairs)
        .into_iter()
        .partition(|(k, _)| is_merge(k));
    // Keys already set, so merging many keys is not quadratic.
    let mut present: std::collections::HashSet<String> = own
        .iter()
        .filter_map(|(k, _)| scalar_text(k))
        .map(str::to_string)
        .collect();
    for (_, value) in merges {
        let sources = match value.kind {
            Kind::Map(entries) => vec![entries],
            Kind::Seq(items) => {
                let mut maps = Vec::new();
                for item in items {
                    match item.kind {
                        Kind::Map(entries) => maps.push(entries),
                        _ => return Err(item.pos),
                    }
                }
                maps
            }
            _ => return Err(value.pos),
        };
        for (key, v) in sources.into_iter().flatten() {
            let fresh = match scalar_text(&key) {
                Some(text) => present.insert(text.to_string()),
                None => true,
            };
            if fresh {
                own.push((key, v));
            }
        }
    }
    *pairs = own;
    Ok(())
}

/// A scalar node's text.
pub(super) fn scalar_text(node: &Yaml) -> Option<&str> {
    match &node.kind {
        Kind::Scalar(s) => Some(&s.text),
        _ => None,
    }
}
