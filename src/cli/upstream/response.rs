//! Response options: `SHADOW_MODE`, `QUOTA_MODE`, dynamic metadata and upstream's headers.

use super::env::Env;
use super::{EnvError, Group, Handling, Kind, Target, Var};

const NOT_YET: &str = "not supported yet";

/// The response variables.
pub const GROUP: Group = Group {
    name: "Responses",
    vars: &[
        Var {
            name: "SHADOW_MODE",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Honoured("`--shadow-mode`"),
        },
        Var {
            name: "QUOTA_MODE",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "RESPONSE_DYNAMIC_METADATA",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "LIMIT_RESPONSE_HEADERS_ENABLED",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "LIMIT_LIMIT_HEADER",
            kind: Kind::Str,
            default: "RateLimit-Limit",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "LIMIT_REMAINING_HEADER",
            kind: Kind::Str,
            default: "RateLimit-Remaining",
            handling: Handling::Ignored(NOT_YET),
        },
        Var {
            name: "LIMIT_RESET_HEADER",
            kind: Kind::Str,
            default: "RateLimit-Reset",
            handling: Handling::Ignored(NOT_YET),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut Target<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "shadow_mode", &["SHADOW_MODE"], |args| {
        args.shadow_mode = env.bool("SHADOW_MODE", false)?;
        Ok(())
    })
}
