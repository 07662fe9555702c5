//! `sluice serve`: its flags, parsed into [`Settings`], and the run until SIGTERM/SIGINT.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use sluice::app::{self, MemorySettings, Settings, StoreSettings, TlsSettings, defaults};
use sluice::clock::SystemClock;
use sluice::clock::duration::{self, DurationError, GoDuration};
use sluice::limiter::LimiterOptions;
use sluice::store::PersistSettings;

use super::admin::AdminArgs;
use super::listeners::ServingArgs;
use super::redis::RedisArgs;
use super::region::RegionArgs;
use super::response::ResponseArgs;
use super::rlqs::RlqsArgs;
use super::statsd::StatsdArgs;
use super::trace::TraceArgs;
use super::xds::XdsArgs;
use super::{LogFormat, RuleArgs};

/// Flags of `sluice serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Rule loading.
    #[command(flatten)]
    pub rules: RuleArgs,
    /// Rules from an xDS control plane instead.
    #[command(flatten)]
    pub xds: XdsArgs,
    /// RLQS caps.
    #[command(flatten)]
    pub rlqs: RlqsArgs,
    /// gRPC listen address (port 0 picks a free port).
    #[arg(long, env = "SLUICE_GRPC_ADDR", default_value_t = defaults::GRPC_ADDR)]
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (port 0 picks a free port).
    #[arg(long, env = "SLUICE_HTTP_ADDR", default_value_t = defaults::HTTP_ADDR)]
    pub http_addr: SocketAddr,
    /// Where counters live.
    #[arg(long, env = "SLUICE_STORE", value_enum, default_value_t = StoreArg::Memory)]
    pub store: StoreArg,
    /// Global shadow mode: the overall answer is always OK; statuses still report OVER_LIMIT.
    #[arg(long, env = "SLUICE_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Longest wait for in-flight calls at shutdown (e.g. 10s, 1m30s).
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value_t = GoDuration(defaults::SHUTDOWN_GRACE))]
    pub shutdown_grace: GoDuration,
    /// How long to keep serving after health turns NOT_SERVING at shutdown (e.g. 5s), so load
    /// balancers stop sending calls before the listeners close.
    #[arg(long, env = "SLUICE_SHUTDOWN_DELAY", default_value_t = GoDuration(defaults::SHUTDOWN_DELAY))]
    pub shutdown_delay: GoDuration,
    /// Near-limit threshold as a fraction of the limit, for the near_limit statistic
    /// (envoyproxy/ratelimit NEAR_LIMIT_RATIO).
    #[arg(long, env = "SLUICE_NEAR_LIMIT_RATIO", default_value_t = defaults::NEAR_LIMIT_RATIO, value_parser = super::parse_ratio)]
    pub near_limit_ratio: f64,
    /// Most per-rule metric series (runtime values from detailed_metric, value_to_metric and
    /// overrides); past it new series fold into one overflow series.
    #[arg(long, env = "SLUICE_METRICS_MAX_SERIES", default_value_t = defaults::METRICS_MAX_SERIES)]
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
    /// Listeners and health beyond the two addresses; the personality switch.
    #[command(flatten)]
    pub serving: ServingArgs,
    /// Headers, dynamic metadata, quota mode and reset precision of the answers.
    #[command(flatten)]
    pub response: ResponseArgs,
    /// TLS on gRPC.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The embedded store: persistence and its bound.
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// The Redis store (`--store redis`).
    #[command(flatten)]
    pub redis: RedisArgs,
    /// This deployment's region and the global store (`--global-redis-url`).
    #[command(flatten)]
    pub region: RegionArgs,
    /// OpenTelemetry tracing.
    #[command(flatten)]
    pub trace: TraceArgs,
    /// The admin listener.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// The statsd sink.
    #[command(flatten)]
    pub statsd: StatsdArgs,
}

/// Counter stores.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StoreArg {
    /// The embedded in-process store.
    Memory,
    /// Redis (standalone or Cluster): one authority for many replicas.
    Redis,
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
    /// With --tls-client-ca: the client certificate must also be valid for this DNS name or IP
    /// address (a subject alternative name), as envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN.
    #[arg(long, env = "SLUICE_TLS_CLIENT_SAN", requires = "tls_client_ca")]
    pub tls_client_san: Option<String>,
}

