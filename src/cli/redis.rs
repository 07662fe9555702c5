//! The Redis flags of `sluice serve` (used with `--store redis`), parsed into
//! [`RedisSettings`].

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, ValueEnum};
use sluice::app::defaults;
use sluice::clock::duration::{self, DurationError, GoDuration};
use sluice::store::RedisSettings;
use sluice::store::redis::RedisKeyLayout;

/// Redis flags of `sluice serve` (used with `--store redis`).
#[derive(Debug, Args)]
pub struct RedisArgs {
    /// Redis URL: redis://[user:password@]host:port[/db] (rediss:// for TLS), host:port,
    /// redis+unix:///path/to.sock[?db=N] or /path/to.sock, redis+cluster://host:port,host:port,
    /// or redis+sentinel://host:port,host:port/<master>[/db] (rediss+… for TLS).
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        required_if_eq("store", "redis"),
        hide_env_values = true
    )]
    pub redis_url: Option<String>,
    /// Redis password; replaces the URL's credentials (with --redis-username, or as the
    /// default user). Prefer SLUICE_REDIS_PASSWORD: flags show in process lists.
    #[arg(long, env = "SLUICE_REDIS_PASSWORD", hide_env_values = true)]
    pub redis_password: Option<String>,
    /// Redis user of --redis-password (Redis 6 ACL).
    #[arg(long, env = "SLUICE_REDIS_USERNAME", requires = "redis_password")]
    pub redis_username: Option<String>,
    /// The sentinels' own password (redis+sentinel://); the URL's credentials are the master's.
    #[arg(long, env = "SLUICE_REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    pub redis_sentinel_password: Option<String>,
    /// The sentinels' user of --redis-sentinel-password.
    #[arg(
        long,
        env = "SLUICE_REDIS_SENTINEL_USERNAME",
        requires = "redis_sentinel_password"
    )]
    pub redis_sentinel_username: Option<String>,
    /// TLS to Redis whatever the URL's scheme (for host:port, redis://, cluster and sentinel
    /// URLs).
    #[arg(long, env = "SLUICE_REDIS_TLS")]
    pub redis_tls: bool,
    /// PEM CA certificates to trust for Redis TLS (default: the system's roots).
    #[arg(long, env = "SLUICE_REDIS_CA")]
    pub redis_ca: Option<PathBuf>,
    /// PEM client certificate chain to present to Redis (requires --redis-client-key).
    #[arg(long, env = "SLUICE_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,
    /// PEM private key of --redis-client-cert.
    #[arg(long, env = "SLUICE_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,
    /// Verify Redis's certificate chain but not its name (e.g. servers reached by IP).
    #[arg(long, env = "SLUICE_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")]
    pub redis_tls_skip_hostname_verification: bool,
    /// Prefix of every Redis key (no braces).
    #[arg(long, env = "SLUICE_REDIS_KEY_PREFIX", default_value = defaults::REDIS_KEY_PREFIX)]
    pub redis_key_prefix: String,
    /// How counters are named in Redis: sluice's collision-free keys, or envoyproxy/ratelimit's
    /// for fixed_window rules (so both can share counts during a migration).
    #[arg(long, env = "SLUICE_REDIS_KEY_LAYOUT", value_enum, default_value_t = KeyLayoutArg::Sluice)]
    pub redis_key_layout: KeyLayoutArg,
    /// Most random extra expiry of compat-layout keys (as envoyproxy/ratelimit's
    /// EXPIRATION_JITTER_MAX_SECONDS).
    #[arg(long, env = "SLUICE_REDIS_EXPIRATION_JITTER", default_value_t = GoDuration(defaults::REDIS_EXPIRATION_JITTER))]
    pub redis_expiration_jitter: GoDuration,
    /// Longest wait for Redis on a call (e.g. 10ms, 250us, 1s); then the rule's failure_mode
    /// decides.
    #[arg(long, env = "SLUICE_REDIS_TIMEOUT", default_value_t = GoDuration(defaults::REDIS_TIMEOUT), value_parser = parse_positive)]
    pub redis_timeout: GoDuration,
    /// Longest time opening a connection may take (TCP, TLS, AUTH; with Sentinel, each
    /// step): envoyproxy/ratelimit's REDIS_TIMEOUT.
    #[arg(long, env = "SLUICE_REDIS_CONNECT_TIMEOUT", default_value_t = GoDuration(defaults::REDIS_CONNECT_TIMEOUT), value_parser = parse_positive)]
    pub redis_connect_timeout: GoDuration,
    /// Multiplexed connections to a standalone Redis or Sentinel master (calls are pipelined
    /// on each).
    #[arg(long, env = "SLUICE_REDIS_CONNECTIONS", default_value_t = defaults::REDIS_CONNECTIONS, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    pub redis_connections: usize,
    /// Script runs outstanding per connection (per slot on a cluster) before further calls
    /// queue and share the next run: more lowers latency under moderate load
    /// on a distant Redis, fewer batches more calls per run (less CPU in Redis and here).
    #[arg(long, env = "SLUICE_REDIS_RUNS_IN_FLIGHT", default_value_t = defaults::REDIS_RUNS_IN_FLIGHT, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    pub redis_runs_in_flight: usize,
    /// Most over-limit counters answered locally without a Redis round trip (0 disables).
    #[arg(long, env = "SLUICE_LOCAL_CACHE_SIZE", default_value_t = defaults::LOCAL_CACHE_SIZE)]
    pub local_cache_size: usize,
    /// Replicas sharing the store: while it is unreachable a `failure_mode: local` rule
    /// allows its limit divided by this number in each replica.
    #[arg(long, env = "SLUICE_EXPECTED_REPLICAS", default_value_t = defaults::EXPECTED_REPLICAS, value_parser = clap::value_parser!(u64).range(1..))]
    pub expected_replicas: u64,
}

