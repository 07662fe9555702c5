//! The rule source: `CONFIG_TYPE` (`FILE`, or `GRPC_XDS_SOTW`: rules over xDS),
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`, and the xDS client's variables, onto the `--xds-*`
//! flags.

use std::time::Duration;

use sluice::clock::duration::GoDuration;

use super::env::{self, Env};
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};

const CONFIG_TYPE: &str = "CONFIG_TYPE";
const FORCE_START: &str = "FORCE_START_WITHOUT_INITIAL_CONFIG";
const URL: &str = "CONFIG_GRPC_XDS_SERVER_URL";
const NODE_ID: &str = "CONFIG_GRPC_XDS_NODE_ID";
const NODE_METADATA: &str = "CONFIG_GRPC_XDS_NODE_METADATA";
const HEADERS: &str = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS";
const USE_TLS: &str = "CONFIG_GRPC_XDS_SERVER_USE_TLS";
const CLIENT_CERT: &str = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT";
const CLIENT_KEY: &str = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY";
const SERVER_CA: &str = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT";
const SERVER_SAN: &str = "CONFIG_GRPC_XDS_SERVER_TLS_SAN";
const RETRY_INTERVAL: &str = "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL";
const BACKOFF_INITIAL: &str = "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL";
const BACKOFF_MAX: &str = "XDS_CLIENT_BACKOFF_MAX_INTERVAL";
const BACKOFF_FACTOR: &str = "XDS_CLIENT_BACKOFF_RANDOM_FACTOR";
const BACKOFF_JITTER: &str = "XDS_CLIENT_BACKOFF_JITTER";
const MAX_MESSAGE: &str = "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES";

/// Why the xDS variables do nothing with `CONFIG_TYPE=FILE`.
const FILE_ONLY: &str = "no effect without CONFIG_TYPE=GRPC_XDS_SOTW, as upstream";

/// The rule source variables.
pub const GROUP: Group = Group {
    name: "Rule source (xDS)",
    vars: &[
        var(
            CONFIG_TYPE,
            VarType::Str,
            "FILE",
            Handling::Honoured(
                "`FILE` (rule files) or `GRPC_XDS_SOTW` (`--xds-server`: rules over xDS, state of the world), case-sensitive",
            ),
        ),
        var(
            FORCE_START,
            VarType::Bool,
            "false",
            Handling::Honoured(
                "`--xds-force-start`: serve before the first rules (every call OK, healthy); without it sluice's ports open at once but health is 503/NOT_SERVING and calls fail UNAVAILABLE until then (upstream keeps its ports closed); no effect with FILE",
            ),
        ),
        var(
            URL,
            VarType::Str,
            "localhost:18000",
            Handling::Honoured("`--xds-server` (`host:port`; the host is the TLS name)"),
        ),
        var(
            NODE_ID,
            VarType::Str,
            "default",
            Handling::Honoured("`--xds-node-id`"),
        ),
        var(
            NODE_METADATA,
            VarType::Str,
            "",
            Handling::Honoured("`--xds-node-metadata` (`k=v,k2=v2`, string values)"),
        ),
        var(
            HEADERS,
            VarType::Map,
            "",
            Handling::Honoured("`--xds-header`: gRPC metadata on the stream"),
        ),
        var(
            USE_TLS,
            VarType::Bool,
            "false",
            Handling::Honoured("`--xds-tls`"),
        ),
        var(
            CLIENT_CERT,
            VarType::Str,
            "",
            Handling::Differently(
                "`--xds-tls-cert`; read again at every connection attempt (upstream: once)",
            ),
        ),
        var(
            CLIENT_KEY,
            VarType::Str,
            "",
            Handling::Differently(
                "`--xds-tls-key`; read again at every connection attempt (upstream: once)",
            ),
        ),
        var(
            SERVER_CA,
            VarType::Str,
            "",
            Handling::Honoured("`--xds-tls-ca`, trusted besides the system's roots"),
        ),
        var(
            SERVER_SAN,
            VarType::Str,
            "",
            Handling::Honoured("`--xds-tls-server-name`"),
        ),
        var(
            RETRY_INTERVAL,
            VarType::Duration,
            "3s",
            Handling::Ignored(
                "inert in upstream too (its retry interceptor makes no retries); reconnection pauses are XDS_CLIENT_BACKOFF_*",
            ),
        ),
        var(
            BACKOFF_INITIAL,
            VarType::Duration,
            "10s",
            Handling::Differently(
                "`--xds-backoff-initial`; sluice doubles the pause per failed attempt (upstream grows it by RANDOM_FACTOR, so by default never); unset: sluice's 1s",
            ),
        ),
        var(
            BACKOFF_MAX,
            VarType::Duration,
            "60s",
            Handling::Differently("`--xds-backoff-max`; unset: sluice's 30s"),
        ),
        var(
            BACKOFF_FACTOR,
            VarType::Float,
            "0.5",
            Handling::Differently(
                "`--xds-backoff-random-factor`: how far below its length a pause may fall, 0 to 1 (upstream uses it as the growth factor); above 1 is taken as 1",
            ),
        ),
        var(
            BACKOFF_JITTER,
            VarType::Bool,
            "true",
            Handling::Honoured("`--xds-backoff-no-jitter` when false"),
        ),
        var(
            MAX_MESSAGE,
            VarType::Int,
            "(4 MiB)",
            Handling::Honoured("`--xds-max-message-size`"),
        ),
    ],
    apply,
};

const fn var(name: &'static str, kind: VarType, default: &'static str, handling: Handling) -> Var {
    Var {
        name,
        kind,
        default,
        handling,
    }
}

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let xds = match env.string(CONFIG_TYPE, "FILE") {
        "FILE" => false,
        "GRPC_XDS_SOTW" => true,
        _ => {
            let problem = "must be FILE or GRPC_XDS_SOTW (case-sensitive)";
            return Err(env.error(CONFIG_TYPE, problem));
        }
    };
    let xds_names = GROUP.vars.iter().skip(1).map(|v| v.name);
    if !xds {
        for name in xds_names.filter(|n| env.is_set(n)) {
            let why = if name == FORCE_START {
                "no effect with FILE: sluice serves at once either way, unhealthy until a rule set loads"
            } else {
                FILE_ONLY
            };
            target.note(name, why);
        }
        return Ok(());
    }
    if target.explicit("config") {
        for name in std::iter::once(CONFIG_TYPE).chain(xds_names) {
            if env.is_set(name) {
                target.note(name, "overridden by --config");
            }
        }
        return Ok(());
    }
    stream(env, target)?;
    tls(env, target)?;
    backoff(env, target)
}

/// The control plane, the node, the headers, the message size, force-start.
fn stream(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "xds_server", &[URL], |args| {
        args.xds.xds_server = Some(env.string(URL, "localhost:18000").to_string());
        Ok(())
    })?;
    target.unless_explicit(env, "xds_node_id", &[NODE_ID], |args| {
        args.xds.xds_node_id = env.string(NODE_ID, "default").to_string();
        Ok(())
    })?;
    let metadata = env.parsed(NODE_METADATA, node_metadata)?;
    target.unless_explicit(env, "xds_node_metadata", &[NODE_METADATA], |args| {
        args.xds.xds_node_metadata = metadata.unwrap_or_default();
        Ok(())
    })?;
    let headers = env.parsed(HEADERS, env::go_map)?;
    target.unless_explicit(env, "xds_header", &[HEADERS], |args| {
        args.xds.xds_header = headers.unwrap_or_default();
        Ok(())
    })?;
    target.unless_explicit(env, "xds_max_message_size", &[MAX_MESSAGE], |args| {
        if let Some(size) = env.parsed(MAX_MESSAGE, env::go_int)? {
            args.xds.xds_max_message_size = usize::try_from(size)
                .ok()
                .filter(|&s| (1..=u32::MAX as usize).contains(&s))
                .ok_or_else(|| env.error(MAX_MESSAGE, "must be between 1 and 4294967295"))?;
        }
        Ok(())
    })?;
    target.unless_explicit(env, "xds_force_start", &[FORCE_START], |args| {
        args.xds.xds_force_start = env.bool(FORCE_START, false)?;
        Ok(())
    })
}

/// TLS to the control plane: the files count only with `CONFIG_GRPC_XDS_SERVER_USE_TLS`.
fn tls(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let files = [CLIENT_CERT, CLIENT_KEY, SERVER_CA, SERVER_SAN];
    if !env.bool(USE_TLS, false)? {
        for name in files.into_iter().filter(|n| set_nonempty(env, n)) {
            target.note(
                name,
                "no effect without CONFIG_GRPC_XDS_SERVER_USE_TLS=true, as upstream",
            );
        }
        return Ok(());
    }
    target.unless_explicit(env, "xds_tls", &[USE_TLS], |args| {
        args.xds.xds_tls = true;
        Ok(())
    })?;
    let pair = [CLIENT_CERT, CLIENT_KEY];
    target.unless_explicit(env, "xds_tls_cert", &pair, |args| {
        // envoyproxy/ratelimit loads a client certificate only when both files are named.
        if let (Some(cert), Some(key)) = (nonempty(env, CLIENT_CERT), nonempty(env, CLIENT_KEY)) {
            args.xds.xds_tls_cert = Some(cert.into());
            args.xds.xds_tls_key = Some(key.into());
        }
        Ok(())
    })?;
    target.unless_explicit(env, "xds_tls_ca", &[SERVER_CA], |args| {
        args.xds.xds_tls_ca = nonempty(env, SERVER_CA).map(Into::into);
        Ok(())
    })?;
    target.unless_explicit(env, "xds_tls_server_name", &[SERVER_SAN], |args| {
        args.xds.xds_tls_server_name = nonempty(env, SERVER_SAN).map(str::to_string);
        Ok(())
    })
}

/// Reconnection pauses; an unset variable keeps sluice's default (see the table).
fn backoff(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let initial = pause(env, BACKOFF_INITIAL)?;
    target.unless_explicit(env, "xds_backoff_initial", &[BACKOFF_INITIAL], |args| {
        if let Some(d) = initial {
            args.xds.xds_backoff_initial = d;
        }
        Ok(())
    })?;
    let max = pause(env, BACKOFF_MAX)?;
    target.unless_explicit(env, "xds_backoff_max", &[BACKOFF_MAX], |args| {
        if let Some(d) = max {
            args.xds.xds_backoff_max = d;
        }
        Ok(())
    })?;
    let factor = match env.parsed(BACKOFF_FACTOR, env::go_float)? {
        Some(f) if f < 0.0 => return Err(env.error(BACKOFF_FACTOR, "must not be negative")),
        factor => factor,
    };
    if factor.is_some_and(|f| f > 1.0) {
        let why = "taken as 1: sluice doubles its pauses, the factor is the jitter band";
        target.note(BACKOFF_FACTOR, why);
    }
    target.unless_explicit(
        env,
        "xds_backoff_random_factor",
        &[BACKOFF_FACTOR],
        |args| {
            if let Some(f) = factor {
                args.xds.xds_backoff_random_factor = f.min(1.0);
            }
            Ok(())
        },
    )?;
    target.unless_explicit(env, "xds_backoff_no_jitter", &[BACKOFF_JITTER], |args| {
        args.xds.xds_backoff_no_jitter = !env.bool(BACKOFF_JITTER, true)?;
        Ok(())
    })
}

/// A reconnection pause, 1ms to 1h (the flags' range).
fn pause(env: &Env, name: &str) -> Result<Option<GoDuration>, EnvError> {
    if !env.is_set(name) {
        return Ok(None);
    }
    match env.duration(name, Duration::ZERO)? {
        d if d < Duration::from_millis(1) || d > Duration::from_secs(3_600) => {
            Err(env.error(name, "must be between 1ms and 1h"))
        }
        d => Ok(Some(GoDuration(d))),
    }
}

/// `k=v,k2=v2` (envoyproxy/ratelimit splits on `,` then `=`); a pair without `=` is an error.
fn node_metadata(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!(
                "invalid metadata item {pair:?} (write key=value,key=value)"
            )),
        })
        .collect()
}

fn nonempty<'e>(env: &'e Env, name: &str) -> Option<&'e str> {
    env.get(name).filter(|v| !v.is_empty())
}

fn set_nonempty(env: &Env, name: &str) -> bool {
    nonempty(env, name).is_some()
}
