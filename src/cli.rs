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
use crate::store::{RedisSettings, RedisStore};
use crate::tls::TlsSettings;

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
    Serve(Box<ServeArgs>),
    /// Load and validate rule files; print a summary, or every error as file:line:col: message.
    Check(CheckArgs),
    /// Run a traffic pattern through all four algorithms and show what each admits.
    Simulate(crate::simulate::SimulateArgs),
    /// Load-test an Envoy RLS v3 server (sluice or another): calls/s and latency percentiles.
    Bench(crate::bench::BenchArgs),
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
    /// Seconds to keep serving after health turns NOT_SERVING at shutdown, so load balancers
    /// stop sending calls before the listeners close.
    #[arg(long, env = "SLUICE_SHUTDOWN_DELAY", default_value_t = 0)]
    pub shutdown_delay: u64,
    /// Near-limit threshold as a fraction of the limit, for the near_limit statistic
    /// (upstream NEAR_LIMIT_RATIO).
    #[arg(long, env = "SLUICE_NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = parse_ratio)]
    pub near_limit_ratio: f64,
    /// Most per-rule metric series (runtime values from detailed_metric, value_to_metric and
    /// overrides); past it new series fold into one overflow series.
    #[arg(long, env = "SLUICE_METRICS_MAX_SERIES", default_value_t = 10_000)]
    pub metrics_max_series: usize,
    /// Do not reload rules when their files change.
    #[arg(long, env = "SLUICE_NO_WATCH")]
    pub no_watch: bool,
    /// Log format.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or filter (e.g. `info`, `sluice=debug`); RUST_LOG is used when unset.
    #[arg(long, env = "SLUICE_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// TLS on gRPC.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The embedded store: persistence and its bound.
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// The Redis store (`--store redis`).
    #[command(flatten)]
    pub redis: RedisArgs,
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
    /// Redis (standalone or Cluster): one authority for many replicas.
    Redis,
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
            expected_replicas: args.redis.expected_replicas,
        },
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        shutdown_delay: Duration::from_secs(args.shutdown_delay),
        near_limit_ratio: args.near_limit_ratio,
        max_metric_series: args.metrics_max_series,
        watch_rules: !args.no_watch,
        tls: args.tls.settings(),
        persist: args.memory.persist_settings(),
        max_counters: usize::try_from(args.memory.max_counters).unwrap_or(usize::MAX),
    };
    // Install the signal handlers before announcing readiness: a SIGTERM sent right after the
    // ready line must start a graceful shutdown, not kill the process.
    let signals = shutdown_signals()?;
    let running = match args.store {
        StoreArg::Memory => app::start(settings, Arc::new(SystemClock)).await?,
        StoreArg::Redis => {
            let store = RedisStore::connect(args.redis.settings()?).await?;
            app::start_with_store(settings, Arc::new(SystemClock), Arc::new(store)).await?
        }
    };
    println!(
        "sluice ready grpc={} http={}",
        running.grpc_addr, running.http_addr
    );
    let token = running.shutdown.clone();
    tokio::spawn(async move {
        signals.await;
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

/// TLS flags of `sluice serve` (certificates are reloaded when the files change).
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// PEM certificate chain for gRPC TLS (requires --tls-key).
    #[arg(long, env = "SLUICE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "SLUICE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: require client certificates signed by them (mTLS; requires --tls-cert).
    #[arg(long, env = "SLUICE_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The TLS settings, or `None` for plaintext (clap makes cert and key come together).
    pub fn settings(&self) -> Option<TlsSettings> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            }),
            _ => None,
        }
    }
}

/// Flags of the embedded (memory) store.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// Where the memory store persists its counters (journal and snapshots; created if missing).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// Do not persist counters: a restart forgets them.
    #[arg(long, env = "SLUICE_NO_PERSIST")]
    pub no_persist: bool,
    /// How often changed counters are written to the journal (group commit), e.g. `50ms`,
    /// `1s`; a SIGKILL loses at most this much.
    #[arg(long, env = "SLUICE_PERSIST_INTERVAL", default_value = "50ms", value_parser = parse_interval)]
    pub persist_interval: Duration,
    /// Sync every journal write to disk (fsync), so even power loss loses at most one interval.
    #[arg(long, env = "SLUICE_PERSIST_SYNC")]
    pub persist_sync: bool,
    /// Most counters held; past it, a call that needs a new counter is refused (OVER_LIMIT)
    /// until idle counters are reclaimed.
    #[arg(long, env = "SLUICE_MAX_COUNTERS", default_value_t = crate::store::memory::DEFAULT_MAX_COUNTERS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_counters: u64,
}

