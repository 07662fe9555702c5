//! What a server is built from: [`Settings`], with the counter store chosen by [`StoreSettings`].
//! The command line only parses into these; everything is built from them in [`super::start`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::defaults;
use crate::limiter::LimiterOptions;
use crate::region::RegionOptions;
use crate::rules::{CompatLayout, LoadOptions};
use crate::statsd::StatsdSettings;
use crate::store::{PersistSettings, RedisSettings};
use crate::telemetry::TraceSettings;
use crate::tls::TlsSettings;
use crate::xds::XdsSettings;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Rule files or directories (unused when `xds` is set).
    pub config: Vec<PathBuf>,
    /// Rules from an xDS control plane instead of files.
    pub xds: Option<XdsSettings>,
    /// gRPC listen address (port 0 picks one).
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (port 0 picks one).
    pub http_addr: SocketAddr,
    /// How rules are compiled.
    pub load: LoadOptions,
    /// Limiter switches.
    pub limiter: LimiterOptions,
    /// The caps and bounds of the RLQS streams.
    pub rlqs: crate::rlqs::RlqsSettings,
    /// Longest wait for in-flight calls at shutdown.
    pub shutdown_grace: Duration,
    /// How long to keep serving after health turns NOT_SERVING, so load balancers and
    /// Kubernetes stop sending new calls before the listeners close.
    pub shutdown_delay: Duration,
    /// envoyproxy/ratelimit's NEAR_LIMIT_RATIO for the near_limit statistic.
    pub near_limit_ratio: f64,
    /// Most per-rule metric series before new ones fold into an overflow series.
    pub max_metric_series: usize,
    /// Reload rules when their files change (rule files only).
    pub watch_rules: bool,
    /// TLS on gRPC; `None` serves plaintext.
    pub tls: Option<TlsSettings>,
    /// Where counters live.
    pub store: StoreSettings,
    /// OpenTelemetry tracing of calls; `None` (the default) traces nothing.
    pub tracing: Option<TraceSettings>,
    /// Rules from envoyproxy/ratelimit's file layout instead of `config` (the `ratelimit`
    /// personality).
    pub runtime: Option<CompatLayout>,
    /// A rule set that does not load stops the start (`sluice serve`); when false the server
    /// starts without rules, unhealthy until a rule set loads (as envoyproxy/ratelimit starts).
    pub rules_required: bool,
    /// What health (`/healthcheck`, gRPC health) reports besides draining and rules loaded.
    pub health: HealthOptions,
    /// Serve gRPC on this unix socket instead of `grpc_addr`.
    pub grpc_socket: Option<PathBuf>,
    /// gRPC connections are closed gracefully (GOAWAY) after about this long (±10 %), so
    /// clients reconnect and spread over replicas added since.
    pub grpc_max_connection_age: Duration,
    /// After the age, how long in-flight calls of a closing connection may take.
    pub grpc_max_connection_age_grace: Duration,
    /// The most gRPC connections open at once; past it new ones are closed on accept.
    pub grpc_max_connections: usize,
    /// The most HTTP connections open at once; past it the oldest is asked to close (and cut
    /// if it is still open when the cap is full again).
    pub http_max_connections: usize,
    /// Host names a browser may reach the HTTP listener by, besides IP addresses, `localhost`
    /// and the machine's host name: a name, or `*.domain` (`--http-allowed-hosts`).
    pub http_allowed_hosts: Vec<String>,
    /// A listener of its own serving only Prometheus metrics.
    pub metrics_listener: Option<MetricsListener>,
    /// The admin listener (counters inspected and reset); `None`, the default, serves none.
    pub admin: Option<AdminSettings>,
    /// envoyproxy/ratelimit's stats sent to a statsd or DogStatsD receiver; `None` sends none.
    pub statsd: Option<StatsdSettings>,
    /// A statsd_exporter mapping file (envoyproxy/ratelimit's `PROMETHEUS_MAPPER_YAML`): its
    /// families replace the built-in `ratelimit_service_*` ones on `/metrics`.
    pub prometheus_mapper: Option<PathBuf>,
    /// One of several regions sharing `scope: global` limits through a global store; `None`
    /// (the default) refuses such limits.
    pub region: Option<RegionSettings>,
}