/// Flags of the embedded (memory) store.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// Where the memory store persists its counters (journal and snapshots; created if missing).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = defaults::DATA_DIR)]
    pub data_dir: PathBuf,
    /// Do not persist counters: a restart forgets them.
    #[arg(long, env = "SLUICE_NO_PERSIST")]
    pub no_persist: bool,
    /// How often changed counters are written to the journal (group commit), 1ms to 1m, e.g.
    /// `50ms`, `1s`; a SIGKILL loses at most this much.
    #[arg(long, env = "SLUICE_PERSIST_INTERVAL", default_value_t = GoDuration(defaults::PERSIST_INTERVAL), value_parser = parse_persist_interval)]
    pub persist_interval: GoDuration,
    /// Sync every journal write to disk (fsync), so even power loss loses at most one interval.
    #[arg(long, env = "SLUICE_PERSIST_SYNC")]
    pub persist_sync: bool,
    /// Refuse to start when the data directory's fingerprint key is damaged, instead of setting
    /// it aside with the data files it names (whose counts are then lost) and making a new one.
    #[arg(long, env = "SLUICE_STRICT_DATA_DIR")]
    pub strict_data_dir: bool,
    /// Most counters held; past it, a call that needs a new counter is refused (OVER_LIMIT)
    /// until idle counters are reclaimed.
    #[arg(long, env = "SLUICE_MAX_COUNTERS", default_value_t = defaults::MAX_COUNTERS, value_parser = parse_max_counters)]
    pub max_counters: usize,
}

impl ServeArgs {
    /// The settings these flags describe.
    pub fn settings(&self) -> Settings {
        let mut settings = Settings {
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            load: self.rules.load_options(),
            limiter: LimiterOptions {
                global_shadow_mode: self.shadow_mode,
                global_quota_mode: self.response.quota_mode,
                default_algorithm: self.rules.default_algorithm.into(),
                override_recording: self
                    .rules
                    .load_options()
                    .recording(self.rules.default_algorithm.into(), None),
                expected_replicas: self.redis.expected_replicas,
                response: self.response.options(),
            },
            shutdown_grace: self.shutdown_grace.into(),
            shutdown_delay: self.shutdown_delay.into(),
            near_limit_ratio: self.near_limit_ratio,
            max_metric_series: self.metrics_max_series,
            watch_rules: !self.no_watch,
            tls: self.tls.settings(),
            store: self.store_settings(),
            tracing: self.trace.settings(),
            xds: self.xds.settings(),
            statsd: self.statsd.settings(),
            prometheus_mapper: self.statsd.prometheus_mapper.clone(),
            ..Settings::new(self.rules.config.clone())
        };
        self.serving.apply(&mut settings);
        self.admin.apply(&mut settings);
        self.rlqs.apply(&mut settings);
        let global_url = self.rules.global_redis_url.as_deref();
        self.region.apply(global_url, &mut settings);
        settings
    }

    fn store_settings(&self) -> StoreSettings {
        match (self.store, &self.redis.redis_url) {
            (StoreArg::Redis, Some(url)) => {
                StoreSettings::Redis(Box::new(self.redis.settings(url)))
            }
            // clap requires --redis-url with --store redis.
            _ => StoreSettings::Memory(self.memory.settings()),
        }
    }
}

impl TlsArgs {
    /// The TLS settings, or `None` for plaintext (clap makes cert and key come together).
    pub fn settings(&self) -> Option<TlsSettings> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                client_san: self.tls_client_san.clone(),
            }),
            _ => None,
        }
    }
}

impl MemoryArgs {
    fn settings(&self) -> MemorySettings {
        let persist = (!self.no_persist).then(|| PersistSettings {
            interval: self.persist_interval.into(),
            sync: self.persist_sync,
            strict: self.strict_data_dir,
            ..PersistSettings::new(&self.data_dir)
        });
        MemorySettings {
            max_counters: self.max_counters,
            persist,
        }
    }
}

/// Runs `sluice serve` until SIGTERM/SIGINT, re-reading its files on SIGHUP.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    // Install the signal handlers before announcing readiness: a SIGTERM sent right after the
    // ready line must start a graceful shutdown, not kill the process.
    let signals = shutdown_signals()?;
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot handle SIGHUP")?;
    let running = app::start(settings, Arc::new(SystemClock)).await?;
    let grpc = match &running.grpc_socket {
        Some(path) => format!("unix:{}", path.display()),
        None => running.grpc_addr.to_string(),
    };
    // Not `println!`: it panics when stdout is closed (`sluice serve | true`); the ready line is a
    // courtesy to scripts, and the log line below says the same.
    tracing::info!(grpc = %grpc, http = %running.http_addr, "serving");
    let _ = writeln!(
        std::io::stdout(),
        "sluice ready grpc={grpc} http={}",
        running.http_addr
    );
    if let Some(addr) = running.metrics_addr {
        tracing::info!(%addr, "metrics listener");
    }
    if let Some(addr) = running.admin_addr {
        tracing::info!(%addr, "admin listener");
    }
    // SIGHUP re-reads the rule, TLS and admin token files, as operators of most servers expect; without a
    // handler it would end the process on the spot, losing what is not yet persisted.
    let reload = running.file_reload();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: re-reading the rule, TLS and admin token files");
            reload.now().await;
        }
    });
    let token = running.shutdown.clone();
    tokio::spawn(async move {
        signals.await;
        tracing::info!("shutdown requested");
        token.cancel();
    });
    running.wait().await.context("server stopped with an error")
}

