//! gRPC server TLS: `GRPC_SERVER_USE_TLS` with its certificate and key, client certificates
//! (`GRPC_CLIENT_TLS_CACERT`, `GRPC_CLIENT_TLS_SAN`).

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};

const USE_TLS: &str = "GRPC_SERVER_USE_TLS";
const CERT: &str = "GRPC_SERVER_TLS_CERT";
const KEY: &str = "GRPC_SERVER_TLS_KEY";
const CLIENT_CA: &str = "GRPC_CLIENT_TLS_CACERT";
const CLIENT_SAN: &str = "GRPC_CLIENT_TLS_SAN";

/// The TLS variables.
pub const GROUP: Group = Group {
    name: "gRPC TLS",
    vars: &[
        Var {
            name: USE_TLS,
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured("TLS on gRPC (`--tls-cert`, `--tls-key`)"),
        },
        Var {
            name: CERT,
            kind: VarType::Str,
            default: "",
            handling: Handling::Differently(
                "`--tls-cert`, reloaded when it changes; the key need not be in the same directory",
            ),
        },
        Var {
            name: KEY,
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured("`--tls-key`, reloaded when it changes"),
        },
        Var {
            name: CLIENT_CA,
            kind: VarType::Str,
            default: "",
            handling: Handling::Differently(
                "`--tls-client-ca`: client certificates required; trusted roots are this file only (upstream adds the system's), and it is reloaded when it changes",
            ),
        },
        Var {
            name: CLIENT_SAN,
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured(
                "`--tls-client-san`: the client certificate must be valid for this name",
            ),
        },
        Var {
            name: "GRPC_SERVER_TLS_CA_CERT",
            kind: VarType::Str,
            default: "",
            handling: Handling::Ignored(
                "not an envoyproxy/ratelimit variable (Envoy Gateway sets it); client certificates are asked for only with GRPC_CLIENT_TLS_CACERT, as upstream",
            ),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let files = [CERT, KEY, CLIENT_CA, CLIENT_SAN];
    if !env.bool(USE_TLS, false)? {
        for name in files
            .into_iter()
            .filter(|n| env.get(n).is_some_and(|v| !v.is_empty()))
        {
            target.note(
                name,
                "no effect without GRPC_SERVER_USE_TLS=true, as upstream",
            );
        }
        return Ok(());
    }
    target.unless_explicit(env, "tls_cert", &files, |args| {
        let (cert, key) = (env.string(CERT, ""), env.string(KEY, ""));
        if cert.is_empty() || key.is_empty() {
            return Err(env.error(
                USE_TLS,
                "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
            ));
        }
        args.tls.tls_cert = Some(cert.into());
        args.tls.tls_key = Some(key.into());
        let ca = env.string(CLIENT_CA, "");
        args.tls.tls_client_ca = (!ca.is_empty()).then(|| ca.into());
        let san = env.string(CLIENT_SAN, "");
        args.tls.tls_client_san = (!san.is_empty()).then(|| san.to_string());
        Ok(())
    })?;
    if env.string(CLIENT_CA, "").is_empty() && !env.string(CLIENT_SAN, "").is_empty() {
        target.note(
            CLIENT_SAN,
            "no effect without GRPC_CLIENT_TLS_CACERT, as upstream",
        );
    }
    Ok(())
}
