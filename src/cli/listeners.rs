//! `sluice serve` flags of the listeners and health beyond the two addresses: the gRPC unix
//! socket, gRPC connection age, a separate metrics listener, what health includes, and the
//! `ratelimit` personality switch.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use sluice::app::{HealthOptions, MetricsListener, Settings, defaults};
use sluice::clock::duration::GoDuration;

/// Listener and health flags.
#[derive(Debug, Args)]
pub struct ServingArgs {
    /// Read envoyproxy/ratelimit's environment variables (PORT, REDIS_URL, RUNTIME_ROOT, …) as
    /// the `ratelimit` personality does; flags and SLUICE_* variables still win.
    #[arg(long, env = "SLUICE_UPSTREAM_ENV")]
    pub upstream_env: bool,
    /// Serve gRPC on this unix socket instead of --grpc-addr (envoyproxy/ratelimit GRPC_UDS).
    #[arg(long, env = "SLUICE_GRPC_SOCKET")]
    pub grpc_socket: Option<PathBuf>,
    /// Close gRPC connections gracefully (GOAWAY) after about this long (±10 %), so clients
    /// reconnect and reach replicas added since.
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTION_AGE", default_value_t = GoDuration(defaults::GRPC_MAX_CONNECTION_AGE))]
    pub grpc_max_connection_age: GoDuration,
    /// After that age, how long in-flight calls of a closing connection may take before it is
    /// closed.
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE", default_value_t = GoDuration(defaults::GRPC_MAX_CONNECTION_AGE_GRACE))]
    pub grpc_max_connection_age_grace: GoDuration,
    /// The most gRPC connections open at once; past it a new connection is closed as soon as it
    /// is accepted, leaving the established ones alone.
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTIONS", default_value_t = defaults::GRPC_MAX_CONNECTIONS, value_parser = parse_max_connections)]
    pub grpc_max_connections: usize,
    /// The most HTTP connections open at once (--http-addr); past it the oldest is asked to
    /// close, and cut if it is still open when the cap is full again.
    #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS", default_value_t = defaults::HTTP_MAX_CONNECTIONS, value_parser = parse_max_connections)]
    pub http_max_connections: usize,
    /// Host names a browser may reach --http-addr by (POST /json, /ui), comma-separated: a
    /// name or *.domain; IP addresses, localhost and the machine's host name always may.
    #[arg(long, env = "SLUICE_HTTP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub http_allowed_hosts: Vec<String>,
    /// Also serve Prometheus metrics on a listener of their own (e.g. 0.0.0.0:19001).
    #[arg(long, env = "SLUICE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// The path of --metrics-addr's metrics.
    #[arg(long, env = "SLUICE_METRICS_PATH", default_value = defaults::METRICS_PATH, value_parser = parse_path)]
    pub metrics_path: String,
    /// Report unhealthy while the loaded rules hold no domain (envoyproxy/ratelimit
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
    #[arg(long, env = "SLUICE_HEALTH_REQUIRES_DOMAINS")]
    pub health_requires_domains: bool,
    /// Report unhealthy during a sustained counter store outage (off: the rules' failure_mode
    /// answers calls through an outage, and failing probes would take every replica out).
    #[arg(long, env = "SLUICE_HEALTH_CHECKS_STORE")]
    pub health_checks_store: bool,
}

impl ServingArgs {
    /// Writes these flags into `settings`.
    pub fn apply(&self, settings: &mut Settings) {
        settings.grpc_socket = self.grpc_socket.clone();
        settings.grpc_max_connection_age = self.grpc_max_connection_age.0;
        settings.grpc_max_connection_age_grace = self.grpc_max_connection_age_grace.0;
        settings.grpc_max_connections = self.grpc_max_connections;
        settings.http_max_connections = self.http_max_connections;
        settings.http_allowed_hosts = self.http_allowed_hosts.clone();
        settings.metrics_listener = self.metrics_addr.map(|addr| MetricsListener {
            addr,
            path: self.metrics_path.clone(),
        });
        settings.health = HealthOptions {
            require_domains: self.health_requires_domains,
            store: self.health_checks_store,
        };
    }
}

/// A URL path: starts with `/`.
pub fn parse_path(text: &str) -> Result<String, String> {
    if text.starts_with('/') {
        Ok(text.to_string())
    } else {
        Err(format!("'{text}' is not a path (it must start with /)"))
    }
}

fn parse_max_connections(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{text}' is not a whole number of at least 1")),
    }
}
