//! Listeners: `HOST`/`PORT` (HTTP), `GRPC_HOST`/`GRPC_PORT` or `GRPC_UDS` (gRPC), gRPC
//! connection age; the debug listener sluice does not have.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use sluice::clock::duration::GoDuration;

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};

/// The listener variables.
pub const GROUP: Group = Group {
    name: "Listeners",
    vars: &[
        Var {
            name: "HOST",
            kind: VarType::Str,
            default: "0.0.0.0",
            handling: Handling::Honoured("`--http-addr` (`::` listens on IPv6 and IPv4)"),
        },
        Var {
            name: "PORT",
            kind: VarType::Int,
            default: "8080",
            handling: Handling::Honoured("`--http-addr`"),
        },
        Var {
            name: "GRPC_HOST",
            kind: VarType::Str,
            default: "0.0.0.0",
            handling: Handling::Honoured("`--grpc-addr` (`::` listens on IPv6 and IPv4)"),
        },
        Var {
            name: "GRPC_PORT",
            kind: VarType::Int,
            default: "8081",
            handling: Handling::Honoured("`--grpc-addr`"),
        },
        Var {
            name: "GRPC_UDS",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured("`--grpc-socket` (plaintext only)"),
        },
        Var {
            name: "GRPC_MAX_CONNECTION_AGE",
            kind: VarType::Duration,
            default: "24h",
            handling: Handling::Honoured(
                "`--grpc-max-connection-age` (each connection's age moved by a random ±10 %, as grpc-go does)",
            ),
        },
        Var {
            name: "GRPC_MAX_CONNECTION_AGE_GRACE",
            kind: VarType::Duration,
            default: "1h",
            handling: Handling::Honoured("`--grpc-max-connection-age-grace`"),
        },
        Var {
            name: "DEBUG_HOST",
            kind: VarType::Str,
            default: "0.0.0.0",
            handling: Handling::Ignored(
                "no debug listener: /rlconfig and /metrics are on PORT; no pprof or expvar",
            ),
        },
        Var {
            name: "DEBUG_PORT",
            kind: VarType::Int,
            default: "6070",
            handling: Handling::Ignored(
                "no debug listener: /rlconfig and /metrics are on PORT; no pprof or expvar",
            ),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "http_addr", &["HOST", "PORT"], |args| {
        args.http_addr = address(env, "HOST", "PORT", 8080)?;
        Ok(())
    })?;
    let uds = env.get("GRPC_UDS").filter(|path| !path.is_empty());
    match uds {
        Some(path) => target.unless_explicit(env, "grpc_socket", &["GRPC_UDS"], |args| {
            args.serving.grpc_socket = Some(path.into());
            Ok(())
        })?,
        None => target.unless_explicit(env, "grpc_addr", &["GRPC_HOST", "GRPC_PORT"], |args| {
            args.grpc_addr = address(env, "GRPC_HOST", "GRPC_PORT", 8081)?;
            Ok(())
        })?,
    }
    if uds.is_some() {
        for name in ["GRPC_HOST", "GRPC_PORT"]
            .into_iter()
            .filter(|n| env.is_set(n))
        {
            target.note(name, "GRPC_UDS replaces it");
        }
    }
    let age = &["GRPC_MAX_CONNECTION_AGE"];
    target.unless_explicit(env, "grpc_max_connection_age", age, |args| {
        let default = args.serving.grpc_max_connection_age.0;
        args.serving.grpc_max_connection_age = GoDuration(env.duration(age[0], default)?);
        Ok(())
    })?;
    let grace = &["GRPC_MAX_CONNECTION_AGE_GRACE"];
    target.unless_explicit(env, "grpc_max_connection_age_grace", grace, |args| {
        let default = args.serving.grpc_max_connection_age_grace.0;
        args.serving.grpc_max_connection_age_grace = GoDuration(env.duration(grace[0], default)?);
        Ok(())
    })
}

/// The address envoyproxy/ratelimit listens on for `host` and `port` (Go's `host:port`): an IP
/// literal, a name resolved now, or an empty host for every interface.
fn address(env: &Env, host: &str, port: &str, default_port: i64) -> Result<SocketAddr, EnvError> {
    let number = env.int(port, default_port)?;
    let number = u16::try_from(number).map_err(|_| env.error(port, "not a port (0 to 65535)"))?;
    let name = env.string(host, "0.0.0.0");
    resolve(name, number).map_err(|problem| env.error(host, problem))
}

/// `name` and `port` as a socket address: an IP literal (brackets allowed), `""` for every
/// interface (`[::]`, which also accepts IPv4), or a host name resolved once.
pub fn resolve(name: &str, port: u16) -> Result<SocketAddr, String> {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if bare.is_empty() {
        return Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    }
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (bare, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host: {e}"))?
        .next()
        .ok_or_else(|| "the host name has no address".to_string())
}

/// Go's `host:port` listen address (`:9090`, `0.0.0.0:9090`, `[::1]:9090`).
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| "not host:port (e.g. :9090)".to_string())?;
    let port = super::env::go_int(port)
        .ok()
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| format!("'{port}' is not a port"))?;
    resolve(host, port)
}
