//! YAML text to a small tree of maps, lists and scalars that keeps every node's line and column.
//!
//! Built from yaml-rust2's event parser with an explicit stack (its own `load` recurses, so a
//! deeply nested file could overflow the stack), bounded in depth, in nodes and in bytes, each
//! counted once with aliases expanded: an alias is checked against the budget before its
//! anchor is copied, so a small file of aliases to a large anchor cannot exhaust memory.
//! Scalars are kept as written; `scalar.rs` resolves them as envoyproxy/ratelimit does.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::Pos;
use super::scalar::Scalar;

/// Deepest nesting accepted; keeps every later recursive walk of the tree bounded.
pub(super) const MAX_DEPTH: usize = 128;
/// Most nodes accepted in one file after alias expansion (stops "billion laughs").
pub(super) const MAX_NODES: usize = 250_000;
/// Most bytes the tree of one file may take after alias expansion: its scalars' text plus a
/// node's own size for each node. A 16 MiB file without aliases stays well inside it.
pub(super) const MAX_TREE_BYTES: usize = 64 << 20;

/// One YAML node and where it starts.
#[derive(Debug, Clone)]
pub(crate) struct Yaml {
    /// Where the node starts (for a block map: its first key).
    pub pos: Pos,
    /// What it is.
    pub kind: YamlKind,
}

/// The shape of a node.
#[derive(Debug, Clone)]
pub(crate) enum YamlKind {
    /// Key/value pairs in file order (`<<` merges already applied).
    Map(Vec<(Yaml, Yaml)>),
    /// A list.
    Seq(Vec<Yaml>),
    /// A scalar, unresolved.
    Scalar(Scalar),
}

/// A YAML syntax error: envoyproxy/ratelimit's message text and where the parser stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
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
    /// Bytes of this subtree (see [`MAX_TREE_BYTES`]), for the alias-expansion budget.
    bytes: usize,
    /// Levels in this subtree (1 for a leaf), for the depth bound through aliases.
    height: usize,
}

/// What a subtree costs: its nodes, its bytes and its height.
#[derive(Debug, Clone, Copy)]
struct Cost {
    size: usize,
    bytes: usize,
    height: usize,
}

impl Cost {
    /// One node holding `text` bytes of scalar.
    fn node(text: usize) -> Self {
        Self {
            size: 1,
            bytes: NODE_BYTES.saturating_add(text),
            height: 1,
        }
    }
}

/// What one node costs besides its text.
const NODE_BYTES: usize = std::mem::size_of::<Yaml>();

impl Frame {
    fn new(node: Yaml, anchor: usize, cost: Cost) -> Self {
        Self {
            node,
            anchor,
            key: None,
            size: cost.size,
            bytes: cost.bytes,
            height: cost.height,
        }
    }

    fn cost(&self) -> Cost {
        Cost {
            size: self.size,
            bytes: self.bytes,
            height: self.height,
        }
    }

    /// Adds a finished child: an item of a list, or the next key or value of a map.
    fn attach(&mut self, child: Frame) {
        self.size = self.size.saturating_add(child.size);
        self.bytes = self.bytes.saturating_add(child.bytes);
        self.height = self.height.max(child.height + 1);
        match &mut self.node.kind {
            YamlKind::Seq(items) => items.push(child.node),
            YamlKind::Map(pairs) => match self.key.take() {
                Some(key) => {
                    // A block map's start mark is unreliable; its first key is where it starts.
                    if pairs.is_empty() {
                        self.node.pos = key.pos;
                    }
                    let mut value = child.node;
                    // An empty value (`domain:`) is marked where the next token starts, often
                    // the next line; its key is the better place to point at.
                    if matches!(&value.kind, YamlKind::Scalar(s) if s.plain && s.text.is_empty()) {
                        value.pos = key.pos;
                    }
                    pairs.push((key, value));
                }
                None => self.key = Some(child.node),
            },
            YamlKind::Scalar(_) => {}
        }
    }
}

/// One parse in progress: the documents read, the open collections, and the anchors.
#[derive(Default)]
struct Builder {
    docs: Vec<Yaml>,
    /// Collections not yet closed, outermost first.
    stack: Vec<Frame>,
    /// Anchored nodes with their cost; aliases clone them.
    anchors: HashMap<usize, (Yaml, Cost)>,
    /// Nodes so far with aliases expanded, each counted once, for [`MAX_NODES`].
    nodes: usize,
    /// Bytes so far with aliases expanded, for [`MAX_TREE_BYTES`].
    bytes: usize,
}

