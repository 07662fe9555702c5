//! `sluice explain`: offline, on rule files — which node each descriptor reaches, level by
//! level, which limit applies and why (or why none does), and where envoyproxy/ratelimit would
//! decide differently. The same explanation as `/ui`, on a fresh counter store.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use sluice::clock::{Clock, MILLI, SystemClock};
use sluice::limiter::{Explained, Explanation, Peek, explain_with, parse_descriptor};
use sluice::rules::bucket::{BucketWalk, parse_bucket, walk_bucket};
use sluice::store::MemoryStore;

use super::RuleArgs;

/// Flags of `sluice explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Rule loading.
    #[command(flatten)]
    pub rules: RuleArgs,
    /// The domain of the call.
    #[arg(long)]
    pub domain: String,
    /// A descriptor, `key=value[,key=value]` outermost first (repeatable: the descriptors of
    /// one call, which matters for `replaces`).
    #[arg(
        long = "descriptor",
        required_unless_present = "buckets",
        value_parser = descriptor
    )]
    pub descriptors: Vec<DescriptorArg>,
    /// An RLQS bucket id, `key=value[,key=value]` in any order (repeatable): the
    /// rule its entries reach, walked in the order the rules decide, and the bucket action.
    #[arg(long = "bucket", value_parser = bucket)]
    pub buckets: Vec<BucketArg>,
}

/// One `--bucket`: its entries, a map.
#[derive(Debug, Clone)]
pub struct BucketArg(pub BTreeMap<String, String>);

fn bucket(text: &str) -> Result<BucketArg, String> {
    parse_bucket(text).map(BucketArg)
}

/// One `--descriptor`: its entries.
#[derive(Debug, Clone)]
pub struct DescriptorArg(pub Vec<(String, String)>);

fn descriptor(text: &str) -> Result<DescriptorArg, String> {
    parse_descriptor(text).map(DescriptorArg)
}

/// Loads the rules and prints the explanation.
pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let rules = sluice::rules::load(&args.rules.config, &args.rules.load_options())
        .map_err(|errors| anyhow::anyhow!("rules did not load:\n{errors}"))?;
    let store = Arc::new(MemoryStore::with_shards(1));
    let now = SystemClock.now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("cannot start a runtime")?;
    writeln!(out, "domain {}", args.domain)?;
    for (i, bucket) in args.buckets.iter().enumerate() {
        let walk = walk_bucket(&rules, &args.domain, &bucket.0);
        print_bucket(i, &bucket.0, &walk, out).context("cannot write the explanation")?;
    }
    if args.descriptors.is_empty() {
        return Ok(());
    }
    let descriptors: Vec<Vec<(String, String)>> =
        args.descriptors.iter().map(|d| d.0.clone()).collect();
    let explanation = runtime.block_on(explain_with(
        store.as_ref(),
        &rules,
        &args.domain,
        &descriptors,
        Peek { now, regions: None },
        false,
    ));
    print(&explanation, out).context("cannot write the explanation")
}

fn print(e: &Explanation<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    for (i, d) in e.descriptors.iter().enumerate() {
        print_descriptor(i, d, out)?;
    }
    let verdict = if e.would_refuse {
        "OVER_LIMIT"
    } else {
        "OK (fresh counters)"
    };
    writeln!(out, "\na first call: {verdict}")?;
    writeln!(
        out,
        "(offline: counters start empty; /ui on a running server shows the live counters)"
    )
}

fn print_descriptor(i: usize, d: &Explained<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    let entries: Vec<String> = d.entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(out, "\ndescriptor {}: {}", i + 1, entries.join(", "))?;
    for (level, step) in d.walk.steps.iter().enumerate() {
        let reached = match step.node {
            Some((node, how)) => format!("{} ({})", node.full_key, how_name(how)),
            None if step.configured_values.is_empty() => format!(
                "no rule has the key here (keys: {})",
                step.configured_keys.join(", ")
            ),
            None => format!(
                "no match (values here: {})",
                step.configured_values.join(", ")
            ),
        };
        writeln!(
            out,
            "  level {}: {}={} -> {reached}",
            level + 1,
            step.key,
            step.value
        )?;
    }
    writeln!(out, "  {}", d.walk.reached.describe(&d.walk.steps))?;
    if let Some(node) = d.walk.node() {
        writeln!(out, "  rule {} at {}", node.full_key, node.location)?;
    }
    for limit in &d.limits {
        let name = limit
            .rule
            .name
            .as_deref()
            .map(|n| format!("{n}: "))
            .unwrap_or_default();
        let state = if !limit.replaced_by.is_empty() {
            format!("replaced by {}: not counted", limit.replaced_by.join(", "))
        } else if let Some(c) = limit.counter {
            let ms = c.reset_after.div_ceil(MILLI);
            match (c.admits, c.remaining < c.capacity) {
                (true, true) => format!("{} of {} left, full in {ms} ms", c.remaining, c.capacity),
                (true, false) => format!("{} of {} left", c.remaining, c.capacity),
                (false, _) => format!("exhausted: a call is admitted again in {ms} ms"),
            }
        } else {
            "not counted".to_owned()
        };
        writeln!(out, "  limit {name}{} -> {state}", limit.rule.describe())?;
        if limit.rule.scope == sluice::rules::Scope::Global {
            writeln!(
                out,
                "    scope: global: each region enforces its portion of this limit (claimed \
                 from the global store); offline the whole limit is shown, /ui on a running \
                 server shows the region's portion"
            )?;
        }
    }
    if !d.compat_differences.is_empty() {
        writeln!(out, "  where envoyproxy/ratelimit would differ:")?;
        for note in &d.compat_differences {
            writeln!(out, "    - {note}")?;
        }
    }
    Ok(())
}

fn print_bucket(
    i: usize,
    bucket: &BTreeMap<String, String>,
    walk: &BucketWalk<'_>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let entries: Vec<String> = bucket.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(out, "\nbucket {}: {}", i + 1, entries.join(", "))?;
    for trial in &walk.trials {
        writeln!(
            out,
            "  {:indent$}level {}: {}={} -> {} ({}): {}",
            "",
            trial.depth + 1,
            trial.key,
            trial.value,
            trial.node.full_key,
            how_name(trial.kind),
            trial.outcome.describe(),
            indent = trial.depth * 2
        )?;
    }
    writeln!(out, "  {}", walk.describe())?;
    if let Ok(found) = &walk.found {
        let node = found.node();
        writeln!(out, "  rule {} at {}", node.full_key, node.location)?;
    }
    writeln!(out, "  bucket action: {}", walk.action().describe())
}

fn how_name(how: sluice::rules::MatchKind) -> &'static str {
    match how {
        sluice::rules::MatchKind::Exact => "exact value",
        sluice::rules::MatchKind::Wildcard => "wildcard",
        sluice::rules::MatchKind::KeyOnly => "key-only",
    }
}
