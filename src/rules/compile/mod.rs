//! Rule files to an immutable [`RuleSet`]: validation beyond the schema, merging domains across
//! files, and indexing each level for matching. Every error of a load is reported, not the first.
//!
//! `sources.rs` finds and reads the files, `limit.rs` builds each node's limits; this module
//! builds the descriptor tree of each domain.

mod limit;
mod sources;

use std::path::{Path, PathBuf};

use crate::algorithm::{Algorithm, Recording};
use crate::rules::compile::sources::Collected;
pub(crate) use crate::rules::compile::sources::{MAX_FILE_BYTES, is_rule_file, is_skipped};
use crate::rules::file::{self, Parsed, Pos, RawDescriptor, RawFile};
use crate::rules::matcher::{Pattern, find_exact};
use crate::rules::{
    ConfigError, ConfigErrors, DEFAULT_ALGORITHM, Domain, FailureMode, Level, Location, Node,
    RuleSet,
};

/// The most sub-counters a rule may split its counter into.
pub(super) const MAX_SHARDS: i128 = 1024;

/// How rule files are turned into a [`RuleSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// The algorithm of limits that set no `algorithm:` (`--default-algorithm`).
    pub default_algorithm: Algorithm,
    /// Let several files add to one domain (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Limits may say `scope: global`: the server shares them with other regions through a
    /// global store (`--global-redis-url`). Without one such a limit is an error, so a region
    /// that is not connected can never admit the whole limit on its own.
    pub global_scope: bool,
    /// Limits that set no `record_over_limit:` record every charge (`--record-over-limit`).
    pub record_over_limit: bool,
    /// Count as envoyproxy/ratelimit (the drop-in personality): fixed-window limits that set
    /// no `record_over_limit:` record every charge, and every limit that records judges a
    /// check as envoyproxy/ratelimit does ([`Recording::AlwaysCompat`]).
    pub compat_recording: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            default_algorithm: DEFAULT_ALGORITHM,
            merge_domains: false,
            global_scope: false,
            record_over_limit: false,
            compat_recording: false,
        }
    }
}

impl LoadOptions {
    /// Whether a limit counted with `algorithm` that sets no `record_over_limit:` records
    /// every charge.
    pub fn records_by_default(&self, algorithm: Algorithm) -> bool {
        self.record_over_limit || (self.compat_recording && algorithm == Algorithm::FixedWindow)
    }

    /// What a limit counted with `algorithm` does with hits past it, `said` its
    /// `record_over_limit:` if it sets one. A sliding log never records (the rules refuse one
    /// that would; a request-side override counted with it, by `--default-algorithm`, does not).
    pub fn recording(&self, algorithm: Algorithm, said: Option<bool>) -> Recording {
        let records = said.unwrap_or_else(|| self.records_by_default(algorithm));
        match (records, algorithm, self.compat_recording) {
            (false, _, _) | (_, Algorithm::SlidingLog, _) => Recording::AdmittedOnly,
            (true, _, false) => Recording::Always,
            (true, _, true) => Recording::AlwaysCompat,
        }
    }
}

