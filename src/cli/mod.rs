//! The command line (the binary's own, not the library's): subcommands and flags, each flag also
//! read from `SLUICE_<FLAG>`. It only parses: `serve` turns its flags into [`Settings`] and hands
//! them to [`sluice::app`], which builds everything.
//!
//! [`Settings`]: sluice::app::Settings

pub mod admin;
pub mod check;
pub mod compat;
pub mod counters;
pub mod explain;
pub mod listeners;
pub mod prepare;
pub mod redis;
#[cfg(test)]
mod reference_docs_tests;
pub mod region;
pub mod response;
pub mod rlqs;
pub mod serve;
pub mod statsd;
pub mod trace;
pub mod xds;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use sluice::algorithm::Algorithm;
use sluice::app::defaults;
use sluice::rules::LoadOptions;

/// What `--version` prints after the name: the version, the commit and the cargo profile built
/// (set by build.rs; the commit is "unknown" when built outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SLUICE_COMMIT"),
    ", ",
    env!("SLUICE_PROFILE"),
    ")"
);

/// sluice: an Envoy-compatible external rate-limit server.
#[derive(Debug, Parser)]
#[command(name = "sluice", version = VERSION, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the rate-limit server.
    Serve(Box<serve::ServeArgs>),
    /// Load and validate rule files; print a summary, or every error as file:line:col: message.
    Check(check::CheckArgs),
    /// Explain a call offline: the path of each descriptor through the rules, the limit that
    /// applies or why none does, and where envoyproxy/ratelimit would decide differently.
    Explain(explain::ExplainArgs),
    /// Run a traffic pattern through all four algorithms and show what each admits.
    Simulate(crate::simulate::SimulateArgs),
    /// Load-test an Envoy RLS v3 server (sluice or another): calls/s and latency percentiles.
    Bench(crate::bench::BenchArgs),
    /// Inspect or reset a descriptor's counters on a running server's admin listener
    /// (`--admin-addr`).
    Counters(counters::CountersArgs),
    /// Print envoyproxy/ratelimit's environment variables and what the `ratelimit`
    /// personality does with each (a Markdown table).
    UpstreamEnv,
}

/// The name under which the binary is envoyproxy/ratelimit (the image's `/bin/ratelimit`).
pub const PERSONALITY: &str = "ratelimit";

/// What the command line asks for.
pub struct Invocation {
    /// The subcommand and its flags.
    pub command: Command,
    /// The parsed `serve` flags, which tell an explicit flag from a default.
    pub serve_matches: Option<ArgMatches>,
}

/// Parses `argv`. Started as `ratelimit`, the binary is `sluice serve --upstream-env` (its
/// arguments, if any, are `serve` flags); otherwise it is `sluice`. Exits with clap's message on
/// a bad command line.
pub fn parse(argv: impl IntoIterator<Item = OsString>) -> Invocation {
    let argv: Vec<OsString> = argv.into_iter().collect();
    let name = argv.first().map(Path::new).and_then(Path::file_name);
    if name.is_some_and(|n| n == PERSONALITY) {
        let command = serve::ServeArgs::augment_args(
            clap::Command::new(PERSONALITY)
                .version(VERSION)
                .about("sluice as envoyproxy/ratelimit: configured by its environment variables"),
        );
        let matches = command.get_matches_from(argv);
        let mut args = serve::ServeArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        args.serving.upstream_env = true;
        return Invocation {
            command: Command::Serve(Box::new(args)),
            serve_matches: Some(matches),
        };
    }
    let matches = Cli::command().get_matches_from(argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    Invocation {
        command: cli.command,
        serve_matches: matches.subcommand_matches("serve").cloned(),
    }
}

/// How rule files are read (shared by `serve` and `check`).
#[derive(Debug, Args)]
pub struct RuleArgs {
    /// A rule file or a directory of *.yaml / *.yml files (repeatable).
    #[arg(
        long,
        env = "SLUICE_CONFIG",
        default_value = defaults::CONFIG,
        value_delimiter = ','
    )]
    pub config: Vec<PathBuf>,
    /// The algorithm of rules that do not name one.
    #[arg(long, env = "SLUICE_DEFAULT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::from(sluice::rules::DEFAULT_ALGORITHM))]
    pub default_algorithm: AlgorithmArg,
    /// Allow one domain to be spread over several files (envoyproxy/ratelimit MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "SLUICE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// The global store regions share, as --redis-url (rediss://, redis+cluster://,
    /// redis+sentinel://): limits may say `scope: global` (one limit across every region).
    /// `sluice serve` needs --region with it; `check` and `explain` only accept such limits.
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_URL", hide_env_values = true)]
    pub global_redis_url: Option<String>,
    /// Limits that do not set record_over_limit record every charge, even past the limit
    /// (token budgets; rules from xDS, e.g. Envoy AI Gateway's, carry no such field).
    #[arg(long, env = "SLUICE_RECORD_OVER_LIMIT")]
    pub record_over_limit: bool,
    /// Count as envoyproxy/ratelimit: set by the drop-in personality, no flag of its own.
    #[arg(skip)]
    pub compat_recording: bool,
}

impl RuleArgs {
    /// How the rules are compiled.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            default_algorithm: self.default_algorithm.into(),
            merge_domains: self.merge_domains,
            global_scope: self.global_redis_url.is_some(),
            record_over_limit: self.record_over_limit,
            compat_recording: self.compat_recording,
        }
    }
}

/// Counting algorithms, as named in rule files.
#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum AlgorithmArg {
    /// Epoch-aligned fixed windows (envoyproxy/ratelimit's algorithm).
    FixedWindow,
    /// Two-bucket weighted sliding window.
    SlidingWindow,
    /// Exact sliding log.
    SlidingLog,
    /// Token bucket.
    TokenBucket,
}

impl From<AlgorithmArg> for Algorithm {
    fn from(a: AlgorithmArg) -> Self {
        match a {
            AlgorithmArg::FixedWindow => Algorithm::FixedWindow,
            AlgorithmArg::SlidingWindow => Algorithm::SlidingWindow,
            AlgorithmArg::SlidingLog => Algorithm::SlidingLog,
            AlgorithmArg::TokenBucket => Algorithm::TokenBucket,
        }
    }
}

impl From<Algorithm> for AlgorithmArg {
    fn from(a: Algorithm) -> Self {
        match a {
            Algorithm::FixedWindow => AlgorithmArg::FixedWindow,
            Algorithm::SlidingWindow => AlgorithmArg::SlidingWindow,
            Algorithm::SlidingLog => AlgorithmArg::SlidingLog,
            Algorithm::TokenBucket => AlgorithmArg::TokenBucket,
        }
    }
}

/// Log line formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
    /// One JSON object per line with envoyproxy/ratelimit's keys: `@timestamp`, `level`,
    /// `@message` (its LOG_FORMAT=json).
    UpstreamJson,
}

/// A fraction from 0 to 1 (`--near-limit-ratio`, `--trace-sampling-ratio`).
pub fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("'{text}' is not a number between 0 and 1")),
    }
}