/// A future that completes on SIGTERM or SIGINT; the handlers are installed when this returns.
fn shutdown_signals() -> anyhow::Result<impl Future<Output = ()>> {
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

fn parse_persist_interval(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_in(text, Duration::from_millis(1)..=Duration::from_secs(60)).map(GoDuration)
}

fn parse_max_counters(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{text}' is not a whole number of at least 1")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let argv = ["sluice", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// The RLQS caps are flags, with the wing's defaults.
    #[test]
    fn rlqs_caps_are_flags() {
        let settings = serve(&[
            "--rlqs-max-streams",
            "20000",
            "--rlqs-max-buckets-per-stream",
            "5",
        ])
        .unwrap()
        .settings();
        assert_eq!(settings.rlqs.max_streams, 20_000);
        assert_eq!(settings.rlqs.max_buckets_per_stream, 5);
        let defaults = serve(&[]).unwrap().settings();
        assert_eq!(defaults.rlqs, sluice::rlqs::RlqsSettings::default());
        assert!(serve(&["--rlqs-max-streams", "0"]).is_err());
    }

    /// Every duration flag reads Go's grammar, and the defaults come from `app::defaults`.
    #[test]
    fn duration_flags_read_go_durations() {
        let args = serve(&[
            "--shutdown-grace",
            "1m30s",
            "--shutdown-delay",
            "1.5s",
            "--persist-interval",
            "250ms",
            "--redis-timeout",
            "150us",
        ])
        .unwrap();
        let settings = args.settings();
        assert_eq!(settings.shutdown_grace, Duration::from_secs(90));
        assert_eq!(settings.shutdown_delay, Duration::from_millis(1_500));
        assert_eq!(args.redis.redis_timeout.0, Duration::from_micros(150));
        let StoreSettings::Memory(memory) = settings.store else {
            panic!("memory store by default")
        };
        assert_eq!(memory.persist.unwrap().interval, Duration::from_millis(250));
        let defaults = serve(&[]).unwrap().settings();
        assert_eq!(defaults.shutdown_grace, defaults::SHUTDOWN_GRACE);
        assert_eq!(defaults.grpc_addr, defaults::GRPC_ADDR);
    }

    /// Out-of-range and malformed durations are clear errors, never a panic.
    #[test]
    fn bad_durations_are_errors() {
        for (flag, value, says) in [
            ("--shutdown-delay", "18446744073709551615", "missing unit"),
            (
                "--shutdown-delay",
                "18446744073709551615s",
                "must be at most",
            ),
            ("--shutdown-grace=-1s", "", "must not be negative"),
            ("--persist-interval", "0s", "must be at least 1ms"),
            ("--persist-interval", "2m", "must be at most 1m"),
            ("--redis-timeout", "10", "missing unit"),
            ("--redis-timeout", "0s", "must be at least 1us"),
        ] {
            let args: Vec<&str> = [flag, value]
                .into_iter()
                .filter(|a| !a.is_empty())
                .collect();
            let error = serve(&args).unwrap_err().to_string();
            assert!(error.contains(says), "{flag} {value}: {error}");
        }
    }

    /// `--store redis` builds Redis settings from the flags; the memory store is the default.
    #[test]
    fn store_flags_choose_the_store() {
        let args = serve(&[
            "--store",
            "redis",
            "--redis-url",
            "redis://h:1",
            "--redis-connections",
            "3",
            "--redis-runs-in-flight",
            "4",
        ]);
        let StoreSettings::Redis(redis) = args.unwrap().settings().store else {
            panic!("redis store")
        };
        assert_eq!((redis.url.as_str(), redis.connections), ("redis://h:1", 3));
        assert_eq!(redis.runs_in_flight, 4);
        assert!(serve(&["--store", "redis"]).is_err(), "a URL is required");
        assert!(serve(&["--redis-connections", "0"]).is_err());
        assert!(serve(&["--redis-runs-in-flight", "0"]).is_err());
    }

    /// A global store makes a region of the server and lets rules say `scope: global`; without
    /// one there is no region, and `scope: global` stays refused.
    #[test]
    fn a_global_store_makes_a_region() {
        let on = serve(&[
            "--region",
            "eu",
            "--global-redis-url",
            "rediss://g:6380",
            "--global-redis-password",
            "pw",
            "--region-floor",
            "0.25",
            "--region-member-timeout",
            "10m",
        ])
        .unwrap()
        .settings();
        let region = on.region.expect("a region");
        assert_eq!(region.options.name, "eu");
        assert_eq!(region.options.floor_share, 0.25);
        assert_eq!(region.options.member_timeout, 600 * sluice::clock::SECOND);
        assert_eq!(region.global.url, "rediss://g:6380");
        assert_eq!(region.global.password.as_deref(), Some("pw"));
        assert!(on.load.global_scope);
        let off = serve(&["--region", "eu"]).unwrap().settings();
        assert!(off.region.is_none() && !off.load.global_scope);
        assert!(serve(&["--region-member-timeout", "30s"]).is_err());
        assert!(serve(&["--region-floor", "1.5"]).is_err());
    }
}
