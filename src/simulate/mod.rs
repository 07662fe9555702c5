//! `sluice simulate`: one traffic pattern through all four algorithms, as a table, JSON or SVG.
//!
//! The calls go through the real [`MemoryStore`](sluice::store::MemoryStore) and algorithm code
//! with a [`ManualClock`](sluice::clock::ManualClock), so what it shows is what the server does.

mod pattern;
mod report;
mod runner;
mod svg;
mod times;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use sluice::clock::Nanos;

pub use pattern::Pattern;
pub use report::Scenario;

/// Flags of `sluice simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A built-in traffic pattern.
    #[arg(
        long,
        value_enum,
        required_unless_present = "times",
        conflicts_with = "times"
    )]
    pub pattern: Option<Pattern>,
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
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also draw the timeline as an SVG image into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Output formats of `sluice simulate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
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
        Format::Table => report::table(&scenario, &outcomes),
        Format::Json => report::json(&scenario, &outcomes) + "\n",
    };
    out.write_all(text.as_bytes())
        .map_err(|error| SimulateError::Write {
            what: "the output".into(),
            error,
        })
}