/// Loads rule files from `paths`: each a file, or a directory searched recursively for
/// `*.yaml`/`*.yml` (entries whose name starts with `.` are skipped, as Kubernetes ConfigMap
/// mounts keep old and staged copies in `..data`-style entries; symlinks are followed; files are
/// taken in sorted path order). A missing path or an unreadable file is an error like any other.
pub fn load(paths: &[PathBuf], opts: &LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let mut collected = Collected::default();
    for path in paths {
        collected.collect(path);
    }
    let Collected {
        files: sources,
        mut errors,
        warnings,
        ..
    } = collected;
    let (mut set, compile_errors) = compile(&sources, opts);
    errors.extend(compile_errors);
    set.warnings.extend(warnings);
    if sources.is_empty() && errors.is_empty() {
        for path in paths {
            set.warnings.push(ConfigError::in_file(
                path,
                "no rule files (*.yaml, *.yml) found",
            ));
        }
    }
    if errors.is_empty() {
        Ok(set)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Compiles rule files already in memory, `(name, contents)` in load order; no I/O.
pub fn load_sources(
    sources: &[(PathBuf, String)],
    opts: &LoadOptions,
) -> Result<RuleSet, ConfigErrors> {
    let (set, errors) = compile(sources, opts);
    if errors.is_empty() {
        Ok(set)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The most bytes the full keys of a load's nodes (`domain.key_value.key2...`) may take
/// together. Each node spells out its ancestors' keys, so a deep file of long values could
/// otherwise make far more memory of keys than the file has bytes.
pub(crate) const MAX_KEY_BYTES: usize = 64 << 20;

/// What one file's compilation needs: where errors go, the options, and the load's budget of
/// full-key bytes.
pub(super) struct Ctx<'a> {
    pub path: &'a Path,
    pub opts: &'a LoadOptions,
    pub errors: &'a mut Vec<ConfigError>,
    pub key_bytes: &'a mut usize,
}

impl Ctx<'_> {
    pub fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors
            .push(ConfigError::at(self.path, Some(pos), message));
    }

    /// Counts a full key of `len` bytes against [`MAX_KEY_BYTES`]; false (reported once per
    /// file) when the budget is spent.
    fn spend_key(&mut self, len: usize, pos: Pos) -> bool {
        let before = *self.key_bytes;
        *self.key_bytes = before.saturating_add(len);
        if *self.key_bytes <= MAX_KEY_BYTES {
            return true;
        }
        if before <= MAX_KEY_BYTES || self.errors.is_empty() {
            self.error(
                pos,
                format!(
                    "the descriptors' full keys take more than {} in all (keys and values too long or nested too deep)",
                    crate::files::bytes(MAX_KEY_BYTES as u64)
                ),
            );
        }
        false
    }
}

/// Compiles every source; returns the rule set (meaningful only without errors) and the errors,
/// file by file, each file's in position order.
fn compile(sources: &[(PathBuf, String)], opts: &LoadOptions) -> (RuleSet, Vec<ConfigError>) {
    let read = sources
        .iter()
        .map(|(path, text)| (path.as_path(), file::read(path, text)));
    compile_read(read, opts)
}

/// Compiles files already read into raw rules (from YAML text, or built from data by
/// `rules::document`): the one path every rule set takes, so validation is the same for all.
pub(super) fn compile_read<'p>(
    files: impl Iterator<Item = (&'p Path, Parsed)>,
    opts: &LoadOptions,
) -> (RuleSet, Vec<ConfigError>) {
    let mut set = RuleSet::default();
    let mut errors = Vec::new();
    let mut key_bytes = 0;
    for (path, parsed) in files {
        let mut file_errors = parsed.errors;
        set.warnings.extend(parsed.warnings);
        if let Some(raw) = parsed.file {
            let mut ctx = Ctx {
                path,
                opts,
                errors: &mut file_errors,
                key_bytes: &mut key_bytes,
            };
            add_file(&mut ctx, &mut set, raw);
        }
        file_errors.sort_by_key(|e| (e.location.line, e.location.col));
        errors.extend(file_errors);
    }
    (set, errors)
}

fn add_file(ctx: &mut Ctx<'_>, set: &mut RuleSet, raw: RawFile) {
    let domain_pos = raw.domain.as_ref().map(|d| d.pos).or(raw.pos);
    let name = raw.domain.filter(|d| !d.value.is_empty());
    // A file whose domain is unusable is still compiled, into a throwaway level, so that the
    // errors of its descriptors are reported too.
    let mut scratch = Level::default();
    let (root, name) = match name {
        None => {
            if !raw.bad {
                let message = "config file cannot have empty domain";
                match domain_pos {
                    Some(pos) => ctx.error(pos, message),
                    None => ctx.errors.push(ConfigError::in_file(ctx.path, message)),
                }
            }
            (&mut scratch, String::new())
        }
        Some(d) if set.domains.contains_key(&d.value) && !ctx.opts.merge_domains => {
            ctx.error(
                d.pos,
                format!("duplicate domain '{}' in config file", d.value),
            );
            (&mut scratch, d.value)
        }
        Some(d) => {
            let domain = set
                .domains
                .entry(d.value.clone())
                .or_insert_with(|| Domain {
                    name: d.value.clone(),
                    root: Level::default(),
                });
            // With merging on, a later file's top-level descriptors join the domain as siblings:
            // no deep merge, so the same top-level node in two files is a duplicate.
            (&mut domain.root, d.value)
        }
    };
    add_descriptors(ctx, root, &name, raw.descriptors);
}

fn add_descriptors(ctx: &mut Ctx<'_>, level: &mut Level, parent: &str, raws: Vec<RawDescriptor>) {
    for raw in raws {
        if let Some(node) = build_node(ctx, parent, raw) {
            insert(ctx, level, node);
        }
    }
}

/// Validates one descriptor and its subtree; `None` if it cannot be a node (no key).
fn build_node(ctx: &mut Ctx<'_>, parent: &str, mut raw: RawDescriptor) -> Option<Node> {
    let key = raw
        .key
        .as_ref()
        .map_or("", |k| k.value.as_str())
        .to_string();
    if key.is_empty() && !raw.bad {
        ctx.error(
            raw.key.as_ref().map_or(raw.pos, |k| k.pos),
            "descriptor has empty key",
        );
    }
    // envoyproxy/ratelimit treats an empty value as no value (a key-only node).
    let value = raw.value.take().map(|v| v.value).filter(|v| !v.is_empty());
    let segment = match &value {
        Some(v) => format!("{key}_{v}"),
        None => key.clone(),
    };
    if !ctx.spend_key(parent.len() + 1 + segment.len(), raw.pos) {
        return None;
    }
    let full_key = format!("{parent}.{segment}");
    let share_threshold = share_threshold(ctx, &raw, value.as_deref(), &segment);
    let limits = limit::build_all(ctx, &raw, &full_key);
    let failure_mode = failure_mode(ctx, &raw);
    let shards = shards(ctx, &raw);
    let mut children = Level::default();
    add_descriptors(
        ctx,
        &mut children,
        &full_key,
        std::mem::take(&mut raw.descriptors),
    );
    // A node with a field in error is not inserted: a wrong value could only cause follow-on
    // errors (e.g. a duplicate of a key-only sibling), and the load fails anyway.
    if key.is_empty() || raw.bad {
        return None;
    }
    Some(Node {
        key,
        value,
        limits,
        shadow_mode: raw.shadow_mode,
        quota_mode: raw.quota_mode,
        detailed_metric: raw.detailed_metric,
        value_to_metric: raw.value_to_metric,
        share_threshold,
        failure_mode,
        shards,
        metadata: raw.metadata,
        full_key,
        location: Location {
            file: ctx.path.to_path_buf(),
            line: (raw.pos.0 > 0).then_some(raw.pos.0),
            col: (raw.pos.0 > 0).then_some(raw.pos.1),
        },
        children,
        series: Default::default(),
    })
}

/// `share_threshold`, which only a wildcard value can use (reported otherwise, as
/// envoyproxy/ratelimit).
fn share_threshold(
    ctx: &mut Ctx<'_>,
    raw: &RawDescriptor,
    value: Option<&str>,
    segment: &str,
) -> bool {
    match &raw.share_threshold {
        Some(st) if st.value && !raw.bad && !value.is_some_and(|v| v.contains('*')) => {
            ctx.error(
                st.pos,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{segment}'"
                ),
            );
            false
        }
        Some(st) => st.value,
        None => false,
    }
}

