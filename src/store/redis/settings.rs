//! How to reach and use Redis: [`RedisSettings`], the library side of the `--redis-*` flags,
//! with their defaults.

use std::path::PathBuf;
use std::time::Duration;

/// Whose clock decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisClock {
    /// Redis's own (`TIME` inside the script): replicas' clocks do not matter. Production.
    Server,
    /// The `now` each call passes (microsecond resolution): for tests with a manual clock.
    Caller,
}

/// How counters are named in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisKeyLayout {
    /// sluice's own: collision-free (length-prefixed) keys with a Redis Cluster hash tag.
    #[default]
    Sluice,
    /// envoyproxy/ratelimit's keys and values for `fixed_window` rules (see `compat_keys.rs`), so
    /// envoyproxy/ratelimit and sluice replicas on one Redis share their counts during a migration;
    /// every other counter keeps sluice's layout.
    Compat,
}

/// The default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "sluice:";
/// The default longest wait for Redis on a call (well inside Envoy's 20 ms RLS timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(10);
/// The default bound on opening a connection (TCP, TLS, AUTH; each step with Sentinel).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The default number of multiplexed connections to a standalone Redis.
pub const DEFAULT_CONNECTIONS: usize = 2;
/// The default number of script runs outstanding per connection before calls queue and share
/// the next run: one (measured with Redis beside the server, interleaved runs: 0.52 and 0.54
/// of the do-nothing server's calls/s at 64 and 256 calls in flight, against 0.47 and 0.50
/// with four).
pub const DEFAULT_RUNS_IN_FLIGHT: usize = 1;
/// The default size of the local over-limit cache.
pub const DEFAULT_LOCAL_CACHE_SIZE: usize = 100_000;
/// The default most extra expiry of an compat-layout key (envoyproxy/ratelimit's
/// `EXPIRATION_JITTER_MAX_SECONDS`).
pub const DEFAULT_EXPIRATION_JITTER: Duration = Duration::from_secs(300);
/// How long the breaker must stay open, by default, before health reports the store
/// unhealthy: a blip (a failover, a restart) must not flap readiness.
const DEFAULT_UNHEALTHY_AFTER: Duration = Duration::from_secs(10);

/// How to reach and use Redis. `Debug` hides the credentials.
#[derive(Clone)]
pub struct RedisSettings {
    /// `--redis-url` (may hold credentials: never log it, see
    /// `describe_url`).
    pub url: String,
    /// `--redis-username`: replaces the URL's user, with `password`.
    pub username: Option<String>,
    /// `--redis-password`: replaces the URL's credentials (with `username`, or the default
    /// user); for the data nodes (standalone, cluster nodes, the sentinels' master).
    pub password: Option<String>,
    /// `--redis-sentinel-username`: the sentinels' own user, with `sentinel_password`.
    pub sentinel_username: Option<String>,
    /// `--redis-sentinel-password`: the sentinels' own password (sentinels get no credentials
    /// without it).
    pub sentinel_password: Option<String>,
    /// `--redis-tls`: TLS even for a `redis://`, bare `host:port`, cluster or sentinel URL.
    pub tls: bool,
    /// `--redis-ca`: PEM CA certificates to trust instead of the system roots.
    pub ca: Option<PathBuf>,
    /// `--redis-client-cert`: a PEM certificate chain to present (with `client_key`).
    pub client_cert: Option<PathBuf>,
    /// `--redis-client-key`: the PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// `--redis-tls-skip-hostname-verification`: verify the chain, not the name.
    pub tls_skip_hostname_verification: bool,
    /// `--redis-key-prefix`.
    pub key_prefix: String,
    /// `--redis-key-layout`.
    pub key_layout: RedisKeyLayout,
    /// `--redis-expiration-jitter`: an compat-layout key expires a window plus a random
    /// part of this after its last hit, as envoyproxy/ratelimit's do.
    pub expiration_jitter: Duration,
    /// `--redis-timeout`: the longest a call waits for Redis.
    pub timeout: Duration,
    /// `--redis-connect-timeout`: the longest opening a connection may take (envoyproxy/ratelimit's
    /// `REDIS_TIMEOUT`); with Sentinel, each step (a sentinel's answer, the master's connect).
    pub connect_timeout: Duration,
    /// `--redis-connections`: multiplexed connections to a standalone Redis or master.
    pub connections: usize,
    /// `--redis-runs-in-flight`: script runs outstanding per connection before calls queue
    /// for a shared run (on a cluster, per slot: a run touches one slot's keys).
    pub runs_in_flight: usize,
    /// `--local-cache-size`: most over-limit counters remembered locally (0 disables).
    pub local_cache_size: usize,
    /// Whose clock decides.
    pub clock: RedisClock,
    /// How long the circuit breaker stays open before health reports the store unhealthy.
    pub unhealthy_after: Duration,
}

impl RedisSettings {
    /// The defaults of `sluice serve --store redis` for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            username: None,
            password: None,
            sentinel_username: None,
            sentinel_password: None,
            tls: false,
            ca: None,
            client_cert: None,
            client_key: None,
            tls_skip_hostname_verification: false,
            key_prefix: DEFAULT_KEY_PREFIX.into(),
            key_layout: RedisKeyLayout::Sluice,
            expiration_jitter: DEFAULT_EXPIRATION_JITTER,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            connections: DEFAULT_CONNECTIONS,
            runs_in_flight: DEFAULT_RUNS_IN_FLIGHT,
            local_cache_size: DEFAULT_LOCAL_CACHE_SIZE,
            clock: RedisClock::Server,
            unhealthy_after: DEFAULT_UNHEALTHY_AFTER,
        }
    }
}

/// `url` with any credentials replaced by `***` (and a query string, which may hold them,
/// dropped), for logs and errors.
pub fn describe_url(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((url, _)) => (url, "?***"),
        None => (url, ""),
    };
    let shown = match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, hosts)) => format!("{scheme}://***@{hosts}"),
            None => url.to_owned(),
        },
        None => match url.rsplit_once('@') {
            Some((_, hosts)) => format!("***@{hosts}"),
            None => url.to_owned(),
        },
    };
    shown + query
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |secret: &Option<String>| secret.as_ref().map(|_| "***");
        f.debug_struct("RedisSettings")
            .field("url", &describe_url(&self.url))
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &hidden(&self.sentinel_password))
            .field("tls", &self.tls)
            .field("ca", &self.ca)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field(
                "tls_skip_hostname_verification",
                &self.tls_skip_hostname_verification,
            )
            .field("key_prefix", &self.key_prefix)
            .field("key_layout", &self.key_layout)
            .field("expiration_jitter", &self.expiration_jitter)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("connections", &self.connections)
            .field("runs_in_flight", &self.runs_in_flight)
            .field("local_cache_size", &self.local_cache_size)
            .field("clock", &self.clock)
            .field("unhealthy_after", &self.unhealthy_after)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Debug` (which settings dumps may print) shows no password, in the URL or beside it.
    #[test]
    fn debug_hides_credentials() {
        let settings = RedisSettings {
            password: Some("hunter2".into()),
            sentinel_password: Some("sentinel-secret".into()),
            ..RedisSettings::new("redis://app:s3cret@db:6379")
        };
        let shown = format!("{settings:?}");
        for secret in ["hunter2", "sentinel-secret", "s3cret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("redis://***@db:6379"), "{shown}");
    }
}
