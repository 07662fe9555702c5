//! `sluice simulate`: one traffic pattern through all four algorithms, as a table, JSON or SVG.
//!
//! The calls go through the real [`MemoryStore`](sluice::store::MemoryStore) and algorithm code
//! with a [`ManualClock`](sluice::clock::ManualClock), so what it shows is what the server does.

mod pattern;
mod report;
mod rlqs;
mod runner;
mod svg;
mod times;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use sluice::clock::Nanos;

pub use pattern::TrafficPattern;
pub use report::Scenario;

/// Flags of `sluice simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A built-in traffic pattern.
    #[arg(
        long,
        value_enum,
        required_unless_present_any = ["times", "rlqs"],
        conflicts_with = "times"
    )]
    pub pattern: Option<TrafficPattern>,
    /// A file of arrival times instead of a pattern: one time in seconds per line.
    #[arg(long, value_name = "FILE")]
    pub times: Option<PathBuf>,
    /// Calls allowed per window (N).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,
    /// The window (W), e.g. `10s`, `500ms`, `1m`.
    #[arg(long, default_value = "10s", value_parser = parse_window)]
    pub window: Nanos,
    /// Token bucket capacity (default: the limit). The bucket refills N per W and starts full.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub burst: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = SimulateFormat::Table)]
    pub format: SimulateFormat,
    /// Also draw the timeline as an SVG image into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Simulate Envoy's quota service (RLQS) instead: the RLQS book sharing one limit among many
    /// modelled Envoys.
    #[arg(long, conflicts_with_all = ["pattern", "times", "svg"])]
    pub rlqs: bool,
    /// With `--rlqs`: Envoy streams (default 1,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub streams: Option<u64>,
    /// With `--rlqs`: simulated seconds (default 60).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: Option<u64>,
    /// With `--rlqs`: the shared limit in requests per second (default 10,000; burst: `--burst`, default the same).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// With `--rlqs`: combined demand as a multiple of the limit (default 2).
    #[arg(long)]
    pub load: Option<f64>,
    /// With `--rlqs`: Zipf exponent of the demand across streams (0: all equal; default 1).
    #[arg(long)]
    pub skew: Option<f64>,
    /// With `--rlqs`: fraction of the streams replaced per minute (default 0.1).
    #[arg(long)]
    pub churn: Option<f64>,
}

/// Output formats of `sluice simulate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimulateFormat {
    /// A table for people.
    Table,
    /// One JSON document with every decision.
    Json,
}

fn parse_window(text: &str) -> Result<Nanos, String> {
    sluice::rules::parse_window(text)
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The times file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause (in the message, not a `source`: an error chain would print it twice).
        error: std::io::Error,
    },
    /// The times file or the pattern's size is unusable.
    #[error("{0}")]
    Input(String),
    /// The SVG or the output could not be written.
    #[error("cannot write {what}: {error}")]
    Write {
        /// What was being written.
        what: String,
        /// The cause (in the message, not a `source`).
        error: std::io::Error,
    },
}

/// Runs `sluice simulate`, writing the table or JSON to `out` (and the SVG, if asked).
pub fn run(args: &SimulateArgs, out: &mut impl Write) -> Result<(), SimulateError> {
    if args.rlqs {
        return run_rlqs(args, out);
    }
    // A `requires = "rlqs"` would not do: clap counts a flag's default `false` as present.
    let quota_only = [args.streams, args.seconds, args.rate]
        .iter()
        .any(Option::is_some)
        || [args.load, args.skew, args.churn]
            .iter()
            .any(Option::is_some);
    if quota_only {
        return Err(SimulateError::Input(
            "--streams, --seconds, --rate, --load, --skew and --churn need --rlqs".into(),
        ));
    }
    let (name, arrivals) = match (&args.times, args.pattern) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).map_err(|error| SimulateError::Read {
                path: path.clone(),
                error,
            })?;
            let times = times::parse(&text)
                .map_err(|e| SimulateError::Input(format!("{}: {e}", path.display())))?;
            ("times".to_string(), times)
        }
        (None, Some(p)) => (
            p.name().to_string(),
            p.arrivals(args.limit, args.window)
                .map_err(SimulateError::Input)?,
        ),
        (None, None) => {
            return Err(SimulateError::Input("give --pattern or --times".into()));
        }
    };
    let scenario = Scenario {
        pattern: name,
        limit: args.limit,
        window: args.window,
        burst: args.burst.unwrap_or(args.limit),
    };
    let outcomes = runner::run(&arrivals, scenario.limit, scenario.window, scenario.burst);
    if let Some(path) = &args.svg {
        std::fs::write(path, svg::timeline(&scenario, &outcomes)).map_err(|error| {
            SimulateError::Write {
                what: path.display().to_string(),
                error,
            }
        })?;
    }
    let text = match args.format {
        SimulateFormat::Table => report::table(&scenario, &outcomes),
        SimulateFormat::Json => report::json(&scenario, &outcomes) + "\n",
    };
    out.write_all(text.as_bytes())
        .map_err(|error| SimulateError::Write {
            what: "the output".into(),
            error,
        })
}

/// `sluice simulate --rlqs`.
fn run_rlqs(args: &SimulateArgs, out: &mut impl Write) -> Result<(), SimulateError> {
    let finite = |x: f64, name: &str| {
        if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            Err(SimulateError::Input(format!(
                "--{name} must be a number ≥ 0"
            )))
        }
    };
    let rate = args.rate.unwrap_or(10_000);
    let scenario = sluice::rlqs::Scenario {
        streams: args.streams.unwrap_or(1_000) as usize,
        seconds: args.seconds.unwrap_or(60),
        rate,
        burst: args.burst.unwrap_or(rate),
        load: finite(args.load.unwrap_or(2.0), "load")?,
        skew: finite(args.skew.unwrap_or(1.0), "skew")?,
        churn: finite(args.churn.unwrap_or(0.1), "churn")?,
    };
    let outcome = sluice::rlqs::simulate(&scenario);
    out.write_all(rlqs::table(&scenario, &outcome).as_bytes())
        .map_err(|error| SimulateError::Write {
            what: "the output".into(),
            error,
        })
}
