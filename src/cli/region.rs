//! The region flags of `sluice serve`: this deployment's region and the global store regions
//! share (`--global-redis-url`, read with the rule flags), reached as `--redis-url` is.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sluice::app::{RegionSettings, Settings, defaults};
use sluice::clock::duration::{self, DurationError, GoDuration};
use sluice::region::RegionOptions;
use sluice::store::RedisSettings;

/// Region flags of `sluice serve` (with `--global-redis-url`).
#[derive(Debug, Args)]
pub struct RegionArgs {
    /// This deployment's region: its name among the regions sharing `scope: global` limits
    /// through --global-redis-url (letters, digits, '.', '_', '-'; one name per region, shared by
    /// its replicas).
    #[arg(long, env = "SLUICE_REGION")]
    pub region: Option<String>,
    /// Each region's floor of a global limit, as a part (0 to 1) of an equal split among the
    /// regions: what a region cut off from the global store keeps enforcing, and the others'
    /// claims never take.
    #[arg(long, env = "SLUICE_REGION_FLOOR", default_value_t = defaults::REGION_FLOOR, value_parser = super::parse_ratio)]
    pub region_floor: f64,
    /// How long a region may go unheard of before the others free its floor (and a region cut
    /// off that long stops admitting calls of global limits), at least 1m.
    #[arg(long, env = "SLUICE_REGION_MEMBER_TIMEOUT", default_value_t = GoDuration(defaults::REGION_MEMBER_TIMEOUT), value_parser = parse_member_timeout)]
    pub region_member_timeout: GoDuration,
    /// The global Redis's password (the default user's; an ACL user goes in the URL). Prefer
    /// SLUICE_GLOBAL_REDIS_PASSWORD: flags show in process lists.
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_PASSWORD", hide_env_values = true)]
    pub global_redis_password: Option<String>,
    /// The global store's sentinels' own password (redis+sentinel://).
    #[arg(
        long,
        env = "SLUICE_GLOBAL_REDIS_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    pub global_redis_sentinel_password: Option<String>,
    /// TLS to the global Redis whatever the URL's scheme.
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_TLS")]
    pub global_redis_tls: bool,
    /// PEM CA certificates to trust for the global Redis's TLS (default: the system's roots).
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_CA")]
    pub global_redis_ca: Option<PathBuf>,
    /// PEM client certificate chain to present to the global Redis (with its key: the server
    /// refuses one without the other at start).
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_CLIENT_CERT")]
    pub global_redis_client_cert: Option<PathBuf>,
    /// PEM private key of --global-redis-client-cert.
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_CLIENT_KEY")]
    pub global_redis_client_key: Option<PathBuf>,
    /// Longest time a claim to the global store, or opening a connection to it, may take.
    #[arg(long, env = "SLUICE_GLOBAL_REDIS_TIMEOUT", default_value_t = GoDuration(defaults::REDIS_CONNECT_TIMEOUT), value_parser = parse_claim_timeout)]
    pub global_redis_timeout: GoDuration,
}

impl RegionArgs {
    /// Adds the region to `settings` when `global_url` (`--global-redis-url`) is given; a
    /// missing `--region` is left for the server to refuse, with the flag named.
    pub fn apply(&self, global_url: Option<&str>, settings: &mut Settings) {
        let Some(url) = global_url else {
            return;
        };
        let timeout: Duration = self.global_redis_timeout.into();
        let global = RedisSettings {
            password: self.global_redis_password.clone(),
            sentinel_password: self.global_redis_sentinel_password.clone(),
            tls: self.global_redis_tls,
            ca: self.global_redis_ca.clone(),
            client_cert: self.global_redis_client_cert.clone(),
            client_key: self.global_redis_client_key.clone(),

            // Claims are off the request path: one bound for the claim and the connection.
            timeout,
            connect_timeout: timeout,
            ..RedisSettings::new(url)
        };
        let options = RegionOptions {
            floor_share: self.region_floor,
            member_timeout: duration_nanos(self.region_member_timeout.into()),
            ..RegionOptions::new(self.region.clone().unwrap_or_default())
        };
        settings.region = Some(RegionSettings { options, global });
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A member timeout of at least a minute (a region stops using its floor 15 s before the
/// store may free it).
fn parse_member_timeout(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_in(text, Duration::from_secs(60)..=duration::MAX).map(GoDuration)
}

/// A claim timeout from 1 ms to 1 min.
fn parse_claim_timeout(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_in(text, Duration::from_millis(1)..=Duration::from_secs(60)).map(GoDuration)
}
