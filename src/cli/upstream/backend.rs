//! The counter backend: `BACKEND_TYPE`, the cache options shared by every backend, and the
//! memcached variables sluice does not honour.

use super::env::Env;
use super::{EnvError, Group, Handling, Kind, Target, Var};
use crate::cli::serve::StoreArg;

const NO_MEMCACHE: &str = "memcached is not supported: use BACKEND_TYPE=redis";

/// The backend variables.
pub const GROUP: Group = Group {
    name: "Backend",
    vars: &[
        Var {
            name: "BACKEND_TYPE",
            kind: Kind::Str,
            default: "redis",
            handling: Handling::Differently(
                "`redis` (or empty) → `--store redis`; `memcache` stops the start (not supported)",
            ),
        },
        Var {
            name: "CACHE_KEY_PREFIX",
            kind: Kind::Str,
            default: "",
            handling: Handling::Honoured("`--redis-key-prefix` (no `{` or `}`)"),
        },
        Var {
            name: "NEAR_LIMIT_RATIO",
            kind: Kind::Float,
            default: "0.8",
            handling: Handling::Honoured("`--near-limit-ratio` (0 to 1)"),
        },
        Var {
            name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Differently("always on: a refused call consumes nothing"),
        },
        Var {
            name: "EXPIRATION_JITTER_MAX_SECONDS",
            kind: Kind::Int,
            default: "300",
            handling: Handling::Ignored(
                "sluice expires each key when its state is no longer needed, without jitter",
            ),
        },
        Var {
            name: "MEMCACHE_HOST_PORT",
            kind: Kind::List,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_SRV",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_MAX_IDLE_CONNS",
            kind: Kind::Int,
            default: "2",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_SRV_REFRESH",
            kind: Kind::Duration,
            default: "0",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_CLIENT_CERT",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_CLIENT_KEY",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_CACERT",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
        Var {
            name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NO_MEMCACHE),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut Target<'_>) -> Result<(), EnvError> {
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
    let prefix = &["CACHE_KEY_PREFIX"];
    target.unless_explicit(env, "redis_key_prefix", prefix, |args| {
        args.redis.redis_key_prefix = env.string(prefix[0], "").to_string();
        Ok(())
    })?;
    let cache = &["LOCAL_CACHE_SIZE_IN_BYTES"];
    target.unless_explicit(env, "local_cache_size", cache, |args| {
        match env.parsed(cache[0], super::env::go_int)? {
            Some(bytes) if bytes < 0 => Err(env.error(cache[0], "must not be negative")),
            Some(0) => {
                args.redis.local_cache_size = 0;
                Ok(())
            }
            _ => Ok(()),
        }
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
