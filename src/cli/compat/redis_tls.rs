//! TLS to Redis: `REDIS_TLS` and the files and checks that go with it.

use super::env::Env;
use super::redis::unix_socket;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::serve::StoreArg;

const SWITCH: &str = "REDIS_TLS";
const CA: &str = "REDIS_TLS_CACERT";
const CERT: &str = "REDIS_TLS_CLIENT_CERT";
const KEY: &str = "REDIS_TLS_CLIENT_KEY";
const SKIP: &str = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION";
/// The variables that take effect only with REDIS_TLS=true.
const WITH_TLS: [&str; 4] = [CA, CERT, KEY, SKIP];

/// The Redis TLS variables.
pub const GROUP: Group = Group {
    name: "Redis TLS",
    vars: &[
        Var {
            name: SWITCH,
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured(
                "`--redis-tls`: TLS to every node (single, cluster, the sentinels and their master); refused with a unix socket",
            ),
        },
        Var {
            name: CA,
            kind: VarType::Str,
            default: "",
            handling: Handling::Differently(
                "`--redis-ca`: trusted roots are this file only (upstream adds the system's)",
            ),
        },
        Var {
            name: CERT,
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured("`--redis-client-cert` (with REDIS_TLS_CLIENT_KEY)"),
        },
        Var {
            name: KEY,
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured("`--redis-client-key` (with REDIS_TLS_CLIENT_CERT)"),
        },
        Var {
            name: SKIP,
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured(
                "`--redis-tls-skip-hostname-verification`: the chain is still verified",
            ),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let names = [SWITCH].into_iter().chain(WITH_TLS);
    if !matches!(target.args.store, StoreArg::Redis) {
        for name in names.filter(|n| env.is_set(n)) {
            target.note(name, "not used: the store is not Redis");
        }
        return Ok(());
    }
    let tls = env.bool(SWITCH, false)?;
    if !tls {
        // envoyproxy/ratelimit reads the files only with TLS on; sluice refuses TLS files without
        // TLS.
        for name in WITH_TLS.into_iter().filter(|n| env.is_set(n)) {
            target.note(name, "no effect without REDIS_TLS=true, as upstream");
        }
        return Ok(());
    }
    if unix_socket(env) && !target.explicit("redis_url") {
        return Err(env.error(SWITCH, "TLS on a unix socket is not supported"));
    }
    target.unless_explicit(env, "redis_tls", &[SWITCH], |args| {
        args.redis.redis_tls = true;
        Ok(())
    })?;
    let file = |name: &str| Some(env.string(name, "")).filter(|p| !p.is_empty());
    if let Some(ca) = file(CA) {
        target.unless_explicit(env, "redis_ca", &[CA], |args| {
            args.redis.redis_ca = Some(ca.into());
            Ok(())
        })?;
    }
    match (file(CERT), file(KEY)) {
        (Some(cert), Some(key)) => {
            target.unless_explicit(env, "redis_client_cert", &[CERT, KEY], |args| {
                args.redis.redis_client_cert = Some(cert.into());
                args.redis.redis_client_key = Some(key.into());
                Ok(())
            })?;
        }
        (Some(_), None) => return Err(env.error(CERT, "needs REDIS_TLS_CLIENT_KEY")),
        (None, Some(_)) => return Err(env.error(KEY, "needs REDIS_TLS_CLIENT_CERT")),
        (None, None) => {}
    }
    target.unless_explicit(
        env,
        "redis_tls_skip_hostname_verification",
        &[SKIP],
        |args| {
            args.redis.redis_tls_skip_hostname_verification = env.bool(SKIP, false)?;
            Ok(())
        },
    )
}
