//! Command-line interface: subcommands, flags (each also read from `SLUICE_<FLAG>`), and runners.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::algorithm::Algorithm;
use crate::app::{self, Settings};
use crate::clock::SystemClock;
use crate::limiter::LimiterOptions;
use crate::rules::{self, LoadOptions};

/// sluice: an Envoy-compatible external rate-limit server.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the rate-limit server.
    Serve(ServeArgs),
    /// Load and validate rule files; print a summary, or every error as file:line:col: message.
    Check(CheckArgs),
}

/// How rule files are read (shared by `serve` and `check`).
#[derive(Debug, Args)]
pub struct RuleArgs {
    /// A rule file or a directory of *.yaml / *.yml files (repeatable).
    #[arg(
        long,
        env = "SLUICE_CONFIG",
        default_value = "config",
        value_delimiter = ','
    )]
    pub config: Vec<PathBuf>,
    /// The algorithm of rules that do not name one.
    #[arg(long, env = "SLUICE_DEFAULT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::SlidingWindow)]
    pub default_algorithm: AlgorithmArg,
    /// Allow one domain to be spread over several files (upstream MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "SLUICE_MERGE_DOMAINS")]
    pub merge_domains: bool,
}

impl RuleArgs {
    fn load_options(&self) -> LoadOptions {
        LoadOptions {
            default_algorithm: self.default_algorithm.into(),
            merge_domains: self.merge_domains,
        }
    }
}

/// Flags of `sluice serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Rule loading.
    #[command(flatten)]
    pub rules: RuleArgs,
    /// gRPC listen address (port 0 picks a free port).
    #[arg(long, env = "SLUICE_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (port 0 picks a free port).
    #[arg(long, env = "SLUICE_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Where counters live.
    #[arg(long, env = "SLUICE_STORE", value_enum, default_value_t = StoreArg::Memory)]
    pub store: StoreArg,
    /// Global shadow mode: the overall answer is always OK; statuses still report OVER_LIMIT.
    #[arg(long, env = "SLUICE_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Longest wait for in-flight calls at shutdown, in seconds.
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value_t = 10)]
    pub shutdown_grace: u64,
    /// Log format.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or filter (e.g. `info`, `sluice=debug`); RUST_LOG is used when unset.
    #[arg(long, env = "SLUICE_LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// Flags of `sluice check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Rule loading.
    #[command(flatten)]
    pub rules: RuleArgs,
}

/// Counting algorithms, as named in rule files.
#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum AlgorithmArg {
    /// Epoch-aligned fixed windows (upstream's algorithm).
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

/// Counter stores.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StoreArg {
    /// The embedded in-process store.
    Memory,
}

/// Log line formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
}

/// Runs `sluice serve` until SIGTERM/SIGINT.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = Settings {
        config: args.rules.config.clone(),
        grpc_addr: args.grpc_addr,
        http_addr: args.http_addr,
        load: args.rules.load_options(),
        limiter: LimiterOptions {
            global_shadow_mode: args.shadow_mode,
            default_algorithm: args.rules.default_algorithm.into(),
        },
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
    };
    let running = app::start(settings, Arc::new(SystemClock)).await?;
    // Handlers first: a signal that arrives right after the ready line must not kill the
    // process with the default action.
    let signal = shutdown_signal().context("cannot install signal handlers")?;
    println!(
        "sluice ready grpc={} http={}",
        running.grpc_addr, running.http_addr
    );
    let token = running.shutdown.clone();
    tokio::spawn(async move {
        signal.await;
        tracing::info!("shutdown requested");
        token.cancel();
    });
    running.wait().await.context("server stopped with an error")
}

/// Runs `sluice check`: the summary on success, every error on failure (exit code 1).
pub fn check(args: &CheckArgs) -> anyhow::Result<bool> {
    match rules::load(&args.rules.config, &args.rules.load_options()) {
        Ok(set) => {
            for warning in &set.warnings {
                eprintln!("warning: {warning}");
            }
            println!("ok: {}", set.summary());
            Ok(true)
        }
        Err(errors) => {
            eprintln!("{errors}");
            Ok(false)
        }
    }
}

/// Registers the SIGTERM and SIGINT handlers now and returns a future that resolves on the
/// first of them.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