/// `--redis-key-layout`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KeyLayoutArg {
    /// Collision-free keys for every counter.
    Sluice,
    /// envoyproxy/ratelimit's keys and integer values for fixed_window rules.
    Upstream,
}

impl RedisArgs {
    /// The Redis settings for `url`.
    pub fn settings(&self, url: &str) -> RedisSettings {
        RedisSettings {
            username: self.redis_username.clone(),
            password: self.redis_password.clone(),
            sentinel_username: self.redis_sentinel_username.clone(),
            sentinel_password: self.redis_sentinel_password.clone(),
            tls: self.redis_tls,
            ca: self.redis_ca.clone(),
            client_cert: self.redis_client_cert.clone(),
            client_key: self.redis_client_key.clone(),
            tls_skip_hostname_verification: self.redis_tls_skip_hostname_verification,
            key_prefix: self.redis_key_prefix.clone(),
            key_layout: match self.redis_key_layout {
                KeyLayoutArg::Sluice => RedisKeyLayout::Sluice,
                KeyLayoutArg::Upstream => RedisKeyLayout::Compat,
            },
            expiration_jitter: self.redis_expiration_jitter.into(),
            timeout: self.redis_timeout.into(),
            connect_timeout: self.redis_connect_timeout.into(),
            connections: self.redis_connections,
            runs_in_flight: self.redis_runs_in_flight,
            local_cache_size: self.local_cache_size,
            ..RedisSettings::new(url)
        }
    }
}

/// A duration of at least a microsecond (a zero timeout would fail every call).
fn parse_positive(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_in(text, Duration::from_micros(1)..=duration::MAX).map(GoDuration)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn redis(args: &[&str]) -> Result<RedisArgs, clap::Error> {
        let argv = ["sluice", "serve", "--store", "redis"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(args) => Ok(args.redis),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// Every Redis flag reaches its setting.
    #[test]
    fn flags_reach_the_settings() {
        let args = redis(&[
            "--redis-url",
            "redis+sentinel://s1:26379,s2:26379/mymaster",
            "--redis-username",
            "app",
            "--redis-password",
            "pw",
            "--redis-sentinel-password",
            "spw",
            "--redis-tls",
            "--redis-ca",
            "/ca.pem",
            "--redis-client-cert",
            "/c.pem",
            "--redis-client-key",
            "/k.pem",
            "--redis-tls-skip-hostname-verification",
            "--redis-key-layout",
            "upstream",
            "--redis-expiration-jitter",
            "0s",
            "--redis-connect-timeout",
            "10s",
        ])
        .unwrap();
        let s = args.settings(args.redis_url.as_deref().unwrap());
        assert_eq!(
            (s.username.as_deref(), s.password.as_deref()),
            (Some("app"), Some("pw"))
        );
        assert_eq!(
            (s.sentinel_username, s.sentinel_password.as_deref()),
            (None, Some("spw"))
        );
        assert!(s.tls && s.tls_skip_hostname_verification);
        assert_eq!(s.client_key, Some(PathBuf::from("/k.pem")));
        assert_eq!(s.key_layout, RedisKeyLayout::Compat);
        assert_eq!(s.expiration_jitter, Duration::ZERO);
        assert_eq!(s.connect_timeout, Duration::from_secs(10));
        let d = redis(&["--redis-url", "redis://h"]).unwrap();
        let d = d.settings("redis://h");
        assert_eq!(d.key_layout, RedisKeyLayout::Sluice);
        assert_eq!(d.connect_timeout, defaults::REDIS_CONNECT_TIMEOUT);
        assert_eq!(d.expiration_jitter, defaults::REDIS_EXPIRATION_JITTER);
    }

    /// Flags that need a partner are refused without it.
    #[test]
    fn partners_are_required() {
        let url = ["--redis-url", "rediss://h"];
        for lonely in [
            &["--redis-username", "app"][..],
            &["--redis-sentinel-username", "s"],
            &["--redis-client-cert", "/c.pem"],
            &["--redis-client-key", "/k.pem"],
            &["--redis-connect-timeout", "0s"],
        ] {
            let args: Vec<&str> = url.iter().chain(lonely).copied().collect();
            assert!(redis(&args).is_err(), "{lonely:?}");
        }
    }
}
