//! The counter backend: `BACKEND_TYPE`, the cache options shared by every backend, how the
//! personality counts (envoyproxy/ratelimit's fixed windows in envoyproxy/ratelimit's keys), and
//! the memcached variables sluice does not honour.

use std::time::Duration;

use sluice::clock::duration::GoDuration;
use sluice::store::redis::local_cache_entries;

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::AlgorithmArg;
use crate::cli::redis::KeyLayoutArg;
use crate::cli::serve::StoreArg;

const NO_MEMCACHE: &str = "memcached is not supported: use BACKEND_TYPE=redis";

/// The backend variables.
pub const GROUP: Group = Group {
    name: "Backend",
    vars: &[
        Var {
            name: "BACKEND_TYPE",
            kind: VarType::Str,
            default: "redis",
            handling: Handling::Differently(
                "`redis` (or empty) → `--store redis`; `memcache` stops the start (not supported)",
            ),
        },
        Var {
            name: "CACHE_KEY_PREFIX",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured(
                "`--redis-key-prefix` (no `{` or `}`); empty when not set, as upstream",
            ),
        },
        Var {
            name: "NEAR_LIMIT_RATIO",
            kind: VarType::Float,
            default: "0.8",
            handling: Handling::Honoured("`--near-limit-ratio` (0 to 1)"),
        },
        Var {
            name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Differently(
                "always on: a refused call consumes nothing from its descriptors that fit; a fixed-window descriptor over its limit records its hits, as upstream",
            ),
        },
        Var {
            name: "EXPIRATION_JITTER_MAX_SECONDS",
            kind: VarType::Int,
            default: "300",
            handling: Handling::Honoured(
                "`--redis-expiration-jitter` (N → `Ns`) of the counters kept in upstream's keys",
            ),
        },
        Var {
            name: "LOCAL_CACHE_SIZE_IN_BYTES",
            kind: VarType::Int,
            default: "0",
            handling: Handling::Differently(
                "`--local-cache-size` = bytes / 192 entries (at least upstream's 512 KiB); 0 turns the cache off; not set keeps sluice's cache, which only answers what Redis would",
            ),
        },
        Var {
            name: "MEMCACHE_HOST_PORT",
            kind: VarType::List,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_SRV",
            kind: VarType::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_MAX_IDLE_CONNS",
            kind: VarType::Int,
            default: "2",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_SRV_REFRESH",
            kind: VarType::Duration,
            default: "0",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_CLIENT_CERT",
            kind: VarType::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_CLIENT_KEY",
            kind: VarType::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_CACERT",
            kind: VarType::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "store", &["BACKEND_TYPE"], |args| {
        match env.string("BACKEND_TYPE", "redis") {
            "redis" | "" => args.store = StoreArg::Redis,
            "memcache" => return Err(env.error("BACKEND_TYPE", NO_MEMCACHE)),
            _ => {
                return Err(env.error("BACKEND_TYPE", "must be redis or memcache (case-sensitive)"));
            }
        }
        Ok(())
    })?;
    count_as_upstream(env, target)?;
    let prefix = &["CACHE_KEY_PREFIX"];
    target.unless_explicit(env, "redis_key_prefix", prefix, |args| {
        args.redis.redis_key_prefix = env.string(prefix[0], "").to_string();
        Ok(())
    })?;
    let jitter = &["EXPIRATION_JITTER_MAX_SECONDS"];
    target.unless_explicit(env, "redis_expiration_jitter", jitter, |args| {
        let seconds = env.int(jitter[0], 300)?;
        let seconds =
            u64::try_from(seconds).map_err(|_| env.error(jitter[0], "must not be negative"))?;
        args.redis.redis_expiration_jitter = GoDuration(Duration::from_secs(seconds));
        Ok(())
    })?;
    let cache = &["LOCAL_CACHE_SIZE_IN_BYTES"];
    target.unless_explicit(env, "local_cache_size", cache, |args| {
        if let Some(bytes) = env.parsed(cache[0], super::env::go_int)? {
            let bytes =
                u64::try_from(bytes).map_err(|_| env.error(cache[0], "must not be negative"))?;
            args.redis.local_cache_size = local_cache_size(bytes);
        }
        Ok(())
    })?;
    let ratio = &["NEAR_LIMIT_RATIO"];
    target.unless_explicit(env, "near_limit_ratio", ratio, |args| {
        let value = env.float(ratio[0], 0.8)?;
        if !(0.0..=1.0).contains(&value) {
            return Err(env.error(ratio[0], "must be between 0 and 1"));
        }
        args.near_limit_ratio = value;
        Ok(())
    })
}

/// Counts as envoyproxy/ratelimit does, so that replicas of envoyproxy/ratelimit and of sluice can
/// serve side by side on one Redis during a rolling update of the image and afterwards: fixed
/// windows for rules that name no algorithm, kept in envoyproxy/ratelimit's keys (each replaced
/// unless its flag is given), that record every hit and judge a check of 0 hits as
/// envoyproxy/ratelimit does (its token-quota pattern: a check, then a charge at stream end).
fn count_as_upstream(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.args.rules.compat_recording = true;
    target.unless_explicit(env, "default_algorithm", &[], |args| {
        args.rules.default_algorithm = AlgorithmArg::FixedWindow;
        Ok(())
    })?;
    target.unless_explicit(env, "redis_key_layout", &[], |args| {
        args.redis.redis_key_layout = KeyLayoutArg::Upstream;
        Ok(())
    })
}

/// Local-cache entries for envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES: 0 turns the cache off;
/// a size is at least 512 KiB, as envoyproxy/ratelimit's cache (freecache) makes it.
fn local_cache_size(bytes: u64) -> usize {
    const SMALLEST: u64 = 512 * 1024;
    match bytes {
        0 => 0,
        bytes => local_cache_entries(bytes.max(SMALLEST)),
    }
}
