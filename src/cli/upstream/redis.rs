//! Redis as upstream configures it: `REDIS_SOCKET_TYPE`, `REDIS_TYPE`, `REDIS_URL`,
//! `REDIS_AUTH`, `REDIS_TLS*`, and the pool and start-up tuning sluice does not need.

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use super::env::Env;
use super::{EnvError, Group, Handling, Kind, Target, Var};
use crate::cli::serve::StoreArg;

const URL_VARS: [&str; 5] = [
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_TLS",
];
const NOT_YET: &str = "not supported yet";
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
            kind: Kind::Str,
            default: "unix",
            handling: Handling::Differently(
                "`tcp` is honoured (`--redis-url redis://…`); `unix` stops the start (not supported yet)",
            ),
        },
        Var {
            name: "REDIS_TYPE",
            kind: Kind::Str,
            default: "SINGLE",
            handling: Handling::Differently(
                "`single` and `cluster` (any case) are honoured (`redis://`, `redis+cluster://`); `sentinel` stops the start (not supported yet)",
            ),
        },
        Var {
            name: "REDIS_URL",
            kind: Kind::Str,
            default: "/var/run/nutcracker/ratelimit.sock",
            handling: Handling::Honoured(
                "`--redis-url`: `host:port`, `redis://…`, or a cluster's `host:port,…` seeds",
            ),
        },
        Var {
            name: "REDIS_AUTH",
            kind: Kind::Str,
            default: "",
            handling: Handling::Honoured(
                "`password` or `user:password`, in `--redis-url` (beats credentials in REDIS_URL)",
            ),
        },
        Var {
            name: "REDIS_TLS",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Honoured("`rediss://`"),
        },
        Var {
            name: "REDIS_TLS_CACERT",
            kind: Kind::Str,
            default: "",
            handling: Handling::Differently(
                "`--redis-ca`: trusted roots are this file only (upstream adds the system's)",
            ),
        },
        Var {
            name: "REDIS_TLS_CLIENT_CERT",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "REDIS_TLS_CLIENT_KEY",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "REDIS_SENTINEL_AUTH",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "REDIS_POOL_SIZE",
            kind: Kind::Int,
            default: "10",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_TIMEOUT",
            kind: Kind::Duration,
            default: "10s",
            handling: Handling::Ignored(
                "upstream bounds connecting with it; sluice bounds each call with `--redis-timeout` (10ms)",
            ),
        },
        Var {
            name: "REDIS_PIPELINE_WINDOW",
            kind: Kind::Duration,
            default: "0",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_PIPELINE_LIMIT",
            kind: Kind::Int,
            default: "0",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_CLUSTER_PIPELINE_PARALLELISM",
            kind: Kind::Int,
            default: "1",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            kind: Kind::Str,
            default: "WAIT",
            handling: Handling::Ignored(BATCHED),
        },
        Var {
            name: "REDIS_STARTUP_INITIAL_INTERVAL",
            kind: Kind::Duration,
            default: "1s",
            handling: Handling::Ignored(NO_WAIT),
        },
        Var {
            name: "REDIS_STARTUP_MAX_INTERVAL",
            kind: Kind::Duration,
            default: "30s",
            handling: Handling::Ignored(NO_WAIT),
        },
        Var {
            name: "REDIS_STARTUP_MAX_ELAPSED_TIME",
            kind: Kind::Duration,
            default: "0",
            handling: Handling::Ignored(NO_WAIT),
        },
        Var {
            name: "REDIS_PERSECOND",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(ONE_REDIS),
        },
        Var {
            name: "REDIS_PERSECOND_*",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(ONE_REDIS),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut Target<'_>) -> Result<(), EnvError> {
    if !matches!(target.args.store, StoreArg::Redis) {
        for name in URL_VARS.into_iter().filter(|n| env.is_set(n)) {
            target.note(name, "not used: the store is not Redis");
        }
        return Ok(());
    }
    target.unless_explicit(env, "redis_url", &URL_VARS, |args| {
        args.redis.redis_url = Some(url(env)?);
        Ok(())
    })?;
    let ca = env.string("REDIS_TLS_CACERT", "");
    if !ca.is_empty() {
        target.unless_explicit(env, "redis_ca", &["REDIS_TLS_CACERT"], |args| {
            args.redis.redis_ca = Some(ca.into());
            Ok(())
        })?;
    }
    Ok(())
}

/// The `--redis-url` upstream's variables describe.
fn url(env: &Env) -> Result<String, EnvError> {
    let tls = env.bool("REDIS_TLS", false)?;
    let scheme = if tls { "rediss" } else { "redis" };
    let address = env.string("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    let auth = credentials(env.string("REDIS_AUTH", ""));
    match env
        .string("REDIS_TYPE", "SINGLE")
        .to_ascii_lowercase()
        .as_str()
    {
        "single" => match env.string("REDIS_SOCKET_TYPE", "unix") {
            "tcp" => Ok(single(scheme, address, auth.as_deref())),
            "unix" => Err(env.error(
                "REDIS_SOCKET_TYPE",
                "unix sockets are not supported yet: use tcp",
            )),
            _ => Err(env.error("REDIS_SOCKET_TYPE", "must be tcp or unix")),
        },
        "cluster" => Ok(format!(
            "{scheme}+cluster://{}{address}",
            auth.map(|a| a + "@").unwrap_or_default()
        )),
        "sentinel" => Err(env.error("REDIS_TYPE", "Redis Sentinel is not supported yet")),
        _ => Err(env.error("REDIS_TYPE", "must be single, cluster or sentinel")),
    }
}

/// One Redis: `host:port`, or upstream's `redis://[user[:pass]@]host:port[/db]` whose
/// credentials REDIS_AUTH replaces.
fn single(scheme: &str, address: &str, auth: Option<&str>) -> String {
    let rest = address.strip_prefix("redis://").unwrap_or(address);
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None => (rest, String::new()),
    };
    let (own, host) = match authority.rsplit_once('@') {
        Some((own, host)) => (Some(own), host),
        None => (None, authority),
    };
    match auth.or(own) {
        Some(auth) => format!("{scheme}://{auth}@{host}{path}"),
        None => format!("{scheme}://{host}{path}"),
    }
}

/// REDIS_AUTH (`password` or `user:password`, split at the first `:`) as URL user information.
fn credentials(auth: &str) -> Option<String> {
    if auth.is_empty() {
        return None;
    }
    let encode = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
    Some(match auth.split_once(':') {
        Some((user, password)) => format!("{}:{}", encode(user), encode(password)),
        None => format!(":{}", encode(auth)),
    })
}
