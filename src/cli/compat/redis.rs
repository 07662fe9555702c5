//! Redis as envoyproxy/ratelimit configures it: `REDIS_SOCKET_TYPE`, `REDIS_TYPE`, `REDIS_URL`,
//! `REDIS_AUTH`, `REDIS_SENTINEL_AUTH`, the pool size and connect timeout, and the pool and
//! start-up tuning sluice does not need. TLS is `redis_tls.rs`.

use std::time::Duration;

use sluice::clock::duration::GoDuration;

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::serve::{ServeArgs, StoreArg};

/// The variables that say which Redis, and so `--redis-url`.
pub const URL_VARS: [&str; 3] = ["REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL"];
/// The variables of this group that take effect only with the Redis store.
const STORE_VARS: [&str; 4] = [
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_POOL_SIZE",
    "REDIS_TIMEOUT",
];
const DEFAULT_URL: &str = "/var/run/nutcracker/ratelimit.sock";
const BATCHED: &str =
    "sluice pipelines and batches calls on a few multiplexed connections by itself";
const NO_WAIT: &str = "sluice starts without waiting for Redis: the rules' failure_mode answers until it is reachable";
const ONE_REDIS: &str = "one Redis serves every unit";

/// The Redis variables.
pub const GROUP: Group = Group {
    name: "Redis",
    vars: &[
        Var {
            name: "REDIS_SOCKET_TYPE",
            kind: VarType::Str,
            default: "unix",
            handling: Handling::Honoured(
                "`--redis-url`: with REDIS_TYPE=single, `tcp` reaches REDIS_URL as `host:port` or `redis://…`, `unix` as a socket path",
            ),
        },
        Var {
            name: "REDIS_TYPE",
            kind: VarType::Str,
            default: "SINGLE",
            handling: Handling::Honoured(
                "`--redis-url` (any case): `single`, `cluster` → `redis+cluster://<REDIS_URL>`, `sentinel` → `redis+sentinel://<host:port,…>/<master>`",
            ),
        },
        Var {
            name: "REDIS_URL",
            kind: VarType::Str,
            default: DEFAULT_URL,
            handling: Handling::Honoured(
                "`--redis-url`: `host:port`, `redis://…`, a socket path, a cluster's `host:port,…` seeds, or Sentinel's `<master>,<host:port>,…` (at least two items)",
            ),
        },
        Var {
            name: "REDIS_AUTH",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured(
                "`password` → `--redis-password`; `user:password` (split at the first `:`) → `--redis-username` and `--redis-password`; beats credentials in REDIS_URL",
            ),
        },
        Var {
            name: "REDIS_SENTINEL_AUTH",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured(
                "`--redis-sentinel-password` (and `--redis-sentinel-username`), split as REDIS_AUTH",
            ),
        },
        Var {
            name: "REDIS_POOL_SIZE",
            kind: VarType::Int,
            default: "10",
            handling: Handling::Differently(
                "`--redis-connections` (1 to 65535; sluice's 2 when not set): multiplexed connections, each carrying any number of calls at once (a cluster opens one per node)",
            ),
        },
        Var {
            name: "REDIS_TIMEOUT",
            kind: VarType::Duration,
            default: "10s",
            handling: Handling::Differently(
                "`--redis-connect-timeout` (sluice's 1s when not set): bounds connecting and the handshake, as upstream; each call is bounded by `--redis-timeout` (10ms), upstream's by the gRPC deadline",
            ),
        },
        Var {
            name: "REDIS_PIPELINE_WINDOW",
            kind: VarType::Duration,
            default: "0",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_PIPELINE_LIMIT",
            kind: VarType::Int,
            default: "0",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_CLUSTER_PIPELINE_PARALLELISM",
            kind: VarType::Int,
            default: "1",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            kind: VarType::Str,
            default: "WAIT",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_STARTUP_INITIAL_INTERVAL",
            kind: VarType::Duration,
            default: "1s",
            handling: Handling::Ignored(NO_WAIT),
        },
        Var {
            name: "REDIS_STARTUP_MAX_INTERVAL",
            kind: VarType::Duration,
            default: "30s",
            handling: Handling::Ignored(NO_WAIT),
        },
        Var {
            name: "REDIS_STARTUP_MAX_ELAPSED_TIME",
            kind: VarType::Duration,
            default: "0",
            handling: Handling::Ignored(NO_WAIT),
        },
        Var {
            name: "REDIS_PERSECOND",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Ignored(ONE_REDIS),
        },
        Var {
            name: "REDIS_PERSECOND_*",
            kind: VarType::Str,
            default: "",
            handling: Handling::Ignored(ONE_REDIS),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    if !matches!(target.args.store, StoreArg::Redis) {
        for name in URL_VARS
            .into_iter()
            .chain(STORE_VARS)
            .filter(|n| env.is_set(n))
        {
            target.note(name, "not used: the store is not Redis");
        }
        return Ok(());
    }
    target.unless_explicit(env, "redis_url", &URL_VARS, |args| {
        args.redis.redis_url = Some(url(env)?);
        Ok(())
    })?;
    credentials(
        env,
        target,
        "REDIS_AUTH",
        "redis_password",
        |args, user, password| {
            args.redis.redis_username = user;
            args.redis.redis_password = Some(password);
        },
    )?;
    credentials(
        env,
        target,
        "REDIS_SENTINEL_AUTH",
        "redis_sentinel_password",
        |args, user, password| {
            args.redis.redis_sentinel_username = user;
            args.redis.redis_sentinel_password = Some(password);
        },
    )?;
    if env.is_set("REDIS_POOL_SIZE") {
        target.unless_explicit(env, "redis_connections", &["REDIS_POOL_SIZE"], |args| {
            args.redis.redis_connections = pool_size(env)?;
            Ok(())
        })?;
    }
    if env.is_set("REDIS_TIMEOUT") {
        target.unless_explicit(env, "redis_connect_timeout", &["REDIS_TIMEOUT"], |args| {
            let timeout = env.duration("REDIS_TIMEOUT", Duration::ZERO)?;
            if timeout.is_zero() {
                return Err(env.error("REDIS_TIMEOUT", "must be more than 0"));
            }
            args.redis.redis_connect_timeout = GoDuration(timeout);
            Ok(())
        })?;
    }
    Ok(())
}

/// Whether envoyproxy/ratelimit's variables describe a Redis reached over a unix socket.
pub fn unix_socket(env: &Env) -> bool {
    env.string("REDIS_TYPE", "SINGLE")
        .eq_ignore_ascii_case("single")
        && env.string("REDIS_SOCKET_TYPE", "unix") == "unix"
}

/// The `--redis-url` envoyproxy/ratelimit's variables describe (credentials stay in REDIS_URL when
/// it has them; REDIS_AUTH goes to `--redis-password`, which beats them).
fn url(env: &Env) -> Result<String, EnvError> {
    let address = env.string("REDIS_URL", DEFAULT_URL);
    if address.is_empty() {
        return Err(env.error("REDIS_URL", "must not be empty"));
    }
    match env
        .string("REDIS_TYPE", "SINGLE")
        .to_ascii_lowercase()
        .as_str()
    {
        "single" => match env.string("REDIS_SOCKET_TYPE", "unix") {
            "tcp" => Ok(address.to_string()),
            "unix" => socket_url(env, address),
            _ => Err(env.error("REDIS_SOCKET_TYPE", "must be tcp or unix")),
        },
        "cluster" => Ok(format!("redis+cluster://{address}")),
        "sentinel" => sentinel_url(env, address),
        _ => Err(env.error("REDIS_TYPE", "must be single, cluster or sentinel")),
    }
}

/// A socket path, made absolute against the working directory as envoyproxy/ratelimit's dial
/// resolves it.
fn socket_url(env: &Env, path: &str) -> Result<String, EnvError> {
    let absolute = std::path::absolute(path)
        .map_err(|e| env.error_in("REDIS_URL", path, format!("not a socket path: {e}")))?;
    absolute
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| env.error_in("REDIS_URL", path, "not a UTF-8 socket path"))
}

/// Sentinel's `<master>,<host:port>[,…]` as `redis+sentinel://<host:port>,…/<master>`.
fn sentinel_url(env: &Env, list: &str) -> Result<String, EnvError> {
    let items: Vec<&str> = list.split(',').collect();
    match &items[..] {
        [master, sentinels @ ..]
            if !master.is_empty() && !sentinels.is_empty() && !sentinels.contains(&"") =>
        {
            Ok(format!(
                "redis+sentinel://{}/{master}",
                sentinels.join(",")
            ))
        }
        _ => Err(env.error_in(
            "REDIS_URL",
            list,
            "with REDIS_TYPE=sentinel write <master name>,<host:port>[,<host:port>…] (at least two items)",
        )),
    }
}

/// Writes `name` (`password` or `user:password`, split at the first `:`; an empty user is the
/// default user) through `write`, unless its flag `id` was given.
fn credentials(
    env: &Env,
    target: &mut ServeTarget<'_>,
    name: &str,
    id: &str,
    write: impl FnOnce(&mut ServeArgs, Option<String>, String),
) -> Result<(), EnvError> {
    let auth = env.string(name, "");
    if auth.is_empty() {
        return Ok(());
    }
    target.unless_explicit(env, id, &[name], |args| {
        let (user, password) = match auth.split_once(':') {
            Some((user, password)) => ((!user.is_empty()).then(|| user.to_owned()), password),
            None => (None, auth),
        };
        write(args, user, password.to_owned());
        Ok(())
    })
}

/// REDIS_POOL_SIZE as a number of connections.
fn pool_size(env: &Env) -> Result<usize, EnvError> {
    let size = env.int("REDIS_POOL_SIZE", 10)?;
    match u16::try_from(size) {
        Ok(n) if n >= 1 => Ok(usize::from(n)),
        _ => Err(env.error("REDIS_POOL_SIZE", "must be between 1 and 65535")),
    }
}