/// This deployment's region and the global store regions share (`--region`,
/// `--global-redis-url`).
#[derive(Debug, Clone)]
pub struct RegionSettings {
    /// The region's name and how it shares.
    pub options: RegionOptions,
    /// The global store: a Redis every region reaches (standalone, Cluster or Sentinel).
    pub global: RedisSettings,
}

/// The admin listener (`--admin-addr`, `--admin-token-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// Where it listens (port 0 picks one).
    pub addr: SocketAddr,
    /// The bearer tokens allowed in, one a line (`name:token`, or a bare token named
    /// `default`); reloaded when the file changes. A file that cannot be read or holds no
    /// token stops the start.
    pub token_file: PathBuf,
}

/// What health reports as unhealthy besides draining and "no rules loaded yet".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthOptions {
    /// Unhealthy while the loaded rules hold no domain (envoyproxy/ratelimit
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub require_domains: bool,
    /// Unhealthy during a sustained store outage (the Redis breaker open for a while). Off by
    /// default: the rules' `failure_mode` answers calls through an outage, and a failing probe
    /// would take the replicas out of service instead.
    pub store: bool,
}

/// A separate Prometheus listener (envoyproxy/ratelimit `USE_PROMETHEUS`, `PROMETHEUS_ADDR`,
/// `PROMETHEUS_PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsListener {
    /// Where it listens (port 0 picks one).
    pub addr: SocketAddr,
    /// The path metrics are served on, e.g. `/metrics`.
    pub path: String,
}

/// The counter store to build.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    /// The embedded in-process store.
    Memory(MemorySettings),
    /// Redis (standalone, Cluster or Sentinel), shared by every replica (boxed: its settings
    /// are many times the size of the memory store's).
    Redis(Box<RedisSettings>),
}

/// The embedded store: its bound and its persistence.
#[derive(Debug, Clone)]
pub struct MemorySettings {
    /// Most counters held; past it, calls that need a new one are refused.
    pub max_counters: usize,
    /// Persistence under a data directory; `None` counts in memory only.
    pub persist: Option<PersistSettings>,
}

impl Default for MemorySettings {
    /// The bound of `sluice serve`, without persistence (an embedder opts in with a directory).
    fn default() -> Self {
        Self {
            max_counters: defaults::MAX_COUNTERS,
            persist: None,
        }
    }
}

impl Settings {
    /// The defaults of `sluice serve` for the rule paths `config`, on the embedded store
    /// without persistence (the command line persists under `data/`; an embedder opts in).
    pub fn new(config: Vec<PathBuf>) -> Self {
        Self {
            config,
            xds: None,
            grpc_addr: defaults::GRPC_ADDR,
            http_addr: defaults::HTTP_ADDR,
            load: LoadOptions::default(),
            limiter: LimiterOptions::default(),
            rlqs: crate::rlqs::RlqsSettings::default(),
            shutdown_grace: defaults::SHUTDOWN_GRACE,
            shutdown_delay: defaults::SHUTDOWN_DELAY,
            near_limit_ratio: defaults::NEAR_LIMIT_RATIO,
            max_metric_series: defaults::METRICS_MAX_SERIES,
            watch_rules: true,
            tls: None,
            store: StoreSettings::Memory(MemorySettings::default()),
            tracing: None,
            runtime: None,
            rules_required: true,
            health: HealthOptions::default(),
            grpc_socket: None,
            grpc_max_connection_age: defaults::GRPC_MAX_CONNECTION_AGE,
            grpc_max_connection_age_grace: defaults::GRPC_MAX_CONNECTION_AGE_GRACE,
            grpc_max_connections: defaults::GRPC_MAX_CONNECTIONS,
            http_max_connections: defaults::HTTP_MAX_CONNECTIONS,
            http_allowed_hosts: Vec::new(),
            metrics_listener: None,
            admin: None,
            statsd: None,
            prometheus_mapper: None,
            region: None,
        }
    }
}