/// Parses every document of `text`. An empty stream gives no documents.
pub(crate) fn parse(text: &str) -> Result<Vec<Yaml>, SyntaxError> {
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
    // The scanner takes a NUL byte for the end of the text, so a file holding one would be
    // read as if it ended there (a mapping cut short, reported as a missing field elsewhere).
    // YAML allows no NUL anywhere: say so, where it is.
    if let Some(at) = text.find('\0') {
        let line = text[..at].matches('\n').count() + 1;
        let column = text[..at]
            .rsplit('\n')
            .next()
            .map_or(0, |l| l.chars().count())
            + 1;
        return Err(SyntaxError {
            pos: (line, column),
            message: format!(
                "error loading config file: yaml: line {line}: a NUL byte (\\0) at column \
                 {column}: YAML text may not hold one"
            ),
        });
    }
    let mut parser = Parser::new_from_str(text);
    let mut builder = Builder::default();
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
        if matches!(event, Event::StreamEnd) {
            return Ok(builder.docs);
        }
        if let Some(finished) = builder.event(event, mark)? {
            builder.finish(finished, mark)?;
        }
    }
}

impl Builder {
    /// Applies one event; returns the node it completes, if any (a collection completes at
    /// its end event).
    fn event(&mut self, event: Event, mark: Marker) -> Result<Option<Frame>, SyntaxError> {
        let finished = match event {
            Event::Scalar(text, style, anchor, tag) => {
                let cost = Cost::node(text.len());
                self.spend(cost, mark)?;
                let scalar = Scalar {
                    text,
                    plain: style == TScalarStyle::Plain,
                    tag: tag.as_ref().and_then(core_tag),
                };
                Frame::new(leaf(mark, YamlKind::Scalar(scalar)), anchor, cost)
            }
            Event::Alias(id) => {
                let Some(&(_, cost)) = self.anchors.get(&id) else {
                    return Err(error_at(mark, "unknown anchor"));
                };
                // Checked before the copy: the copy is what would exhaust memory.
                self.spend(cost, mark)?;
                let mut node = self.anchors[&id].0.clone();
                node.pos = pos(mark);
                Frame::new(node, 0, cost)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    return Err(error_at(
                        mark,
                        &format!("nesting deeper than {MAX_DEPTH} levels"),
                    ));
                }
                let kind = if matches!(event, Event::SequenceStart(..)) {
                    YamlKind::Seq(Vec::new())
                } else {
                    YamlKind::Map(Vec::new())
                };
                let cost = Cost::node(0);
                self.spend(cost, mark)?;
                self.stack.push(Frame::new(leaf(mark, kind), anchor, cost));
                return Ok(None);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(mut frame) = self.stack.pop() else {
                    return Ok(None);
                };
                if let YamlKind::Map(pairs) = &mut frame.node.kind {
                    apply_merges(pairs).map_err(|p| SyntaxError {
                        pos: p,
                        message: "error loading config file: yaml: map merge requires map or \
                                  sequence of maps as the value"
                            .to_string(),
                    })?;
                }
                frame
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => return Ok(None),
        };
        Ok(Some(finished))
    }

    /// Counts a new node (or an alias's copy of a subtree) against the node and byte budgets
    /// of the whole file. Each node is counted once, when it is created.
    fn spend(&mut self, cost: Cost, mark: Marker) -> Result<(), SyntaxError> {
        self.nodes = self.nodes.saturating_add(cost.size);
        self.bytes = self.bytes.saturating_add(cost.bytes);
        if self.nodes > MAX_NODES {
            return Err(error_at(
                mark,
                &format!("more than {MAX_NODES} nodes (aliases expanded)"),
            ));
        }
        if self.bytes > MAX_TREE_BYTES {
            return Err(error_at(
                mark,
                &format!(
                    "the document takes more than {} of memory (aliases expanded)",
                    crate::files::bytes(MAX_TREE_BYTES as u64)
                ),
            ));
        }
        Ok(())
    }

    /// Checks a completed node against the depth bound (aliases included), records its
    /// anchor, and attaches it to its parent, or ends a document.
    fn finish(&mut self, finished: Frame, mark: Marker) -> Result<(), SyntaxError> {
        if self.stack.len() + finished.height > MAX_DEPTH {
            return Err(error_at(
                mark,
                &format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        if finished.anchor != 0 {
            // The stored copy costs as much again as the anchored node.
            self.spend(finished.cost(), mark)?;
            self.anchors
                .insert(finished.anchor, (finished.node.clone(), finished.cost()));
        }
        match self.stack.last_mut() {
            Some(parent) => parent.attach(finished),
            None => self.docs.push(finished.node),
        }
        Ok(())
    }
}

fn pos(mark: Marker) -> Pos {
    (mark.line(), mark.col() + 1)
}

fn leaf(mark: Marker, kind: YamlKind) -> Yaml {
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
    let is_merge = |k: &Yaml| matches!(&k.kind, YamlKind::Scalar(s) if s.plain && s.tag.is_none() && s.text == "<<");
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
            YamlKind::Map(entries) => vec![entries],
            YamlKind::Seq(items) => {
                let mut maps = Vec::new();
                for item in items {
                    match item.kind {
                        YamlKind::Map(entries) => maps.push(entries),
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
pub(crate) fn scalar_text(node: &Yaml) -> Option<&str> {
    match &node.kind {
        YamlKind::Scalar(s) => Some(&s.text),
        _ => None,
    }
}