impl MemoryArgs {
    /// The persistence settings, or `None` with `--no-persist`.
    pub fn persist_settings(&self) -> Option<crate::store::PersistSettings> {
        (!self.no_persist).then(|| crate::store::PersistSettings {
            interval: self.persist_interval,
            sync: self.persist_sync,
            ..crate::store::PersistSettings::new(&self.data_dir)
        })
    }
}

/// Parses `50ms`, `2s` or a bare number of milliseconds; 1 ms ..= 1 min.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let (digits, scale) = match text.strip_suffix("ms") {
        Some(ms) => (ms, 1),
        None => text.strip_suffix('s').map_or((text, 1), |s| (s, 1_000)),
    };
    match digits.trim().parse::<u64>() {
        Ok(n) if (1..=60_000).contains(&n.saturating_mul(scale)) => {
            Ok(Duration::from_millis(n * scale))
        }
        _ => Err(format!(
            "'{text}' is not an interval between 1ms and 60s (e.g. 50ms, 1s)"
        )),
    }
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("'{text}' is not a number between 0 and 1")),
    }
}

/// A future that completes on SIGTERM or SIGINT; the handlers are installed when this returns.
fn shutdown_signals() -> anyhow::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
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

/// Redis flags of `sluice serve` (used with `--store redis`).
#[derive(Debug, Args)]
pub struct RedisArgs {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss:// for TLS, or
    /// redis+cluster://host:port,host:port (rediss+cluster:// for TLS) for Redis Cluster.
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        required_if_eq("store", "redis"),
        hide_env_values = true
    )]
    pub redis_url: Option<String>,
    /// PEM CA certificates to trust for rediss:// (default: the system's roots).
    #[arg(long, env = "SLUICE_REDIS_CA")]
    pub redis_ca: Option<PathBuf>,
    /// Prefix of every Redis key (no braces).
    #[arg(long, env = "SLUICE_REDIS_KEY_PREFIX", default_value = "sluice:")]
    pub redis_key_prefix: String,
    /// Longest wait for Redis on a call (e.g. 10ms, 1s); then the rule's failure_mode decides.
    #[arg(long, env = "SLUICE_REDIS_TIMEOUT", default_value = "10ms", value_parser = parse_duration)]
    pub redis_timeout: Duration,
    /// Multiplexed connections to a standalone Redis (calls are pipelined on each).
    #[arg(long, env = "SLUICE_REDIS_CONNECTIONS", default_value_t = 2)]
    pub redis_connections: usize,
    /// Most over-limit counters answered locally without a Redis round trip (0 disables).
    #[arg(long, env = "SLUICE_LOCAL_CACHE_SIZE", default_value_t = 100_000)]
    pub local_cache_size: usize,
    /// Replicas sharing the store: while it is unreachable a `failure_mode: local` rule
    /// allows its limit divided by this number in each replica.
    #[arg(long, env = "SLUICE_EXPECTED_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub expected_replicas: u64,
}

impl RedisArgs {
    /// The Redis store settings (the URL is required with `--store redis`).
    pub fn settings(&self) -> anyhow::Result<RedisSettings> {
        let url = self
            .redis_url
            .clone()
            .context("--store redis needs --redis-url (or SLUICE_REDIS_URL)")?;
        Ok(RedisSettings {
            key_prefix: self.redis_key_prefix.clone(),
            ca: self.redis_ca.clone(),
            timeout: self.redis_timeout,
            connections: self.redis_connections.max(1),
            local_cache_size: self.local_cache_size,
            ..RedisSettings::new(url)
        })
    }
}

/// A duration such as `10ms`, `250us`, `2s`, or a bare number of milliseconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let amount: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (e.g. 10ms, 1s)"))?;
    match unit {
        "" | "ms" => Ok(Duration::from_millis(amount)),
        "us" => Ok(Duration::from_micros(amount)),
        "s" => Ok(Duration::from_secs(amount)),
        _ => Err(format!("'{text}': unknown unit '{unit}' (use us, ms or s)")),
    }
}
