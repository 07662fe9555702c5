//! The rule source: `CONFIG_TYPE` (FILE, or rules over xDS, which this build does not have),
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`, and the xDS client variables.

use super::env::Env;
use super::{EnvError, Group, Handling, Kind, Target, Var};

const NO_XDS: &str = "rules over xDS are not supported yet";

/// The rule source variables.
pub const GROUP: Group = Group {
    name: "Rule source",
    vars: &[
        Var {
            name: "CONFIG_TYPE",
            kind: Kind::Str,
            default: "FILE",
            handling: Handling::Differently(
                "`FILE` (case-sensitive) is honoured; `GRPC_XDS_SOTW` stops the start: rules over xDS are not supported yet",
            ),
        },
        Var {
            name: "FORCE_START_WITHOUT_INITIAL_CONFIG",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Differently(
                "no effect with FILE: sluice serves at once either way and reports unhealthy until a rule set loads",
            ),
        },
        Var {
            name: "CONFIG_GRPC_XDS_NODE_ID",
            kind: Kind::Str,
            default: "default",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_NODE_METADATA",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_SERVER_URL",
            kind: Kind::Str,
            default: "localhost:18000",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            kind: Kind::Duration,
            default: "3s",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            kind: Kind::Map,
            default: "",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_SERVER_USE_TLS",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            kind: Kind::Duration,
            default: "10s",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            kind: Kind::Duration,
            default: "60s",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            kind: Kind::Float,
            default: "0.5",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "XDS_CLIENT_BACKOFF_JITTER",
            kind: Kind::Bool,
            default: "true",
            handling: Handling::Ignored(NO_XDS),
        },
        Var {
            name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            kind: Kind::Int,
            default: "(4 MiB)",
            handling: Handling::Ignored(NO_XDS),
        },
    ],
    apply,
};

fn apply(env: &Env, _target: &mut Target<'_>) -> Result<(), EnvError> {
    match env.string("CONFIG_TYPE", "FILE") {
        "FILE" => Ok(()),
        "GRPC_XDS_SOTW" => Err(env.error("CONFIG_TYPE", NO_XDS)),
        _ => Err(env.error(
            "CONFIG_TYPE",
            "must be FILE or GRPC_XDS_SOTW (case-sensitive)",
        )),
    }
}
