//! `sluice bench`: a load generator for any Envoy RLS v3 server (sluice or another).
//!
//! It reports calls, OK, OVER_LIMIT, errors, calls/s and latency percentiles (hdrhistogram),
//! closed loop by default or open loop at a fixed rate, the machine's load average before and
//! after the run, and the other work on the machine meanwhile (`machine.rs`). Calls go over raw
//! HTTP/2 (`wire.rs`), so one core of load generator out-drives one core of server.
//! `examples/baseline.rs` is the do-nothing server on the same tonic stack that measures the
//! transport's ceiling.

mod count_cpu;
mod driver;
mod load;
mod machine;
mod report;
#[cfg(test)]
mod tests;
mod wire;

use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};

pub use driver::{Drive, Stop, drive};
pub use load::{DescriptorEntries, Load, parse_descriptor};
pub use report::Report;
pub use wire::Connection;

/// Flags of `sluice bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The server's gRPC address, `HOST:PORT`.
    #[arg(long, required_unless_present_any = ["count_cpu", "cpu_ticks"], default_value = "")]
    pub target: String,
    /// The rate-limit domain of every call.
    #[arg(long, required_unless_present_any = ["count_cpu", "cpu_ticks"], default_value = "")]
    pub domain: String,
    /// A descriptor, `key=value[,key=value...]` (repeatable: several descriptors per call).
    #[arg(
        long = "descriptor",
        required_unless_present_any = ["count_cpu", "cpu_ticks"],
        value_parser = parse_descriptor
    )]
    pub descriptors: Vec<DescriptorEntries>,
    /// Spread calls over K counters: appends 0..K-1 to the last value of each descriptor.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Option<u64>,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub concurrency: u64,
    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// How long to run, e.g. `10s`, `1m30s` (the default when --calls is not given).
    #[arg(long, value_parser = parse_duration, conflicts_with = "calls")]
    pub duration: Option<Duration>,
    /// Stop after N calls instead of after a duration.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub calls: Option<u64>,
    /// Open loop at R calls per second (latency from each call's intended send time);
    /// without it, closed loop.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = BenchFormat::Table)]
    pub format: BenchFormat,
    /// A process whose CPU time is the benchmark's own, not other work: the server under test
    /// on this machine, and its Redis (repeatable; Linux).
    #[arg(long = "server-pid", value_name = "PID")]
    pub server_pids: Vec<u32>,
    /// Instead of a benchmark: run the command after `--` and write to OUT.json what the
    /// machine did meanwhile (`wall_s`, `busy_ticks`, `steal_ticks`, `load_ticks`: the
    /// figures the benchmark scripts record; Linux). Exits with the command's status.
    #[arg(
        long = "count-cpu",
        value_name = "OUT.json",
        conflicts_with = "cpu_ticks"
    )]
    pub count_cpu: Option<std::path::PathBuf>,
    /// Instead of a benchmark: print the user plus system clock ticks PID has used (Linux).
    #[arg(long = "cpu-ticks", value_name = "PID")]
    pub cpu_ticks: Option<u32>,
    /// The command `--count-cpu` runs.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Output formats of `sluice bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchFormat {
    /// A few lines for people.
    Table,
    /// One JSON object.
    Json,
}

/// How long a run lasts when neither --duration nor --calls is given.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);

fn parse_duration(text: &str) -> Result<Duration, sluice::clock::duration::DurationError> {
    sluice::clock::duration::parse_in(
        text,
        Duration::from_millis(1)..=sluice::clock::duration::MAX,
    )
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && (0.001..=100_000_000.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "'{text}' is not a rate in calls per second (0.001 to 1e8)"
        )),
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The target is not a usable address.
    #[error("invalid --target '{target}': {reason}")]
    Target {
        /// As given.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// A `--server-pid` names no process this user can read.
    #[error("--server-pid {0}: no such process (or /proc/{0}/stat cannot be read)")]
    ServerPid(u32),
    /// `--cpu-ticks` names no process this user can read.
    #[error("--cpu-ticks {0}: no such process (or /proc/{0}/stat cannot be read)")]
    CpuTicksPid(u32),
    /// A connection could not be opened.
    #[error("cannot connect to {target}: {reason}")]
    Connect {
        /// As given.
        target: String,
        /// The transport's error.
        reason: String,
    },
    /// The runtime could not start, or the output could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Opens `count` HTTP/2 connections to `target` (`HOST:PORT`, or `http://HOST:PORT`).
pub async fn connect(target: &str, count: u64) -> Result<Vec<Connection>, BenchError> {
    let addr = target.strip_prefix("http://").unwrap_or(target);
    if addr.contains('/') || !addr.contains(':') {
        return Err(BenchError::Target {
            target: target.into(),
            reason: "expected HOST:PORT".into(),
        });
    }
    let mut connections = Vec::new();
    for _ in 0..count {
        let connection = wire::open(addr)
            .await
            .map_err(|reason| BenchError::Connect {
                target: target.into(),
                reason,
            })?;
        connections.push(connection);
    }
    Ok(connections)
}

/// Connects, runs the load described by `args`, and returns the figures.
pub async fn execute(args: &BenchArgs) -> Result<Report, BenchError> {
    if let Some(&pid) = args
        .server_pids
        .iter()
        .find(|&&pid| machine::read_process(pid).is_none())
    {
        return Err(BenchError::ServerPid(pid));
    }
    // More connections than calls in flight would leave some idle.
    let connections = connect(&args.target, args.connections.min(args.concurrency)).await?;
    let load = Load::new(&args.domain, &args.descriptors, args.keys);
    let stop = match (args.calls, args.duration) {
        (Some(n), _) => Stop::Calls(n),
        (None, Some(d)) => Stop::After(d),
        (None, None) => Stop::After(DEFAULT_DURATION),
    };
    let plan = Drive {
        concurrency: usize::try_from(args.concurrency).unwrap_or(usize::MAX),
        stop,
        rate: args.rate,
        watched: args.server_pids.clone(),
    };
    Ok(drive(connections, load, plan).await)
}

/// Runs `sluice bench` on its own runtime and writes the figures to `out`.
pub fn run(args: &BenchArgs, out: &mut impl Write) -> Result<(), BenchError> {
    if let Some(pid) = args.cpu_ticks {
        writeln!(out, "{}", count_cpu::cpu_ticks(pid)?)?;
        return Ok(());
    }
    if args.count_cpu.is_none() && !args.command.is_empty() {
        return Err(
            std::io::Error::other("a command after `--` needs --count-cpu OUT.json").into(),
        );
    }
    if let Some(path) = &args.count_cpu {
        let code = count_cpu::count(path, &args.command)?;
        out.flush()?;
        // The command's status is the mode's own, as a wrapper's would be.
        std::process::exit(code);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(execute(args))?;
    let mode = match args.rate {
        Some(r) => format!("open loop at {r} calls/s"),
        None => "closed loop".into(),
    };
    match args.format {
        BenchFormat::Json => writeln!(out, "{}", report.json())?,
        BenchFormat::Table => write!(
            out,
            "target {}  domain {}  {mode}, concurrency {} over {} connections\n{}",
            args.target,
            args.domain,
            args.concurrency,
            args.connections.min(args.concurrency),
            report.text()
        )?,
    }
    if let Some(e) = &report.first_error {
        eprintln!("first error: {e}");
    }
    Ok(())
}