/// `failure_mode`, `allow` when absent or unknown (reported).
fn failure_mode(ctx: &mut Ctx<'_>, raw: &RawDescriptor) -> FailureMode {
    match raw.failure_mode.as_ref().map(|f| (f.value.as_str(), f.pos)) {
        None | Some(("allow", _)) => FailureMode::Allow,
        Some(("deny", _)) => FailureMode::Deny,
        Some(("local", _)) => FailureMode::Local,
        Some((other, pos)) => {
            ctx.error(
                pos,
                format!("invalid failure_mode '{other}' (expected allow, deny or local)"),
            );
            FailureMode::Allow
        }
    }
}

/// `shards`, 1 when absent or out of range (reported).
fn shards(ctx: &mut Ctx<'_>, raw: &RawDescriptor) -> u32 {
    match &raw.shards {
        None => 1,
        Some(n) if (1..=MAX_SHARDS).contains(&n.value) => n.value as u32,
        Some(n) => {
            ctx.error(
                n.pos,
                format!("shards must be between 1 and {MAX_SHARDS}, got {}", n.value),
            );
            1
        }
    }
}

/// Puts `node` into the part of `level` that gives it its matching precedence, unless a
/// sibling already has the same key and value.
fn insert(ctx: &mut Ctx<'_>, level: &mut Level, node: Node) {
    let duplicate = match node.value.as_deref() {
        None => level.key_only.contains_key(&node.key),
        Some(v) if v.contains('*') => level
            .wildcards
            .iter()
            .any(|(_, n)| n.key == node.key && n.value == node.value),
        Some(v) => find_exact(level, &node.key, v).is_some(),
    };
    if duplicate {
        // A node without a position (rules given as data) reports none.
        let pos = (
            node.location.line.unwrap_or(0),
            node.location.col.unwrap_or(0),
        );
        ctx.error(
            pos,
            format!("duplicate descriptor composite key '{}'", node.full_key),
        );
        return;
    }
    match node.value.clone() {
        None => {
            level.key_only.insert(node.key.clone(), node);
        }
        Some(v) if v.contains('*') => level.wildcards.push((Pattern::new(&v), node)),
        Some(v) => {
            level.exact.insert((node.key.clone(), v), node);
        }
    }
}

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod recording_tests;
#[cfg(test)]
mod tests;
